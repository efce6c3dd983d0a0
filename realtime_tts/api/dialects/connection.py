"""What every vendor dialect's WebSocket shares: one Session (service/session.py) per socket, a reader that
hands each client message to the dialect, a writer that hands each session event to the dialect, per-context
wire audio (audio_out), and the teardown that aborts all engine work when the socket goes.

A dialect is a thin translation: it subclasses DialectSocket and maps its vendor's messages onto
Session.open/text/flush/end/cancel and the session's events onto its vendor's messages. It never runs a
synthesis of its own. Imports service.session, audio_out, protocol, errors and api.errors; never torch.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from realtime_tts import protocol
from realtime_tts.api.dialects.voices import vendor_voice
from realtime_tts.api.errors import _reason
from realtime_tts.audio_out import AudioOutput, OutputFormat
from realtime_tts.errors import BadRequest, IdleTimeout, TTSError
from realtime_tts.protocol import Params
from realtime_tts.service.session import ContextDone, Session, SessionEvent

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState

log = logging.getLogger(__name__)

MAX_CONTEXTS = 16  # per socket: pipecat keeps one per turn open until its audio has played


class DialectSocket:
    """One vendor-dialect WebSocket. Subclasses implement apply (one parsed client JSON object and the context it
    names; synchronous, so a message is applied fully before the next is read; a TTSError it raises becomes the
    vendor's error message for that context) and on_event (one session event, in order)."""

    endpoint = "dialect"

    def __init__(self, ws: WebSocket, app: AppState):
        self.ws = ws
        self.app = app
        self.max_bytes = app.config.server.max_ws_message_bytes
        self.max_chars = app.config.text.max_text_chars
        # one VoiceThread per socket (the Session's own): every context of the socket keeps one voice
        self.session = Session(app.service, Params(), endpoint=self.endpoint, max_contexts=MAX_CONTEXTS)
        self.outputs: dict[str, AudioOutput] = {}  # per context: the wire audio stage
        self.last_activity = time.monotonic()  # the last client message or finished context (idle timeout)
        self.pending: set[str] = set()  # contexts opened whose ContextDone has not been sent yet
        self.closing = False  # the client asked to close: the writer closes the socket when all is sent
        self._send_lock = asyncio.Lock()
        # Messages of the dialect's own (refusals), sent by the writer in order with the session's events;
        # None wakes the writer to check closing.
        self._control: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    # -- to implement ------------------------------------------------------------------------------------------

    def apply(self, context_id: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def context_id_of(self, obj: dict[str, Any]) -> Any:
        """The context a client message is about (validated by on_message)."""
        return obj.get("context_id")

    async def on_event(self, context_id: str, ev: SessionEvent) -> None:
        raise NotImplementedError

    async def on_open(self) -> None:
        """Right after accept (Deepgram's Metadata)."""

    def error_message(self, e: TTSError, context_id: str | None) -> dict[str, Any]:
        """The vendor's error message for a refused client message (the socket stays open)."""
        raise NotImplementedError

    # -- helpers for the dialects ------------------------------------------------------------------------------

    def params(self, *, voice: str | None, voice_field: str, language: str | None = None,
               speed: float | None = None, sample_rate: int | None = None,
               model: str | None = None) -> tuple[Params, tuple[str, ...]]:
        """Params for a context, validated by protocol's reader (so a bad value names its field)."""
        name, warnings = vendor_voice(voice, self.app.config, self.app.pool, field=voice_field)
        obj: dict[str, Any] = {"voice": name}
        if language:
            obj["language"] = language
        if speed is not None:
            obj["speed"] = speed
        if sample_rate is not None:
            obj["sample_rate"] = sample_rate
        if model is not None:
            obj["model"] = model
        req = protocol.parse_ws_text_init(obj, max_chars=self.max_chars)
        return req.params, warnings + req.warnings

    def open_context(self, context_id: str, params: Params, fmt: OutputFormat, *, field: str) -> None:
        """Open a session context and its wire audio stage (BadRequest naming `field` for a format we cannot
        make)."""
        out = AudioOutput(fmt, source_rate=self._engine_rate(params), field=field)
        try:
            self.session.open(context_id, params)
        except BaseException:
            out.close()
            raise
        self.outputs[context_id] = out
        self.pending.add(context_id)

    def check_not_cancelled(self, context_id: str) -> None:
        """A context cancelled a moment ago is still pending (its done message is on its way): refuse more for
        it rather than open a fresh context under the same id behind the client's back."""
        if context_id in self.pending and not self.session.has_context(context_id):
            raise BadRequest(f"context {context_id!r} was cancelled; use a new context id", field="context_id")

    def _engine_rate(self, params: Params) -> int:
        return self.app.service.engine_for(params).capabilities.sample_rate

    async def encode(self, context_id: str, pcm: bytes) -> bytes:
        """Engine PCM → the context's wire bytes (codec pushes off the event loop)."""
        out = self.outputs.get(context_id)
        if out is None:
            return b""
        if not out.encodes:
            return out.push(pcm)
        data = await asyncio.to_thread(out.push, pcm)
        # A cancel read while the codec ran took the context out of the session (a context whose events are
        # still being written is otherwise in it until its ContextDone): none of its audio goes out after that.
        return data if self.session.has_context(context_id) else b""

    async def finish(self, context_id: str, *, cancelled: bool = False) -> bytes:
        """The context is over: its encoder's tail (nothing when cancelled); the stage is freed."""
        out = self.outputs.pop(context_id, None)
        if out is None:
            return b""
        if cancelled:
            out.close()
            return b""
        return await asyncio.to_thread(out.finish) if out.encodes else out.finish()

    @staticmethod
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    async def send_json(self, obj: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send_text(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))

    async def send_bytes(self, data: bytes) -> None:
        async with self._send_lock:
            await self.ws.send_bytes(data)

    def on_message(self, obj: dict[str, Any]) -> None:
        context_id = self.context_id_of(obj)
        if not isinstance(context_id, str) or not context_id:
            self.refuse(BadRequest("context_id (a non-empty string) is required", field="context_id"), None)
            return
        try:
            self.apply(context_id, obj)
        except TTSError as e:
            self.refuse(e, context_id)

    def reply(self, msg: dict[str, Any]) -> None:
        """A message of the dialect's own (not from a session event), sent by the writer after the events it has
        already taken from the session."""
        self._control.put_nowait(msg)

    def refuse(self, e: TTSError, context_id: str | None) -> None:
        """A client message was refused: the vendor's error message, sent in order with the audio."""
        self.app.metrics.errors_total.labels(code=e.code).inc()
        self.reply(self.error_message(e, context_id))

    def close_when_done(self) -> None:
        """The client asked to close: stop reading; the writer closes once every context is done."""
        self.closing = True
        self._control.put_nowait(None)

    # -- the connection ------------------------------------------------------------------------------------------

    async def run(self) -> None:
        await self.ws.accept()
        self.app.metrics.ws_connections.inc()
        code = 1000
        writer = asyncio.create_task(self._write(), name=f"{self.endpoint}-writer")
        try:
            await self.on_open()
            code = await self._read(writer)
        except WebSocketDisconnect:
            code = 1001
        except TTSError as e:  # a frame that is not a message at all: error, then close with its code
            code = e.close_code
            self.app.metrics.errors_total.labels(code=e.code).inc()
            with contextlib.suppress(Exception):
                await self.send_json(self.error_message(e, None))
                await self.ws.close(code, reason=_reason(e.message))
        except Exception as e:  # the socket's edge: log, tell the client, keep serving the others
            log.exception("%s socket failed", self.endpoint)
            code = 1011
            with contextlib.suppress(Exception):
                await self.send_json(self.error_message(TTSError(f"internal error: {type(e).__name__}"), None))
                await self.ws.close(1011)
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer
            await self.session.aclose()  # the socket is gone: every context's engine work stops
            for out in self.outputs.values():
                out.close()
            self.outputs.clear()
            self.app.metrics.ws_connections.dec()
            self.app.metrics.ws_closes_total.labels(code=str(code)).inc()

    async def _read(self, writer: asyncio.Task[None]) -> int:
        idle_s = self.app.config.server.ws_idle_timeout_s
        receive: asyncio.Future[Any] | None = None
        try:
            while not self.closing:
                if receive is None:
                    receive = asyncio.ensure_future(self.ws.receive())
                # a socket with nothing to say and nothing being spoken is closed after ws_idle_timeout_s (4008);
                # the plugins' keepalives ({"text": ""}) count as messages
                done, _ = await asyncio.wait({receive, writer}, timeout=min(idle_s, 1.0) if idle_s > 0 else None,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    if not self.pending and time.monotonic() - self.last_activity > idle_s:
                        receive.cancel()
                        raise IdleTimeout(f"no message received for {idle_s:g} s")
                    continue
                if receive not in done:  # the writer ended (send failed): the socket is gone
                    receive.cancel()
                    writer.result()
                    return 1001
                msg = receive.result()
                receive = None
                self.last_activity = time.monotonic()
                if msg["type"] == "websocket.disconnect":
                    return int(msg.get("code") or 1005)
                raw = msg.get("text") if msg.get("text") is not None else msg.get("bytes")
                obj = protocol.loads_object(raw, max_bytes=self.max_bytes)
                self.on_message(obj)
        finally:
            if receive is not None:
                receive.cancel()
        # the client asked to close: the writer sends what remains and closes the socket
        await writer
        return 1000

    async def _write(self) -> None:
        next_event = asyncio.ensure_future(self.session.next())
        next_control = asyncio.ensure_future(self._control.get())
        try:
            while True:
                done, _ = await asyncio.wait({next_event, next_control}, return_when=asyncio.FIRST_COMPLETED)
                # an event taken from the session goes out before a control message queued after it was taken
                if next_event in done:
                    context_id, ev = next_event.result()
                    await self.on_event(context_id, ev)
                    if isinstance(ev, ContextDone):
                        self.pending.discard(context_id)
                        self.last_activity = time.monotonic()
                    next_event = asyncio.ensure_future(self.session.next())
                if next_control in done:
                    msg = next_control.result()
                    if msg is not None:
                        await self.send_json(msg)
                    next_control = asyncio.ensure_future(self._control.get())
                if self.closing and not self.pending and self._control.empty():
                    if self.ws.application_state == WebSocketState.CONNECTED:
                        await self.ws.close(1000)
                    return
        finally:
            next_event.cancel()
            next_control.cancel()
