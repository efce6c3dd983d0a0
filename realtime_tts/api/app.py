"""The Starlette app: AppState (config, metrics, engine pool, service) with the route handlers, and create_app.

Imports service, protocol, audio, metrics, engine.pool, text (its warm-up); never an engine's internals, never torch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from realtime_tts import audio, protocol, text
from realtime_tts.api import dialects
from realtime_tts.api.access_log import access_log
from realtime_tts.api.drain import Drain
from realtime_tts.api.errors import error_response
from realtime_tts.api.http import _form, _json_body, respond, style_instructions
from realtime_tts.api.simple_ws import SimpleSession
from realtime_tts.audio_out import RESPONSE_FORMATS
from realtime_tts.config import Config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import BadRequest, TTSError
from realtime_tts.metrics import CONTENT_TYPE, Metrics
from realtime_tts.service import Service

log = logging.getLogger(__name__)


class AppState:
    def __init__(self, config: Config):
        self.config = config
        self.metrics = Metrics()
        self.pool = EnginePool(config)
        self.service = Service(config, self.pool, self.metrics)

    # HTTP handlers ------------------------------------------------------------------------------------------

    async def speech(self, request: Request) -> Response:
        obj = await _json_body(request, self.config.server.max_ws_message_bytes * 4)
        # OpenAI's default format is mp3 (omnivoice-triton-server's "stream": true alone still gets pcm deltas)
        req = protocol.parse_speech(obj, max_chars=self.config.text.max_text_chars, formats=RESPONSE_FORMATS,
                                    default_format="mp3")
        req = style_instructions(self.pool, req)
        synth = self.service.open(req, endpoint="speech", streaming=req.stream is not False)
        return await respond(self, req, endpoint="speech", synth=synth)

    async def synth(self, request: Request) -> Response:
        obj = await _json_body(request, self.config.server.max_ws_message_bytes * 4)
        req = protocol.parse_synth(obj, max_chars=self.config.text.max_text_chars)
        synth = self.service.open(req, endpoint="synth", streaming=False)
        return await respond(self, req, endpoint="synth", synth=synth)

    async def clone(self, request: Request) -> Response:
        fields, files = await _form(request)
        if str(fields.get("voice", "")).lower() == "clone":
            fields.pop("voice")  # the endpoint already says "clone"; the reference comes with the request
        req = protocol.parse_speech(fields, max_chars=self.config.text.max_text_chars, formats=RESPONSE_FORMATS,
                                    allowed=protocol.CLONE_FIELDS | set(files), coerce=True)
        params = dataclasses.replace(req.params, voice_mode="clone", voice="clone")
        engine = self.pool.route(params.model, "clone")  # the CPU voice refuses here: 400 naming omnivoice
        recording = await self._reference_audio(fields, files)
        samples, rate = await asyncio.to_thread(self._decode, recording)
        prompt = await self.service.encode_voice(engine, samples, rate, req.ref_text or "")
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

    @staticmethod
    async def _reference_audio(fields: dict[str, Any], files: dict[str, UploadFile]) -> bytes:
        upload = files.get("ref_audio")
        if upload is not None:
            data = await upload.read()
            if not data:
                raise BadRequest("ref_audio is an empty file", field="ref_audio")
            return data
        b64 = fields.get("ref_audio_base64") or fields.get("ref_audio")
        if not isinstance(b64, str) or not b64.strip():
            raise BadRequest("ref_audio (a file) or ref_audio_base64 is required", field="ref_audio")
        try:
            return base64.b64decode(b64.split(",", 1)[-1], validate=True)  # also takes a data: URL
        except (binascii.Error, ValueError):
            raise BadRequest("ref_audio_base64 is not valid base64", field="ref_audio_base64") from None

    @staticmethod
    def _decode(data: bytes) -> tuple[Any, int]:
        try:
            samples, rate = audio.decode(data)
        except (RuntimeError, ValueError, TypeError) as e:  # soundfile.LibsndfileError is a RuntimeError
            raise BadRequest(f"ref_audio could not be decoded as audio: {e}", field="ref_audio") from None
        if len(samples) < rate // 2:
            raise BadRequest("ref_audio is shorter than 0.5 s", field="ref_audio")
        return samples, rate

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
                          "POST /v1/audio/clone", "POST /v1/audio/design", "GET /health", "GET /v1/models",
                          "GET /metrics", *dialects.PATHS],
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
        await state.pool.start()
        try:
            yield
        finally:
            await state.pool.stop()

    async def on_tts_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TTSError)
        return error_response(exc, state.metrics)

    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s", request.url.path, exc_info=exc)
        return error_response(TTSError(f"internal error: {type(exc).__name__}"), state.metrics)

    routes = [
        Route("/", state.index),
        Route("/health", state.health),
        Route("/v1/models", state.models),
        Route("/metrics", state.metrics_endpoint),
        Route("/v1/audio/speech", state.speech, methods=["POST"]),
        Route("/v1/synth", state.synth, methods=["POST"]),
        Route("/v1/audio/clone", state.clone, methods=["POST"]),
        Route("/v1/audio/design", state.design, methods=["POST"]),
        WebSocketRoute("/v1/stream", state.ws_stream),
        WebSocketRoute("/v1/stream/text", state.ws_stream_text),
        *dialects.routes(state),  # Cartesia, ElevenLabs and Deepgram WebSockets
    ]
    drain = Drain()  # lifecycle.DrainingServer drives it on SIGTERM
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={TTSError: on_tts_error, Exception: on_error},
                    middleware=[Middleware(access_log, config), Middleware(drain.gate)])  # type: ignore[arg-type]
    app.state.tts = state
    app.state.drain = drain
    return app
