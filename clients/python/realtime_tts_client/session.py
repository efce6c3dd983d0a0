"""Session mode (PROTOCOL.md §2): one WebSocket, many contexts (agent turns), negotiated audio.

Owns Session (session.start → session.started, one reader task routing every server message to its context
by context_id, or by the binary header's slot) and Context (text/speak/flush/end/cancel(played_ms), an event
stream ending with context.done). Imports websockets and the client's own modules only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

import websockets
from websockets.exceptions import ConnectionClosed

from realtime_tts_client.audio import AudioFormat
from realtime_tts_client.events import (
    Audio,
    ContextStarted,
    Done,
    Event,
    Pong,
    ServerError,
    TTSServerError,
    Unknown,
    parse_binary,
    parse_json,
)
from realtime_tts_client.result import Result, collect


class SessionModeUnavailable(TTSServerError):
    """The server refused session.start (a server from before session mode): use simple mode."""


class Context:
    """One context (turn) of a session. Iterate `events()` up to and including its Done (context.done);
    server errors for it arrive as ServerError events before that."""

    def __init__(self, session: Session, context_id: str) -> None:
        self.session = session
        self.id = context_id
        self.queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()
        self.slot: int | None = None
        self.started = False  # context.started seen: the server opened it
        self.done: Done | None = None
        self.t0: float | None = None  # when its first text was sent
        self.audio_bytes = 0

    async def _send(self, kind: str, **extra: Any) -> None:
        if self.t0 is None and kind in ("text", "speak"):
            self.t0 = time.perf_counter()
        await self.session.send({"type": kind, "context_id": self.id, **extra})

    async def text(self, text: str) -> None:
        """Append text verbatim (LLM tokens: the caller supplies the spaces)."""
        if text:
            await self._send("text", text=text)

    async def speak(self, text: str) -> None:
        """The whole text, then end (the /v1/stream style)."""
        await self._send("speak", text=text)

    async def flush(self) -> None:
        await self._send("flush")

    async def end(self) -> None:
        await self._send("end")

    async def cancel(self, played_ms: float | None = None, *, wait: bool = True) -> Done | None:
        """Cancel (idempotent). With played_ms, context.done carries text_spoken: what the listener heard.
        wait=True drains the context to its context.done (audio still in flight is discarded) and returns it."""
        extra: dict[str, Any] = {} if played_ms is None else {"played_ms": round(played_ms)}
        if self.done is None:
            await self._send("cancel", **extra)
        if not wait:
            return None
        async for _ in self.events():
            pass
        return self.done

    async def events(self) -> AsyncIterator[Event]:
        while self.done is None:
            ev = await self.queue.get()
            if isinstance(ev, BaseException):
                raise ev
            if isinstance(ev, Audio):
                self.audio_bytes += len(ev.data)
            if isinstance(ev, Done):
                self.done = ev
            yield ev

    def __aiter__(self) -> AsyncIterator[Event]:
        return self.events()

    async def collect(self) -> Result:
        return await collect(self.events(), self.session.audio, self.t0 or time.perf_counter())


class Session:
    """A session-mode connection. `async with await Session.connect(ws_base, voice="auto") as s:`, then
    `ctx = s.context("turn-1")`, `await ctx.text(...)`, `await ctx.end()`, `async for ev in ctx: ...`."""

    def __init__(self, ws: websockets.ClientConnection, started: dict[str, Any]) -> None:
        self.ws = ws
        self.started = started
        self.id = str(started.get("session_id", ""))
        a = started.get("audio") or {}
        self.audio = AudioFormat(str(a.get("encoding", "pcm_s16le")), int(a.get("sample_rate", 24_000)))
        self.framing = "binary"
        self.contexts: dict[str, Context] = {}
        self.by_slot: dict[int, Context] = {}
        self.errors: list[ServerError] = []  # session-level errors (no context_id)
        self.unknown: list[dict[str, Any]] = []
        # audio for no live context: after its context.done, or on a slot no context.started named (the protocol
        # sends none; counted, not delivered, so a client can check that contract)
        self.stray_audio_bytes = 0
        self._pongs: asyncio.Queue[Pong] = asyncio.Queue()
        self._ids = itertools.count(1)
        self._reader = asyncio.create_task(self._read(), name=f"tts-session-{self.id}")

    @classmethod
    async def connect(cls, ws_base: str, *, audio: AudioFormat | None = None, framing: str = "binary",
                      endpoint: str = "/v1/stream/text", open_timeout: float = 30.0, **defaults: Any) -> Self:
        """Open the socket and start the session; `defaults` are request fields (§4) for every context."""
        ws = await websockets.connect(ws_base + endpoint, max_size=None, open_timeout=open_timeout)
        start: dict[str, Any] = {"type": "session.start", "framing": framing,
                                 **{k: v for k, v in defaults.items() if v is not None}}
        if audio is not None:
            start["audio"] = audio.wire()
        try:
            await ws.send(json.dumps(start))
            reply = json.loads(await asyncio.wait_for(ws.recv(), open_timeout))
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
            raise SessionModeUnavailable(ServerError("closed", e.rcvd.reason if e.rcvd else str(e)), code) from None
        if reply.get("type") != "session.started":
            ev = parse_json(reply)
            err = ev if isinstance(ev, ServerError) else ServerError("unexpected", json.dumps(reply)[:200])
            await ws.close()
            # a server without session mode names the field "type" of the first frame (docs/protocol.md)
            unavailable = err.field == "type" or "session mode" in err.message
            raise (SessionModeUnavailable if unavailable else TTSServerError)(err)
        session = cls(ws, reply)
        session.framing = framing
        return session

    def context(self, context_id: str | None = None) -> Context:
        """A new context (opened on the server by its first message, with the session's defaults)."""
        cid = context_id or f"ctx-{next(self._ids)}"
        if cid in self.contexts:
            raise ValueError(f"context {cid!r} is still live; an id may be reused after its context.done")
        ctx = Context(self, cid)
        self.contexts[cid] = ctx
        return ctx

    async def open_context(self, context_id: str | None = None, **overrides: Any) -> Context:
        """A new context opened explicitly with its own fields (voice, speed, ...)."""
        ctx = self.context(context_id)
        await self.send({"type": "context.open", "context_id": ctx.id,
                         **{k: v for k, v in overrides.items() if v is not None}})
        return ctx

    async def send(self, obj: dict[str, Any]) -> None:
        await self.ws.send(json.dumps(obj, separators=(",", ":")))

    async def cancel_all(self, played_ms: float | None = None) -> None:
        extra: dict[str, Any] = {} if played_ms is None else {"played_ms": round(played_ms)}
        await self.send({"type": "cancel", "context_id": "*", **extra})

    async def ping(self, timeout: float = 10.0) -> Pong:
        await self.send({"type": "ping"})
        return await asyncio.wait_for(self._pongs.get(), timeout)

    def _route(self, cid: str | None, ev: Event) -> None:
        ctx = self.contexts.get(cid) if cid is not None else None
        if ctx is None:
            if isinstance(ev, ServerError):
                self.errors.append(ev)
                if ev.fatal:
                    self._fail(TTSServerError(ev))
            elif isinstance(ev, Pong):
                self._pongs.put_nowait(ev)
            elif isinstance(ev, Unknown):
                self.unknown.append(ev.raw)
            elif isinstance(ev, Audio):
                self.stray_audio_bytes += len(ev.data)
            return
        if isinstance(ev, ContextStarted):
            ctx.started = True
            ctx.slot = ev.slot
            if ev.slot is not None:
                self.by_slot[ev.slot] = ctx
        if isinstance(ev, ServerError) and not ctx.started:
            # The server answers a message in order, and context.started comes first for a context it opened: an
            # error before it means the open was refused (too_many_contexts, a bad voice...). No context.done
            # follows for a context that never existed, so the client ends it here (reason "error", "refused").
            ctx.queue.put_nowait(ev)
            ev = Done(reason="error", stats={}, context_id=cid, raw={"refused": True, "error": ev.code})
        if isinstance(ev, Done):
            # the id may be reused after context.done: forget it (the Context object keeps its own state)
            del self.contexts[cid]  # type: ignore[arg-type]
            if ctx.slot is not None and self.by_slot.get(ctx.slot) is ctx:
                del self.by_slot[ctx.slot]
        ctx.queue.put_nowait(ev)

    def _fail(self, exc: BaseException) -> None:
        for ctx in list(self.contexts.values()):
            ctx.queue.put_nowait(exc)
        self.contexts.clear()
        self.by_slot.clear()

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if isinstance(msg, bytes):
                    slot, audio = parse_binary(msg, session=True)
                    ctx = self.by_slot.get(slot) if slot is not None else None
                    if ctx is None and not self.by_slot and len(self.contexts) == 1:
                        ctx = next(iter(self.contexts.values()))  # no context.started seen: one candidate
                    if ctx is not None:
                        self._route(ctx.id, audio)
                    else:
                        self.stray_audio_bytes += len(audio.data)
                    continue
                obj = json.loads(msg)
                self._route(obj.get("context_id"), parse_json(obj))
            self._fail(ConnectionError("the server closed the session"))
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd else None
            self._fail(TTSServerError(ServerError("closed", e.rcvd.reason if e.rcvd else str(e)), code))
        except Exception as e:  # noqa: BLE001 — a malformed frame: every waiting context learns of it
            self._fail(e)

    async def close(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self.send({"type": "session.close"})
        with contextlib.suppress(asyncio.TimeoutError, ConnectionClosed):
            await asyncio.wait_for(asyncio.shield(self._reader), 5.0)
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()
