"""WsSender: the one way a WebSocket connection sends (simple mode now; session mode and dialects use it too).

Why it exists (issue 17): a client that plays audio as it arrives reads at playback speed, so whatever the
server queues ahead of that sits in socket buffers in front of the keepalive ping; with minutes of audio queued
the pong comes too late and the connection dies. And a client that stops reading filled the buffers until the
server's own close waited behind megabytes. So:

- audio is paced: queued at most `max_ahead_s` ahead of a play clock (what a player that started at the first
  frame and never skipped would have played by now; an underrun restarts it), so a paced reader never has more
  than that in front of a ping;
- one sender task writes, from a bounded queue: the producer (the synthesis) waits when the client is slow, so
  memory per connection is bounded and engine work slows down with it;
- a send that stays blocked `send_timeout_s` means the client stopped reading: the connection's work is aborted
  (on_stalled), the error frame and the close (1008, reason) are put straight into the transport's buffer (a
  client that resumes reads them), and the transport is aborted after a short grace, so nothing waits on a
  client that never reads again;
- nothing is sent after the close: later sends are dropped, and a gone client surfaces as WebSocketDisconnect
  to the producer.

Imports Starlette and api.errors/guard; never an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from realtime_tts.api.errors import _reason, ws_error_frame
from realtime_tts.api.guard import protocol_of
from realtime_tts.errors import SlowReader, TTSError
from realtime_tts.metrics import Metrics

log = logging.getLogger(__name__)

QUEUE_FRAMES = 16  # frames waiting for the sender task (at 120 ms frames: ~2 s of audio)
# Kernel send buffer per WebSocket: with Linux's autotuning it grows to 4 MiB (~85 s of 24 kHz PCM) that a
# stopped client would hide from the send timeout; 256 KiB (the kernel doubles it) is ~10 s of audio and still
# far more than any link needs for real-time audio.
SOCKET_SEND_BUFFER = 256 << 10
CLOSE_GRACE_S = 2.0  # after a stall: how long the client may make no progress before its connection is cut


class PlayClock:
    """When a player fed with this stream's audio would finish what it was given: each frame plays after the
    previous one, or now if the player ran dry. ahead() = seconds of audio given but not yet played."""

    def __init__(self) -> None:
        self._end = 0.0

    def add(self, seconds: float) -> None:
        self._end = max(self._end, time.monotonic()) + seconds

    def ahead(self) -> float:
        return max(0.0, self._end - time.monotonic())


class WsSender:
    def __init__(self, ws: WebSocket, *, metrics: Metrics, max_ahead_s: float, send_timeout_s: float,
                 on_stalled: Callable[[TTSError], None] | None = None):
        self.ws = ws
        self.metrics = metrics
        self.max_ahead_s = max_ahead_s
        self.send_timeout_s = send_timeout_s
        self.on_stalled = on_stalled
        self.clock = PlayClock()
        self.closed = False  # a close was queued or the connection is gone: nothing more is queued
        self.gone_code: int | None = None  # set once the client is gone (or was cut off)
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_FRAMES)
        # Audio generation: drop_audio() bumps it, and queued (or being queued) audio of an older one never
        # leaves: nothing of a cancelled response goes out after its cancel was read.
        self._audio_gen = 0
        self.sent_audio_s = 0.0  # audio handed to the socket (frames dropped at a cancel not counted)
        self._protocol = protocol_of(ws)
        self._limit_socket_buffer()
        self._task = asyncio.create_task(self._run(), name="ws-sender")
        self._closer: asyncio.Task[None] | None = None

    # -- the producer's side ----------------------------------------------------------------------------------

    async def audio(self, data: bytes, seconds: float, *, paced: bool = True) -> None:
        """Queue one audio frame (any wire encoding) that plays for `seconds`; waits while the stream is
        max_ahead_s ahead of its play clock."""
        gen = self._audio_gen
        if paced and self.max_ahead_s > 0:
            over = self.clock.ahead() - self.max_ahead_s
            if over > 0:
                await asyncio.sleep(over)
        if gen != self._audio_gen:
            return  # cancelled while it waited for its turn
        self.clock.add(seconds)
        await self._put("audio", (data, seconds, gen))

    def drop_audio(self) -> None:
        """A cancel: the audio queued so far (and any frame a producer is queuing right now) never leaves;
        JSON frames and the close keep their order."""
        self._audio_gen += 1
        kept = []
        while not self._queue.empty():  # get_nowait also wakes a producer blocked on the full queue
            item = self._queue.get_nowait()
            if item[0] != "audio":
                kept.append(item)
        for item in kept:
            self._queue.put_nowait(item)

    async def json(self, obj: dict[str, Any]) -> None:
        await self._put("text", json.dumps(obj, separators=(",", ":")))

    async def fail(self, e: TTSError) -> None:
        """The error frame, then the close with e's code and a reason: the end of the connection."""
        if self.closed:
            return
        await self.json(ws_error_frame(e))
        await self.close(e.close_code, e.message)

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Queue the close after everything queued, and wait (bounded) until it is written."""
        if not self.closed:
            await self._put("close", (code, _reason(reason)))
            self.closed = True
        await self.wait_closed()

    async def wait_closed(self) -> None:
        """Until the sender task has ended; past the send timeout plus a grace the transport is cut."""
        limit = (self.send_timeout_s or 30.0) + CLOSE_GRACE_S
        try:
            await asyncio.wait_for(asyncio.shield(self._task), limit)
        except TimeoutError:
            self._abort_transport()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def aclose(self) -> None:
        """The connection's handler is done: stop the sender task (whatever is still queued is dropped) and, after
        a stall, wait (bounded) until the client has read the close or was cut: the handler must not return
        before, or uvicorn closes the transport under a client that is still reading."""
        if not self._task.done():
            self._task.cancel()
        if self._closer is not None:
            await asyncio.shield(self._closer)

    async def _put(self, kind: str, data: Any) -> None:
        if self.gone_code is not None:
            raise WebSocketDisconnect(self.gone_code)
        if self.closed:
            return  # after the close nothing more goes out
        await self._queue.put((kind, data))
        if self.gone_code is not None:  # went while we waited for room
            raise WebSocketDisconnect(self.gone_code)

    # -- the sender task -------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            kind, data = await self._queue.get()
            if kind == "audio":
                payload, seconds, gen = data
                if gen != self._audio_gen:
                    continue  # queued before a cancel
                self.sent_audio_s += seconds
                kind, data = "bytes", payload
            try:
                await self._send_one(kind, data)
            except TimeoutError:
                self._stalled()
                return
            except (WebSocketDisconnect, RuntimeError, OSError) as e:  # the client went (RuntimeError: closed)
                self._gone(getattr(e, "code", 1006))
                return
            except Exception as e:  # noqa: BLE001 — uvicorn's ClientDisconnected and kin: the client is gone
                log.debug("WebSocket send failed: %s", type(e).__name__)
                self._gone(1006)
                return
            if kind == "close":
                self._gone(data[0])
                return

    async def _send_one(self, kind: str, data: Any) -> None:
        if kind == "bytes":
            coro = self.ws.send_bytes(data)
        elif kind == "text":
            coro = self.ws.send_text(data)
        else:
            coro = self.ws.close(data[0], reason=data[1])
        if self.send_timeout_s > 0:
            await asyncio.wait_for(coro, self.send_timeout_s)
        else:
            await coro

    def _gone(self, code: int) -> None:
        self.closed = True
        self.gone_code = code
        while not self._queue.empty():  # wake producers blocked on a full queue: they see gone_code
            self._queue.get_nowait()

    def _stalled(self) -> None:
        err = SlowReader(f"the client read nothing for {self.send_timeout_s:g} s while audio waited for it "
                         f"(ws_send_timeout_s); closing")
        log.warning("WebSocket %s: %s", self.ws.url.path, err.message)
        self.metrics.limit_refusals_total.labels(limit="ws_send_timeout").inc()
        self._gone(err.close_code)
        if self.on_stalled is not None:
            self.on_stalled(err)
        self._write_close_now(err)
        self._closer = asyncio.create_task(self._cut_unless_reading(), name="ws-sender-closer")

    def _write_close_now(self, err: TTSError) -> None:
        """Put the error frame and the close frame into the transport's buffer past the flow control (a few
        hundred bytes), so a client that resumes reading learns why; uvicorn's own send would wait behind the
        full buffer. Only where uvicorn's protocol object is known (its websockets-sansio implementation)."""
        proto = self._protocol
        conn, transport = getattr(proto, "conn", None), getattr(proto, "transport", None)
        if conn is None or transport is None or getattr(proto, "close_sent", True):
            return
        try:
            conn.send_text(json.dumps(ws_error_frame(err), separators=(",", ":")).encode())
            conn.send_close(err.close_code, _reason(err.message))
            transport.write(b"".join(conn.data_to_send()))
            proto.close_sent = True  # uvicorn must not try to close again
        except Exception:  # best effort: the transport is aborted after the grace anyway
            log.debug("could not queue the close frame", exc_info=True)

    async def _cut_unless_reading(self) -> None:
        """After a stall: a client that reads again gets the rest, the error frame and the close, and answers the
        close (uvicorn then closes the transport); one that makes no progress for CLOSE_GRACE_S while bytes
        wait, or has not finished within the send timeout more, is cut (transport.abort: no FIN waits on it)."""
        transport = getattr(self._protocol, "transport", None)
        if transport is None:
            return
        loop = asyncio.get_running_loop()
        cap = loop.time() + max(CLOSE_GRACE_S, self.send_timeout_s)
        deadline = loop.time() + CLOSE_GRACE_S
        last = transport.get_write_buffer_size()
        conn = getattr(self._protocol, "conn", None)
        while not transport.is_closing() and loop.time() < cap:
            await asyncio.sleep(0.1)
            if getattr(conn, "close_rcvd", None) is not None:  # it answered our close: the handshake is done
                transport.close()
                return
            size = transport.get_write_buffer_size()
            if size < last:
                deadline = loop.time() + CLOSE_GRACE_S  # it reads: let it finish
            last = size
            if size > 0 and loop.time() > deadline:
                break
        if transport.is_closing() and transport.get_write_buffer_size() == 0:
            return  # closed cleanly after the client answered the close
        self._abort_transport()

    def _abort_transport(self) -> None:
        transport = getattr(self._protocol, "transport", None)
        if transport is not None and not transport.is_closing():
            transport.abort()
        elif transport is not None:
            with contextlib.suppress(Exception):
                transport.abort()  # closing gracefully still waits for a reader that never comes

    def _limit_socket_buffer(self) -> None:
        transport = getattr(self._protocol, "transport", None)
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None:
            # ValueError: uvloop's pseudo-socket of a transport the client already closed has fd -1
            with contextlib.suppress(OSError, ValueError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_SEND_BUFFER)
