"""The Starlette app: AppState (config, metrics, engine pool, service) with the route handlers, and create_app.

Imports service, protocol, audio, metrics, engine.pool, text (its warm-up); never an engine's internals, never torch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from realtime_tts import protocol, text
from realtime_tts.api import dialects
from realtime_tts.api.access_log import access_log
from realtime_tts.api.demo import routes as demo_routes
from realtime_tts.api.drain import Drain
from realtime_tts.api.errors import error_response
from realtime_tts.api.guard import Guard, keep_ws_protocol, principal_of
from realtime_tts.api.http import _form, _json_body, respond, style_instructions
from realtime_tts.api.simple_ws import SimpleSession
from realtime_tts.api.voices import ReferenceCache, reference_bytes, voice_routes
from realtime_tts.audio_out import RESPONSE_FORMATS
from realtime_tts.auth import ANONYMOUS, Authenticator, install_log_redaction
from realtime_tts.config import Config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import BadRequest, Cancelled, NotFound, TTSError
from realtime_tts.limits import ConnectionLimiter, RateLimiter
from realtime_tts.metrics import CONTENT_TYPE, Metrics
from realtime_tts.service import Service
from realtime_tts.voices.store import VoiceStore

log = logging.getLogger(__name__)


class AppState:
    def __init__(self, config: Config):
        self.config = config
        self.metrics = Metrics()
        self.pool = EnginePool(config)
        self.voices = VoiceStore(config.omnivoice.voices_dir)
        self.references = ReferenceCache()  # inline clone references, encoded once
        self.service = Service(config, self.pool, self.metrics, self.voices)
        self.auth = Authenticator.from_config(config.security)
        lim = config.limits
        self.connections = ConnectionLimiter(lim.max_connections, lim.max_connections_per_key)
        self.rate = RateLimiter(lim.requests_per_key_per_s)

    # HTTP handlers ------------------------------------------------------------------------------------------

    async def speech(self, request: Request) -> Response:
        obj = await _json_body(request, self.config.server.max_ws_message_bytes * 4)
        # OpenAI's default format is mp3 (omnivoice-triton-server's "stream": true alone still gets pcm deltas)
        req = protocol.parse_speech(obj, max_chars=self.config.text.max_text_chars, formats=RESPONSE_FORMATS,
                                    default_format="mp3")
        req = style_instructions(self.pool, req)
        prompt = await self.references.for_request(self, req)
        synth = self.service.open(req, endpoint="speech", streaming=req.stream is not False, prompt=prompt)
        return await respond(self, req, endpoint="speech", synth=synth)

    async def synth(self, request: Request) -> Response:
        obj = await _json_body(request, self.config.server.max_ws_message_bytes * 4)
        req = protocol.parse_synth(obj, max_chars=self.config.text.max_text_chars)
        prompt = await self.references.for_request(self, req)
        synth = self.service.open(req, endpoint="synth", streaming=False, prompt=prompt)
        return await respond(self, req, endpoint="synth", synth=synth)

    async def clone(self, request: Request) -> Response:
        # Before the body is read: an engine that can clone (the CPU voice alone answers 400 naming omnivoice).
        self.pool.route(request.query_params.get("model"), "clone")
        fields, files = await _form(request)
        if str(fields.get("voice", "")).lower() == "clone":
            fields.pop("voice")  # the endpoint already says "clone"; the reference comes with the request
        req = protocol.parse_speech(fields, max_chars=self.config.text.max_text_chars, formats=RESPONSE_FORMATS,
                                    allowed=protocol.CLONE_FIELDS | set(files), coerce=True)
        params = dataclasses.replace(req.params, voice_mode="clone", voice="clone")
        engine = self.pool.route(params.model, "clone")  # the CPU voice refuses here: 400 naming omnivoice
        recording = await reference_bytes(fields, files)
        prompt = await self.references.prompt(self.service, engine, recording, req.ref_text)
        req = dataclasses.replace(req, params=params)
        synth = self.service.open(req, endpoint="clone", streaming=req.stream is not False, prompt=prompt, engine=engine)
        return await respond(self, req, endpoint="clone", synth=synth)

    async def design(self, request: Request) -> Response:
        fields, _ = await _form(request)
        fields.pop("voice", None) if str(fields.get("voice", "")).lower() == "design" else None
        req = protocol.parse_speech(fields, max_chars=self.config.text.max_text_chars, formats=RESPONSE_FORMATS,
                                    allowed=protocol.DESIGN_FIELDS, coerce=True)
        if req.params.instruct is None:
            raise BadRequest("instruct is required (a description of the voice)", field="instruct")
        params = dataclasses.replace(req.params, voice_mode="design", voice="design")
        engine = self.pool.route(params.model, "design")
        req = dataclasses.replace(req, params=params)
        synth = self.service.open(req, endpoint="design", streaming=req.stream is not False, engine=engine)
        return await respond(self, req, endpoint="design", synth=synth)

    async def auth_token(self, request: Request) -> Response:
        """POST /v1/auth/token: a short-lived token for the caller's key (browser WebSockets: ?token=...)."""
        raw = await request.body()
        obj = protocol.body_object(raw) if raw.strip() else {}
        ttl = obj.get("ttl_s")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0):
            raise BadRequest("ttl_s must be a number of seconds > 0", field="ttl_s")
        token, expires_at = self.auth.mint(principal_of(request) or ANONYMOUS, ttl)
        return JSONResponse({"token": token, "expires_at": expires_at,
                             "expires_in": round(expires_at - time.time(), 3), "query_parameter": "token"})

    async def health(self, request: Request) -> Response:
        body = self.pool.health()
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self.pool.models()})

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def index(self, request: Request) -> Response:
        return JSONResponse({
            "name": "realtime_tts",
            "endpoints": ["WS /v1/stream", "WS /v1/stream/text", "POST /v1/audio/speech", "POST /v1/synth",
                          "POST /v1/audio/clone", "POST /v1/audio/design", "GET /v1/voices",
                          "POST /v1/voices", "GET /v1/voices/{voice_id}", "DELETE /v1/voices/{voice_id}",
                          "GET /health", "GET /v1/models", "GET /metrics", "POST /v1/auth/token", "GET /demo",
                          *dialects.PATHS],
            "docs": "docs/protocol.md",
        })

    # WebSocket handlers ---------------------------------------------------------------------------------------

    async def ws_stream(self, ws: WebSocket) -> None:
        await self._ws(ws, incremental=False)

    async def ws_stream_text(self, ws: WebSocket) -> None:
        await self._ws(ws, incremental=True)

    async def _ws(self, ws: WebSocket, *, incremental: bool) -> None:
        await ws.accept()
        self.metrics.ws_connections.inc()
        try:
            await SimpleSession(ws, self, incremental=incremental).run()
        finally:
            self.metrics.ws_connections.dec()


def _warm_text() -> None:
    try:
        text.warm_up()
    except Exception:  # only a warm-up: the first split that needs jieba loads it instead
        log.warning("text warm-up failed", exc_info=True)


def create_app(config: Config) -> Starlette:
    state = AppState(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # jieba's dictionary (~1-2 s of CPU) loads on a thread while the voice workers load, so the first
        # Chinese text is not split on the event loop with a cold jieba; readiness never waits for it.
        threading.Thread(target=_warm_text, name="text-warm-up", daemon=True).start()
        install_log_redaction()  # uvicorn's handlers exist by now: keys in URLs or headers never reach a log
        await asyncio.to_thread(state.voices.open)
        await state.pool.start()
        try:
            yield
        finally:
            await state.pool.stop()

    async def on_tts_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TTSError)
        return error_response(exc, state.metrics)

    async def on_client_gone(request: Request, exc: Exception) -> Response:
        # The client closed its connection while its request body was being read: it left, nothing failed here.
        return error_response(Cancelled(f"the client left before its request body to {request.url.path} arrived"),
                              state.metrics)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path, exc_info=exc)
        return error_response(TTSError(f"internal error: {type(exc).__name__}"), state.metrics)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        # Starlette's own refusals (no such route, wrong method) in the documented JSON error shape
        assert isinstance(exc, HTTPException)
        err: TTSError = NotFound(f"no endpoint at {request.url.path!r}; see GET / for the endpoints", field="path") \
            if exc.status_code == 404 else BadRequest(f"{request.method} {request.url.path}: {exc.detail}")
        if exc.status_code == 405:
            err.code = "method_not_allowed"
        err.status = exc.status_code
        response = error_response(err, state.metrics)
        response.headers.update(exc.headers or {})
        return response

    routes = [
        Route("/", state.index),
        Route("/health", state.health),
        Route("/v1/models", state.models),
        Route("/metrics", state.metrics_endpoint),
        Route("/v1/audio/speech", state.speech, methods=["POST"]),
        Route("/v1/synth", state.synth, methods=["POST"]),
        Route("/v1/audio/clone", state.clone, methods=["POST"]),
        Route("/v1/audio/design", state.design, methods=["POST"]),
        Route("/v1/auth/token", state.auth_token, methods=["POST"]),
        WebSocketRoute("/v1/stream", state.ws_stream),
        WebSocketRoute("/v1/stream/text", state.ws_stream_text),
        *voice_routes(state, state.voices),
        *dialects.routes(state),  # Cartesia, ElevenLabs and Deepgram WebSockets
        *demo_routes(),
    ]
    sec = config.security
    public = frozenset({*(["/health"] if sec.public_health else []), *(["/metrics"] if sec.public_metrics else [])})
    # The guard wraps the router itself, so every route, present or added later, is behind it (tests/test_auth.py
    # walks the route table to prove it). It sits inside the access log (refusals are logged) and the drain gate;
    # keep_ws_protocol, outermost, keeps uvicorn's protocol object before the others wrap send.
    app: Starlette | None = None  # the guard reads the route table at request time, once the app exists

    def current_routes() -> list[BaseRoute]:
        assert app is not None
        return app.router.routes

    guard = Middleware(Guard, auth=state.auth, metrics=state.metrics, connections=state.connections,
                       rate=state.rate, public=public, routes=current_routes)
    drain = Drain()  # lifecycle.DrainingServer drives it on SIGTERM
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={TTSError: on_tts_error, HTTPException: on_http_error,
                                        ClientDisconnect: on_client_gone, Exception: on_error},
                    middleware=[Middleware(keep_ws_protocol), Middleware(access_log, config), Middleware(drain.gate),
                                guard])
    app.state.tts = state
    app.state.drain = drain
    return app
