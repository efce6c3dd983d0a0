"""HTTP and WebSocket routes (Starlette): WS sessions with a reader and a writer task, HTTP speech endpoints,
health, models, metrics, and the ONE mapping of errors.TTSError to HTTP status / WS close code.

Imports service, protocol, audio, metrics, engine.pool, text (its warm-up); never an engine's internals, never torch.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import json
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from realtime_tts import audio, protocol, text
from realtime_tts.config import Config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import BadRequest, IdleTimeout, PayloadTooLarge, TTSError
from realtime_tts.metrics import CONTENT_TYPE, Metrics
from realtime_tts.protocol import SpeechRequest, Warnings
from realtime_tts.service import AudioFrame, SegmentEnded, SegmentStarted, Service, Synthesis

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 20 << 20  # reference recordings for cloning
_WS_REASON_BYTES = 123  # RFC 6455: a close reason fits in 123 bytes


# -- the one error mapping -------------------------------------------------------------------------------------

def error_body(e: TTSError) -> dict[str, Any]:
    return {"error": e.to_dict()}


def error_response(e: TTSError, metrics: Metrics | None = None) -> JSONResponse:
    if metrics is not None:
        metrics.errors_total.labels(code=e.code).inc()
    headers = {"Retry-After": str(max(1, e.retry_after_ms // 1000))} if e.retry_after_ms else None
    return JSONResponse(error_body(e), status_code=e.status, headers=headers)


def close_code(e: TTSError) -> int:
    return e.close_code


def ws_error_frame(e: TTSError) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", **e.to_dict(), "fatal": True}
    return frame


def _reason(message: str) -> str:
    raw = message.encode()[:_WS_REASON_BYTES]
    return raw.decode(errors="ignore")


# -- WebSocket simple mode -------------------------------------------------------------------------------------

class SimpleSession:
    """One WS connection in simple mode (PROTOCOL.md §1): /v1/stream (whole text) or /v1/stream/text
    (incremental). The writer sends audio while the reader keeps reading, so {"cancel"} and more text are
    seen while audio is being produced."""

    def __init__(self, ws: WebSocket, app: AppState, *, incremental: bool):
        self.ws = ws
        self.app = app
        self.incremental = incremental
        self.endpoint = "ws_stream_text" if incremental else "ws_stream"
        self.warnings = Warnings()
        self.error: TTSError | None = None
        self.disconnected = False
        self.max_bytes = app.config.server.max_ws_message_bytes
        self.max_chars = app.config.text.max_text_chars

    async def run(self) -> None:
        code = 1000
        try:
            first = await self._receive()
            if first is None:
                return
            if "type" in first:
                raise BadRequest("session mode (a first frame with \"type\") is not available yet; send a request "
                                 "object without \"type\" (simple mode)", field="type")
            parse = protocol.parse_ws_text_init if self.incremental else protocol.parse_ws_stream
            req = parse(first, max_chars=self.max_chars)
            self.warnings.add(req.warnings)
            synth = self.app.service.open(req, endpoint=self.endpoint, incremental=self.incremental, streaming=True)
            async with synth:
                if self.incremental:
                    if req.text:
                        synth.feed(req.text)
                    if first.get("cancel") is True:
                        synth.cancel()
                else:
                    synth.speak(req.text)
                reader = asyncio.create_task(self._read(synth), name=f"ws-reader-{synth.id}")
                try:
                    await self._write(synth)
                except WebSocketDisconnect:  # the client left while audio was being sent
                    self.disconnected = True
                    synth.cancel("disconnect")
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
                if self.error is not None:
                    raise self.error
                if not self.disconnected:
                    await self._send_json(self._terminal(synth))
            if self.disconnected:
                raise WebSocketDisconnect(1001)
            await self.ws.close(1000)
        except TTSError as e:
            code = close_code(e)
            self.app.metrics.errors_total.labels(code=e.code).inc()
            await self._fail(e)
        except WebSocketDisconnect:
            code = 1001
        except Exception as e:  # the WS-session edge: log it, tell the client, keep serving others
            log.exception("WebSocket session failed")
            code = 1011
            await self._fail(TTSError(f"internal error: {type(e).__name__}"))
        finally:
            self.app.metrics.ws_closes_total.labels(code=str(code)).inc()

    def _terminal(self, synth: Synthesis) -> dict[str, Any]:
        frame: dict[str, Any] = {"done": True, "sample_rate": synth.sample_rate}
        if self.incremental:
            frame["sentences"] = synth.num_segments
        frame["reason"] = "cancelled" if synth.cancelled else "end"
        frame["stats"] = synth.stats()
        if self.warnings.items:
            frame["warnings"] = list(self.warnings.items)
        return frame

    async def _fail(self, e: TTSError) -> None:
        if self.ws.application_state != WebSocketState.CONNECTED or self.disconnected:
            return
        with contextlib.suppress(Exception):
            await self._send_json(ws_error_frame(e))
            await self.ws.close(close_code(e), reason=_reason(e.message))

    async def _receive(self, *, idle_timeout: bool = True) -> dict[str, Any] | None:
        """The next frame as a JSON object; None when the client has gone. With idle_timeout, a client that
        sends nothing for ws_idle_timeout_s while we wait on it is closed (4008)."""
        limit = self.app.config.server.ws_idle_timeout_s
        if idle_timeout and limit > 0:
            try:
                msg = await asyncio.wait_for(self.ws.receive(), limit)
            except TimeoutError:
                raise IdleTimeout(f"no frame received for {limit:g} s") from None
        else:
            msg = await self.ws.receive()
        if msg["type"] == "websocket.disconnect":
            self.disconnected = True
            return None
        text, data = msg.get("text"), msg.get("bytes")
        return protocol.loads_object(text if text is not None else data, max_bytes=self.max_bytes)

    async def _read(self, synth: Synthesis) -> None:
        try:
            while True:
                # /v1/stream needs nothing after its request; /v1/stream/text needs text until "end".
                obj = await self._receive(idle_timeout=self.incremental and not synth.ended)
                if obj is None:
                    synth.cancel("disconnect")
                    return
                if not self.incremental:
                    # /v1/stream takes one request; later frames may only cancel.
                    msg = protocol.parse_text_message({k: v for k, v in obj.items() if k == "cancel"},
                                                      max_chars=self.max_chars)
                    extra = tuple(f"field {k!r} ignored after the request frame" for k in obj if k != "cancel")
                    self.warnings.add(extra)
                else:
                    msg = protocol.parse_text_message(obj, max_chars=self.max_chars)
                    self.warnings.add(msg.warnings)
                    if msg.text and synth.ended:
                        self.warnings.add(("text received after end ignored",))
                    elif msg.text:
                        synth.feed(msg.text)
                    if msg.flush:
                        synth.flush()
                    if msg.end:
                        synth.end()
                if msg.cancel:
                    synth.cancel("client")
        except TTSError as e:
            self.error = e
            synth.cancel("error")

    async def _write(self, synth: Synthesis) -> None:
        events = synth.params.events
        async for ev in synth.events():
            if isinstance(ev, AudioFrame):
                await self.ws.send_bytes(ev.pcm)
            elif events and isinstance(ev, SegmentStarted):
                await self._send_json({"type": "segment.start", **dataclasses.asdict(ev)})
            elif events and isinstance(ev, SegmentEnded):
                await self._send_json({"type": "segment.end", **dataclasses.asdict(ev)})

    async def _send_json(self, obj: dict[str, Any]) -> None:
        await self.ws.send_text(json.dumps(obj, separators=(",", ":")))


# -- HTTP --------------------------------------------------------------------------------------------------------

def _headers(synth: Synthesis, req: SpeechRequest, *, partial: bool) -> dict[str, str]:
    stats = synth.stats()
    if partial:
        stats["partial"] = True  # streamed: headers leave before the end, so totals are not known yet
    headers = {
        "X-Audio-Sample-Rate": str(synth.sample_rate),
        "X-Stats": json.dumps(stats, separators=(",", ":")),
        "X-Request-Id": synth.id,
    }
    if req.warnings:
        headers["X-Warnings"] = json.dumps(list(req.warnings))
    return headers


async def _collect(synth: Synthesis) -> bytes:
    pcm = bytearray()
    async for ev in synth.events():
        if isinstance(ev, AudioFrame):
            pcm += ev.pcm
    return bytes(pcm)


async def respond(app: AppState, req: SpeechRequest, *, endpoint: str, synth: Synthesis) -> Response:
    """Answer one HTTP speech request: buffered body, chunked audio stream, or SSE."""
    synth.speak(req.text)
    fmt = req.response_format
    sse = req.stream_format == "sse"
    streamed = sse or (req.stream is None and fmt in audio.STREAMABLE_FORMATS)
    if not streamed:
        async with synth:
            pcm = await _collect(synth)
        try:
            # encoders (mp3/opus/...) take real CPU time on long audio: never on the event loop
            body = await asyncio.to_thread(audio.encode, pcm, synth.sample_rate, fmt)
        except ValueError as e:
            raise BadRequest(str(e), field="response_format") from None
        return Response(body, media_type=audio.MEDIA_TYPES[fmt], headers=_headers(synth, req, partial=False))

    async def byte_stream() -> AsyncGenerator[bytes, None]:
        async with synth:
            if fmt in audio.STREAMABLE_FORMATS:
                header = audio.wav_header(synth.sample_rate) if fmt == "wav" else b""
                async for ev in synth.events():
                    if isinstance(ev, AudioFrame):
                        yield header + ev.pcm
                        header = b""
                if header:  # no audio at all: still a valid (empty) stream
                    yield header
            else:  # encoded formats are made once the whole audio exists
                yield await asyncio.to_thread(audio.encode, await _collect(synth), synth.sample_rate, fmt)

    chunks = byte_stream()
    # Pull the first audio before answering, so refusals and engine errors still get a proper 4xx/5xx.
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        first = b""
    headers = _headers(synth, req, partial=True)

    async def rest() -> AsyncGenerator[bytes, None]:
        # aclosing: a client that goes away closes this generator, which must close (and abort) the synthesis
        # now, not whenever the garbage collector finalises it.
        async with contextlib.aclosing(chunks):
            if first:
                yield first
            async for chunk in chunks:
                yield chunk

    if not sse:
        return StreamingResponse(rest(), media_type=audio.MEDIA_TYPES[fmt], headers=headers)

    async def events() -> AsyncIterator[str]:
        async with contextlib.aclosing(rest()) as audio_chunks:
            async for chunk in audio_chunks:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode()})
        usage = {"input_tokens": synth.num_chars, "output_tokens": synth.samples_out,
                 "total_tokens": synth.num_chars + synth.samples_out}
        yield _sse({"type": "speech.audio.done", "usage": usage, "sample_rate": synth.sample_rate,
                    "stats": synth.stats()})

    return StreamingResponse(events(), media_type="text/event-stream", headers={**headers, "Cache-Control": "no-cache"})


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def _json_body(request: Request, limit: int) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > limit:
        raise PayloadTooLarge(f"request body of {len(raw)} bytes exceeds {limit}")
    return protocol.body_object(raw)


async def _form(request: Request) -> tuple[dict[str, Any], dict[str, UploadFile]]:
    """Multipart/urlencoded form → (string fields, uploaded files); JSON bodies are accepted too."""
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        return await _json_body(request, MAX_UPLOAD_BYTES * 2), {}
    try:
        form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
    except MultiPartException as e:  # malformed body, part too large
        raise BadRequest(f"malformed form body: {e}", field="(body)") from None
    fields: dict[str, Any] = {}
    files: dict[str, UploadFile] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            files[key] = value
        else:
            fields[key] = value
    return fields, files


class AppState:
    def __init__(self, config: Config):
        self.config = config
        self.metrics = Metrics()
        self.pool = EnginePool(config)
        self.service = Service(config, self.pool, self.metrics)

    # HTTP handlers ------------------------------------------------------------------------------------------

    async def speech(self, request: Request) -> Response:
        obj = await _json_body(request, self.config.server.max_ws_message_bytes * 4)
        req = protocol.parse_speech(obj, max_chars=self.config.text.max_text_chars, formats=audio.RESPONSE_FORMATS)
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
        req = protocol.parse_speech(fields, max_chars=self.config.text.max_text_chars, formats=audio.RESPONSE_FORMATS,
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
        req = protocol.parse_speech(fields, max_chars=self.config.text.max_text_chars, formats=audio.RESPONSE_FORMATS,
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
                          "GET /metrics"],
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
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={TTSError: on_tts_error, Exception: on_error})
    app.state.tts = state
    return app
