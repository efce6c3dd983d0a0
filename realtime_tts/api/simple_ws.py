"""WebSocket simple mode (PROTOCOL.md §1, LunaVox-compatible): /v1/stream (whole text) and /v1/stream/text
(incremental), one SimpleSession per connection with a reader and a writer task."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from realtime_tts import protocol
from realtime_tts.api.errors import close_code, count
from realtime_tts.api.session_ws import SessionSocket
from realtime_tts.api.ws_sender import WsSender
from realtime_tts.audio_out import AudioOutput, OutputFormat
from realtime_tts.errors import IdleTimeout, TTSError
from realtime_tts.limits import check_buffered
from realtime_tts.protocol import Warnings
from realtime_tts.service import AudioFrame, SegmentEnded, SegmentStarted, Synthesis
from realtime_tts.service.heard import Heard, SpokenLog
from realtime_tts.text.sentences import count_sentences

if TYPE_CHECKING:
    from realtime_tts.api.app import AppState

log = logging.getLogger(__name__)


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
        self.out: AudioOutput  # the wire encoding, built once the request frame is parsed
        self.events = False  # the client asked for segment events
        self.text = ""  # the text received (offsets of segment events point into it)
        self.spoken: SpokenLog  # what was sent, for text_spoken at a cancel
        self.heard: Heard | None = None
        self.sender: WsSender | None = None  # every frame of simple mode goes through it (api/ws_sender.py)
        self.synth: Synthesis | None = None
        self.client_close_code = 1001  # what the client (or uvicorn for it) closed with

    def _stalled(self, e: TTSError) -> None:
        """The sender gave up on a client that stopped reading: abort the work, end with e."""
        self.error = e
        if self.synth is not None:
            self.synth.cancel("slow_reader")

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            if self.sender is not None:
                await self.sender.aclose()

    async def _run(self) -> None:
        code = 1000
        try:
            first = await self._receive()
            if first is None:
                code = self.client_close_code
                return
            if "type" in first:  # session mode (PROTOCOL.md §2)
                code = await SessionSocket(self.ws, self.app, first, endpoint="ws_session").run()
                return
            lim = self.app.config.limits
            self.sender = WsSender(self.ws, metrics=self.app.metrics, max_ahead_s=lim.ws_max_audio_ahead_s,
                                   send_timeout_s=lim.ws_send_timeout_s, on_stalled=self._stalled)
            parse = protocol.parse_ws_text_init if self.incremental else protocol.parse_ws_stream
            req = parse(first, max_chars=self.max_chars)
            # control fields of the first frame: cancel (+ played_ms) on both, flush / end on /v1/stream/text
            controls = ("flush", "end", "cancel", "played_ms") if self.incremental else ("cancel", "played_ms")
            ctl = protocol.parse_text_message({k: first[k] for k in controls if k in first}, max_chars=self.max_chars)
            self.warnings.add(req.warnings)
            prompt = await self.app.references.for_request(self.app, req)  # an inline clone reference
            self.events = req.params.events
            # segment events always flow inside (what was heard is judged from them); sent only when asked for
            req = dataclasses.replace(req, params=dataclasses.replace(req.params, events=True))
            synth = self.app.service.open(req, endpoint=self.endpoint, incremental=self.incremental, streaming=True,
                                          prompt=prompt)  # one response per socket: its own voice thread
            self.synth = synth
            self.warnings.add(synth.warnings)
            self.spoken = SpokenLog(synth.sample_rate)
            self.out = AudioOutput(OutputFormat(container="raw", encoding=req.encoding,
                                                sample_rate=req.params.sample_rate or synth.sample_rate),
                                   source_rate=synth.sample_rate)
            async with synth:
                if self.incremental:
                    if req.text:
                        self._feed(synth, req.text)
                    if ctl.flush:
                        synth.flush()
                    if ctl.end:
                        synth.end()
                else:
                    self.text = req.text
                    synth.speak(req.text)
                if ctl.cancel:
                    self._cancel(synth, ctl.played_ms)
                reader = asyncio.create_task(self._read(synth), name=f"ws-reader-{synth.id}")
                try:
                    await self._write(synth)
                except WebSocketDisconnect as e:  # the client left while audio was being sent
                    self.disconnected = True
                    self.client_close_code = e.code
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
                raise WebSocketDisconnect(self.client_close_code)
            await self.sender.close(1000)
            if self.sender.gone_code not in (None, 1000):  # cut off while the close waited (slow reader)
                raise self.error or WebSocketDisconnect(self.sender.gone_code)
        except TTSError as e:
            code = close_code(e)
            count(e, self.app.metrics)
            await self._fail(e)
        except WebSocketDisconnect as e:
            code = e.code if e.code not in (1000, 1005) else 1001
        except Exception as e:  # the WS-session edge: log it, tell the client, keep serving others
            log.exception("WebSocket session failed")
            code = 1011
            await self._fail(TTSError(f"internal error: {type(e).__name__}"))
        finally:
            self.app.metrics.ws_closes_total.labels(code=str(code)).inc()

    def _terminal(self, synth: Synthesis) -> dict[str, Any]:
        frame: dict[str, Any] = {"done": True, "sample_rate": self.out.sample_rate}
        if self.incremental:
            frame["sentences"] = count_sentences(self.text)  # the input's sentences (docs/protocol.md)
        frame["reason"] = "cancelled" if synth.cancelled else "end"
        if synth.cancelled and self.heard is not None:
            frame.update(self.heard.fields())
        frame["stats"] = synth.stats()
        if self.warnings.items:
            frame["warnings"] = list(self.warnings.items)
        return frame

    async def _fail(self, e: TTSError) -> None:
        if self.ws.application_state != WebSocketState.CONNECTED or self.disconnected:
            return
        if self.sender is None:  # refused before simple mode began (its first frame)
            self.sender = WsSender(self.ws, metrics=self.app.metrics, max_ahead_s=0, send_timeout_s=5.0)
        with contextlib.suppress(WebSocketDisconnect):
            await self.sender.fail(e)

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
            self.client_close_code = msg.get("code") or 1001
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
                    msg = protocol.parse_text_message({k: v for k, v in obj.items() if k in ("cancel", "played_ms")},
                                                      max_chars=self.max_chars)
                    extra = tuple(f"field {k!r} ignored after the request frame" for k in obj
                                  if k not in ("cancel", "played_ms"))
                    self.warnings.add(extra)
                else:
                    msg = protocol.parse_text_message(obj, max_chars=self.max_chars)
                    self.warnings.add(msg.warnings)
                    if msg.text and synth.ended:
                        self.warnings.add(("text received after end ignored",))
                    elif msg.text:
                        self._feed(synth, msg.text)
                    if msg.flush:
                        synth.flush()
                    if msg.end:
                        synth.end()
                if msg.cancel:
                    self._cancel(synth, msg.played_ms)
        except TTSError as e:
            self.error = e
            synth.cancel("error")

    def _feed(self, synth: Synthesis, text: str) -> None:
        check_buffered(synth.pending_chars, len(text), self.app.config.limits.max_buffered_chars)
        self.text += text
        synth.feed(text)

    def _cancel(self, synth: Synthesis, played_ms: float | None) -> None:
        """Stop now; what was heard is judged from what was sent until now (and the client's played_ms)."""
        if self.sender is not None:
            self.sender.drop_audio()  # audio still queued for the socket never leaves
        if not synth.cancelled:
            if self.sender is not None:
                self.spoken.sent_until(self.sender.sent_audio_s)
            self.heard = self.spoken.heard(self.text, played_ms)
        synth.cancel("client")

    async def _write(self, synth: Synthesis) -> None:
        events = self.events
        out = self.out
        assert self.sender is not None
        async for ev in synth.events():
            self.spoken.note(ev)
            if isinstance(ev, AudioFrame):
                data = out.push(ev.pcm)  # raw encodings only: microseconds per frame, fine on the loop
                if data:
                    # paced by the frame's duration (the engine's PCM16), whatever the wire encoding
                    await self.sender.audio(data, len(ev.pcm) / 2 / synth.sample_rate)
            elif events and isinstance(ev, SegmentStarted):
                await self._send_json({"type": "segment.start", **self._at_wire_rate(ev, synth)})
            elif events and isinstance(ev, SegmentEnded):
                await self._send_json({"type": "segment.end", **self._at_wire_rate(ev, synth)})
        tail = out.finish() if not synth.cancelled else b""  # the resampler's last few ms
        if tail:
            await self.sender.audio(tail, 0.0)

    def _at_wire_rate(self, ev: SegmentStarted | SegmentEnded, synth: Synthesis) -> dict[str, Any]:
        """A segment event with its sample offsets counted at the rate the client receives."""
        obj = {k: v for k, v in dataclasses.asdict(ev).items() if not (k == "num_steps" and v is None)}
        for key in ("audio_start_sample", "audio_end_sample"):
            if key in obj:
                obj[key] = round(obj[key] * self.out.sample_rate / synth.sample_rate)
        return obj

    async def _send_json(self, obj: dict[str, Any]) -> None:
        assert self.sender is not None
        await self.sender.json(obj)
