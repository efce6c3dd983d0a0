"""WebSocket session mode (PROTOCOL.md §2) on WS /v1/stream and /v1/stream/text: a connection whose first frame
has "type" ("session.start"). The transport over the session core (service/session.py): a reader applies
each client message to the core at once (so a cancel is in force before the next frame is read), a writer sends
the core's one ordered output, a timer ends idle contexts and closes an idle socket.

Audio is encoded per context by audio_out.AudioOutput (negotiated encoding and rate; soxr's streaming
resampler keeps its state across frames and segments of the context, so joins do not click). Nothing is
buffered between the core and the socket: the writer takes the next event only once the previous frame was
handed to the socket, which keeps "no audio for a context after its cancel is read" true end to end, and a
client that stops reading stalls the writer, then (after session_send_timeout_s) is closed with 1008
slow_reader and its engine work aborted.

Imports the service's session core, protocol_session, audio_out, errors; never torch.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from realtime_tts import protocol, protocol_session
from realtime_tts.api.errors import _reason, ws_error_frame
from realtime_tts.audio_out import AudioOutput, OutputFormat
from realtime_tts.errors import IdleTimeout, SlowReader, TTSError
from realtime_tts.protocol_session import FLAG_CONTEXT_LAST, FLAG_SEGMENT_END, FLAG_SEGMENT_START, pack_header
from realtime_tts.service import AudioFrame, SegmentEnded, SegmentStarted
from realtime_tts.service.session import (
    ContextDone,
    ContextError,
    ContextStarted,
    FlushDone,
    Note,
    Session,
    SessionEvent,
    Words,
)

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState

log = logging.getLogger(__name__)

_TICK_S = 0.25  # how often idle contexts / an idle socket are checked
_CLOSE_WAIT_S = 1.0  # a close handshake the client does not answer is not waited on longer
_SLOW_CLOSE_WAIT_S = 5.0
# Messages queued for the client (audio is bounded by the session's buffer; replies to its own messages are not):
# a client that keeps sending but does not read is a slow reader once this many wait.
_MAX_QUEUED_MESSAGES = 4096


class _Wire:
    """One context's wire state: its encoder/resampler, frame counter, slot and current segment."""

    def __init__(self, slot: int, out: AudioOutput, engine_rate: int):
        self.slot = slot
        self.out = out
        self.engine_rate = engine_rate
        self.seq = 0
        self.segment_index = 0
        self.segment_start = False  # the next audio frame opens a segment

    def at_wire_rate(self, engine_sample: int) -> int:
        return round(engine_sample * self.out.sample_rate / self.engine_rate)


class SessionSocket:
    """One session-mode connection."""

    def __init__(self, ws: WebSocket, app: AppState, first: dict[str, Any], *, endpoint: str):
        self.ws = ws
        self.app = app
        self.first = first
        self.endpoint = endpoint
        self.cfg = app.config.session
        self.max_bytes = app.config.server.max_ws_message_bytes
        self.max_chars = app.config.text.max_text_chars
        self.id = uuid.uuid4().hex[:16]
        self.wires: dict[str, _Wire] = {}
        self.last_message = time.monotonic()
        self.closing = False

    async def run(self) -> int:
        """Serve the connection; returns the close code."""
        start = protocol_session.parse_start(self.first)  # BadRequest → the caller closes 1008
        engine = self.app.service.engine_for(start.params)
        self.format = OutputFormat(container="raw", encoding=start.encoding,
                                   sample_rate=start.sample_rate or engine.capabilities.sample_rate)
        self.format.check("audio.sample_rate")
        self.framing = start.framing
        self.defaults_obj = start.params_obj
        session = Session(self.app.service, start.params, endpoint=self.endpoint, max_contexts=self.cfg.max_contexts,
                          max_buffered_s=self.cfg.session_buffer_ms / 1000)
        self.session = session
        await self._send_text(self._started(start, engine))
        writer = asyncio.create_task(self._write(), name=f"session-{self.id}-writer")
        timer = asyncio.create_task(self._timer(), name=f"session-{self.id}-timer")
        reader = asyncio.create_task(self._read(), name=f"session-{self.id}-reader")
        code = 1000
        stage = "disconnect"  # why the contexts still live at the end are cancelled (metrics)
        try:
            done, _ = await asyncio.wait({writer, timer, reader}, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # raises what ended the connection
        except WebSocketDisconnect:
            code = 1001
        except TTSError as e:
            code, stage = e.close_code, e.code
            self.app.metrics.errors_total.labels(code=e.code).inc()
            await self._stop(session, stage, writer, timer, reader)  # engine work stops before the close waits
            await self._fail(e)
        except Exception as e:  # the connection's edge: log, tell the client, keep serving others
            log.exception("session-mode connection failed")
            code, stage = 1011, "error"
            await self._stop(session, stage, writer, timer, reader)
            await self._fail(TTSError(f"internal error: {type(e).__name__}"))
        finally:
            await self._stop(session, stage, writer, timer, reader)
            for wire in self.wires.values():
                wire.out.close()
        if code == 1000:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.ws.close(1000), _CLOSE_WAIT_S)
        return code

    @staticmethod
    async def _stop(session: Session, stage: str, *tasks: asyncio.Task[None]) -> None:
        """The connection's tasks, then every context's engine work (idempotent)."""
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.aclose(stage)

    def _started(self, start: protocol_session.SessionStart, engine: Any) -> dict[str, Any]:
        caps = engine.capabilities
        if caps.continuity and self.app.config.omnivoice.voice_continuity:
            continuity = ("one voice per session: the first segment generated in auto/design mode is the voice "
                          "prompt of every later segment of every context of this session, unless a context names "
                          "another voice")
        else:
            continuity = ("one voice per session, trivially: this engine's voices are named (the CPU voice speaks "
                          "every context in the same fixed voice for a given speaker)")
        frame: dict[str, Any] = {
            "type": "session.started",
            "session_id": self.id,
            "audio": {"encoding": self.format.encoding, "sample_rate": self.format.sample_rate, "channels": 1,
                      "engine_sample_rate": caps.sample_rate},
            "framing": self.framing,
            "limits": {
                "max_contexts": self.cfg.max_contexts,
                "max_message_bytes": self.max_bytes,
                "max_text_chars": self.max_chars,
                "context_idle_s": self.cfg.context_idle_s,
                "idle_timeout_s": self.app.config.server.ws_idle_timeout_s,
                "send_timeout_s": self.cfg.session_send_timeout_s,
            },
            "capabilities": {
                "engine": caps.engine,
                "model": caps.model,
                "voice_modes": sorted(caps.voice_modes),
                "encodings": list(protocol_session.ENCODINGS),
                "sample_rates": [8000, 48000],
                "framings": list(protocol_session.FRAMINGS),
                "word_timings": "estimated",
                "cancel_granularity": "word",
                "voice_continuity": continuity,
            },
        }
        if start.warnings:
            frame["warnings"] = list(start.warnings)
        return frame

    # -- reading ---------------------------------------------------------------------------------------------

    async def _read(self) -> None:
        while True:  # after session.close too: the writer ends the connection, a disconnect is still seen
            msg = await self.ws.receive()
            if msg["type"] == "websocket.disconnect":
                raise WebSocketDisconnect(msg.get("code", 1001))
            self.last_message = time.monotonic()
            if self.session.queued_events > _MAX_QUEUED_MESSAGES:  # replies (pongs, errors) pile up unread
                raise SlowReader(f"{self.session.queued_events} messages wait for the client to read them")
            raw = msg.get("text") if msg.get("text") is not None else msg.get("bytes")
            obj = protocol.loads_object(raw, max_bytes=self.max_bytes)  # frame-level errors end the socket
            if self.closing:
                continue  # session.close was read: nothing after it is applied
            cid = obj.get("context_id") if isinstance(obj.get("context_id"), str) else None
            try:
                self._apply(obj)
            except TTSError as e:  # a field or a context refused: reported, the socket goes on
                self.app.metrics.errors_total.labels(code=e.code).inc()
                frame = {**ws_error_frame(e), "fatal": False}
                if cid is not None:
                    frame["context_id"] = cid
                self.session.note(cid, frame)

    def _apply(self, obj: dict[str, Any]) -> None:
        m = protocol_session.parse_message(obj, defaults=self.defaults_obj, max_chars=self.max_chars)
        s = self.session
        if m.warnings:
            s.note(m.context_id, {"type": "warning", **({"context_id": m.context_id} if m.context_id else {}),
                                  "warnings": list(m.warnings)})
        cid = m.context_id or ""
        if m.type == "text":
            s.text(cid, m.text)
        elif m.type == "speak":
            s.speak(cid, m.text)
        elif m.type == "flush":
            s.flush(cid)
        elif m.type == "end":
            s.end(cid)
        elif m.type == "cancel":
            s.cancel(cid, m.played_ms)
        elif m.type == "context.open":
            s.open(cid, m.params)
        elif m.type == "ping":
            s.note(None, {"type": "pong", **({"id": m.ping_id} if m.ping_id is not None else {}),
                          "load": self._load()})
        elif m.type == "session.close":
            self.closing = True
            s.cancel("*", stage="client")
            s.note(None, {"type": "session.closed"})

    def _load(self) -> dict[str, Any]:
        engines = {}
        for name, engine in self.app.pool.engines.items():
            load = engine.load()
            engines[name] = dataclasses.asdict(load)
        return {"live_contexts": self.session.live_contexts,
                "buffered_audio_ms": round(self.session.buffered_audio_s * 1e3, 1),
                "queued_messages": self.session.queued_events, "engines": engines}

    async def _timer(self) -> None:
        idle = self.app.config.server.ws_idle_timeout_s
        while True:
            await asyncio.sleep(_TICK_S)
            self.session.expire_idle(self.cfg.context_idle_s)
            if idle > 0 and self.session.live_contexts == 0 and time.monotonic() - self.last_message > idle:
                raise IdleTimeout(f"no frame received for {idle:g} s and no context is live")

    # -- writing ---------------------------------------------------------------------------------------------

    async def _write(self) -> None:
        while True:
            cid, ev = await self.session.next()
            for frame in self._frames(cid, ev):
                await self._send(frame)
            if isinstance(ev, Note) and ev.payload.get("type") == "session.closed":
                return

    def _frames(self, cid: str, ev: SessionEvent) -> list[str | bytes]:
        """The wire frames of one event (no awaits: the wire state changes with the event, atomically)."""
        if isinstance(ev, Note):
            return [_json(ev.payload)]
        if isinstance(ev, ContextStarted):
            rate = self.session.sample_rate(cid) or self.format.sample_rate
            self.wires[cid] = _Wire(ev.slot, AudioOutput(self.format, source_rate=rate, field="audio.sample_rate"),
                                    rate)
            return [_json({"type": "context.started", "context_id": cid, "slot": ev.slot})]
        wire = self.wires.get(cid)
        if isinstance(ev, ContextDone):
            return self._done(cid, ev, wire)
        if wire is None:  # cannot happen: every context starts with ContextStarted
            return []
        if isinstance(ev, AudioFrame):
            payload = wire.out.push(ev.pcm)
            if not payload:
                return []  # the resampler held it back (filter delay): it comes with the next frame
            flags = FLAG_SEGMENT_START if wire.segment_start else 0
            wire.segment_start = False
            return [self._audio(cid, wire, flags, payload)]
        if isinstance(ev, SegmentStarted):
            wire.segment_index, wire.segment_start = ev.segment_index, True
            return [_json({"type": "segment.start", "context_id": cid, "segment_index": ev.segment_index,
                           "text": ev.text, "text_start": ev.text_start, "text_end": ev.text_end,
                           "audio_start_sample": wire.at_wire_rate(ev.audio_start_sample)})]
        if isinstance(ev, SegmentEnded):
            frames: list[str | bytes] = []
            if self.framing == "binary":  # a header-only frame carries the segment-end flag
                flags = FLAG_SEGMENT_END | (FLAG_SEGMENT_START if wire.segment_start else 0)
                wire.segment_start = False
                frames.append(self._audio(cid, wire, flags, b""))
            end: dict[str, Any] = {"type": "segment.end", "context_id": cid, "segment_index": ev.segment_index,
                                   "audio_end_sample": wire.at_wire_rate(ev.audio_end_sample),
                                   "queue_ms": round(ev.queue_ms, 2), "gen_ms": round(ev.gen_ms, 2)}
            if ev.num_steps is not None:
                end["num_steps"] = ev.num_steps
            frames.append(_json(end))
            return frames
        if isinstance(ev, Words):
            return [_json({"type": "words", "context_id": cid, "segment_index": ev.segment_index,
                           "estimated": ev.estimated,
                           "words": [{"word": w.text, "text_start": w.text_start, "text_end": w.text_end,
                                      "start_sample": wire.at_wire_rate(w.start_sample),
                                      "end_sample": wire.at_wire_rate(w.end_sample)} for w in ev.words]})]
        if isinstance(ev, FlushDone):
            return [_json({"type": "flush.done", "context_id": cid})]
        if isinstance(ev, ContextError):
            return [_json({**ws_error_frame(ev.error), "context_id": cid, "fatal": False})]
        return []

    def _done(self, cid: str, ev: ContextDone, wire: _Wire | None) -> list[str | bytes]:
        frames: list[str | bytes] = []
        if wire is not None:
            del self.wires[cid]
            if ev.reason in ("end", "idle"):
                tail = wire.out.finish()
                if wire.seq or tail:  # the resampler's tail, flagged as the context's last audio frame
                    frames.append(self._audio(cid, wire, FLAG_CONTEXT_LAST, tail))
            else:  # cancelled or failed: not one more byte of its audio
                wire.out.close()
        done: dict[str, Any] = {"type": "context.done", "context_id": cid, "reason": ev.reason}
        if ev.already_done:
            done["already_done"] = True
        if ev.heard is not None:
            done.update(ev.heard.fields())
        if ev.stats is not None:
            done["stats"] = ev.stats
        frames.append(_json(done))
        return frames

    def _audio(self, cid: str, wire: _Wire, flags: int, payload: bytes) -> str | bytes:
        seq, offset = wire.seq, wire.out.samples_out - _samples(payload, self.format.encoding)
        wire.seq += 1
        if self.framing == "binary":
            return pack_header(flags, wire.slot, wire.segment_index, seq, offset) + payload
        return _json({"type": "audio", "context_id": cid, "segment_index": wire.segment_index, "seq": seq,
                      "sample_offset": offset, "flags": flags, "audio": base64.b64encode(payload).decode()})

    async def _send(self, frame: str | bytes) -> None:
        """One frame to the socket; a client that does not take it within session_send_timeout_s is a slow
        reader (its connection closes, its contexts' engine work is aborted)."""
        send = self.ws.send_bytes(frame) if isinstance(frame, bytes) else self.ws.send_text(frame)
        limit = self.cfg.session_send_timeout_s
        if limit <= 0:
            await send
            return
        try:
            await asyncio.wait_for(send, limit)
        except TimeoutError:
            raise SlowReader(f"the client read nothing for {limit:g} s while audio waited") from None

    async def _send_text(self, obj: dict[str, Any]) -> None:
        await self._send(_json(obj))

    async def _fail(self, e: TTSError) -> None:
        if self.ws.application_state != WebSocketState.CONNECTED:
            return
        with contextlib.suppress(Exception):
            if not isinstance(e, SlowReader):  # its socket does not take frames: the error would wait too
                await asyncio.wait_for(self.ws.send_text(_json({**ws_error_frame(e), "fatal": True})), _CLOSE_WAIT_S)
            # a slow reader gets a while to drain what is in flight and read the close (1008 slow_reader); its
            # engine work is already aborted, so the wait holds only the socket
            wait = _SLOW_CLOSE_WAIT_S if isinstance(e, SlowReader) else _CLOSE_WAIT_S
            await asyncio.wait_for(self.ws.close(e.close_code, reason=_reason(e.message)), wait)


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _samples(payload: bytes, encoding: str) -> int:
    return len(payload) // (4 if encoding == "pcm_f32le" else 1 if encoding in ("pcm_mulaw", "pcm_alaw") else 2)
