"""Session core (PROTOCOL.md §2), transport-neutral: the contexts of one session-mode connection, each a
Synthesis, and ONE ordered output of (context_id, event) for the transport to send.

    session = Session(service, defaults, endpoint="ws_session", max_contexts=8)   # one VoiceThread of its own
    session.text("c1", "Hello there. ")    # the first message naming an id opens it (or session.open(id, params))
    session.flush("c1"); session.end("c1"); session.speak("c2", "Whole text.")   # speak = text + end
    session.cancel("c1", played_ms=850)   # or "*": every live context; unknown/finished: already_done
    while True:
        context_id, event = await session.next()   # the transport sends event, in this order
    await session.aclose()                   # aborts every context's engine work (disconnect)
    session.note(context_id, payload)        # a transport message (error reply, pong) queued in order -> Note
    session.expire_idle(20.0)                # call now and then: contexts idle that long are ended ("idle")

Events, per context, in order: ContextStarted, then per segment SegmentStarted, AudioFrame..., SegmentEnded,
Words; FlushDone where a flush's audio is all out; ContextError (then ContextDone "error") on an engine failure;
ContextDone LAST, always, reason "end" | "cancelled" | "error" | "idle" (nothing for that context follows it
until the id is opened again). Offsets are
code-point offsets into the context's raw text (everything received for it, concatenated); sample offsets are
at the engine's rate (Session.sample_rate(context_id)), counted from the context's first sample: the transport
converts them to its negotiated rate.

Cancel is synchronous and total: the context's engine work is aborted (Synthesis.cancel), every event of it
still queued here is dropped at once, and ContextDone("cancelled") is queued with what was heard (Heard) — so
once cancel() returns, next() yields no audio of that context. The transport must not buffer events between
next() and its socket (or must drop a cancelled context's events from its own buffer), which keeps that promise
end to end. Backpressure: the contexts' audio waiting here is bounded (max_buffered_s of audio, all contexts
together); past it each context's producer waits, so its engine work stalls at the Synthesis lookahead, and
memory stays bounded while the client does not read.

One voice per conversation: every context of a session is one thread of it (service/continuity.VoiceThread),
so on engines that sample a voice per generation the first segment's voice is kept by all later contexts.

Imports this package's synthesis/service/events/heard/words/continuity, protocol(_session) and errors; never
torch, never Starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from realtime_tts.errors import BadRequest, TooManyContexts, TTSError
from realtime_tts.protocol import Params, SpeechRequest
from realtime_tts.protocol_session import CONTEXT_ID_RE
from realtime_tts.service.continuity import VoiceThread
from realtime_tts.service.events import AudioFrame, Event, SegmentEnded, SegmentStarted
from realtime_tts.service.heard import Heard, SpokenLog
from realtime_tts.service.service import Service
from realtime_tts.service.synthesis import Synthesis
from realtime_tts.service.words import Word, estimate_words

log = logging.getLogger(__name__)

ALL = "*"  # cancel's "every live context"


@dataclass(frozen=True, slots=True)
class ContextStarted:
    slot: int  # u16 the binary frame header carries for this context (unique among the live ones)


@dataclass(frozen=True, slots=True)
class Words:
    """Word timings of the segment that just ended (after its SegmentEnded)."""

    segment_index: int
    words: tuple[Word, ...]
    estimated: bool  # True: spread over the segment's audio by weight (no engine gives word times yet)


@dataclass(frozen=True, slots=True)
class FlushDone:
    """Everything received before the flush has been sent as audio."""


@dataclass(frozen=True, slots=True)
class ContextError:
    error: TTSError  # not fatal for the session: a ContextDone("error") follows


@dataclass(frozen=True, slots=True)
class ContextDone:
    reason: Literal["end", "cancelled", "error", "idle"]
    stats: dict[str, Any] | None = None  # the stats envelope (PROTOCOL.md §5); None when already_done
    heard: Heard | None = None  # with reason "cancelled"
    already_done: bool = False  # cancel of an unknown or finished context


@dataclass(frozen=True, slots=True)
class Note:
    """A transport's own message (an error reply, a pong), queued in order with the contexts' events."""

    payload: Any


SessionEvent = Event | ContextStarted | Words | FlushDone | ContextError | ContextDone | Note


class _Context:
    def __init__(self, context_id: str, slot: int, synth: Synthesis):
        self.id = context_id
        self.slot = slot
        self.synth = synth
        self.text = ""  # everything received, concatenated (offsets point into it)
        self.last_input = time.monotonic()  # the last message naming it
        self.done_reason: Literal["end", "idle"] = "end"
        self.cancelled = False
        self.pump: asyncio.Task[None] | None = None
        self.flush_targets: deque[int | None] = deque()  # units to be ended per pending flush (None: all)
        self.segments_ended = 0  # by the producer
        self.segment_start: SegmentStarted | None = None  # by the producer, for word timings
        self.spoken = SpokenLog(synth.sample_rate)  # by delivery (next()): what was heard is judged from it


class _Outbox:
    """The one ordered queue between the contexts' producers and the transport. Audio is bounded (put waits);
    control events never wait. purge() drops a context's queued events at once."""

    def __init__(self, max_audio_s: float):
        self._items: deque[tuple[str, _Context | None, SessionEvent, float]] = deque()
        self._audio_s = 0.0
        self._max = max_audio_s
        self._ready = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self.closed = False

    @property
    def audio_s(self) -> float:
        return self._audio_s

    @property
    def pending(self) -> int:
        return len(self._items)

    async def put(self, ctx: _Context, ev: SessionEvent) -> None:
        seconds = len(ev.pcm) / 2 / ctx.synth.sample_rate if isinstance(ev, AudioFrame) else 0.0
        while seconds and self._audio_s >= self._max and not (ctx.cancelled or self.closed):
            self._space.clear()
            await self._space.wait()
        if ctx.cancelled or self.closed:
            return
        self._append(ctx.id, ctx, ev, seconds)

    def put_now(self, context_id: str, ctx: _Context | None, ev: SessionEvent) -> None:
        self._append(context_id, ctx, ev, 0.0)

    def _append(self, context_id: str, ctx: _Context | None, ev: SessionEvent, seconds: float) -> None:
        self._items.append((context_id, ctx, ev, seconds))
        self._audio_s += seconds
        self._ready.set()

    async def get(self) -> tuple[str, _Context | None, SessionEvent]:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        context_id, ctx, ev, seconds = self._items.popleft()
        if seconds:
            # re-zeroed when empty: the float sum of many frames' seconds must not drift below 0
            self._audio_s = self._audio_s - seconds if self._items else 0.0
            self._space.set()
        return context_id, ctx, ev

    def purge(self, ctx: _Context) -> None:
        kept = [item for item in self._items if item[1] is not ctx]
        if len(kept) != len(self._items):
            self._items = deque(kept)
            self._audio_s = sum(item[3] for item in kept)
        self._space.set()  # wakes producers waiting for room, the cancelled one included

    def close(self) -> None:
        self.closed = True
        self._space.set()


class Session:
    """One session: live contexts keyed by the client's ids, one ordered output. Not thread-safe (one event
    loop); every method but next() and aclose() is synchronous, so a transport applies a client message fully
    before it reads the next one."""

    def __init__(self, service: Service, defaults: Params, *, endpoint: str = "ws_session", max_contexts: int = 8,
                 max_buffered_s: float = 2.0, voice_thread: VoiceThread | None = None):
        self._service = service
        self.defaults = defaults
        self.endpoint = endpoint
        self.max_contexts = max_contexts
        # One voice per conversation (PROTOCOL.md §8): every context of the session is one thread of it, so the
        # first segment generated in auto/design mode is the voice of all later ones (service/continuity.py).
        self.voice_thread = voice_thread or VoiceThread()
        self._contexts: dict[str, _Context] = {}
        self._out = _Outbox(max_buffered_s)
        self._pumps: set[asyncio.Task[None]] = set()
        self._slots = 0

    # -- client messages -------------------------------------------------------------------------------------

    def open(self, context_id: str, params: Params | None = None) -> None:
        """Open a context explicitly (else the first text/speak/flush/end naming it opens it with the defaults).
        Raises BadRequest (bad or live id), TooManyContexts, or whatever Service.open refuses (voice, rate)."""
        if not isinstance(context_id, str) or not CONTEXT_ID_RE.fullmatch(context_id):
            raise BadRequest("context_id must match [A-Za-z0-9._:-]{1,128}", field="context_id")
        if context_id in self._contexts:
            raise BadRequest(f"context {context_id!r} is already open", field="context_id")
        if len(self._contexts) >= self.max_contexts:
            raise TooManyContexts(f"{len(self._contexts)} contexts are live, the limit per socket is "
                                  f"{self.max_contexts}; end or cancel one first", field="context_id")
        params = dataclasses.replace(params or self.defaults, events=True)  # the session always sends segments
        synth = self._service.open(SpeechRequest(text="", params=params), endpoint=self.endpoint, incremental=True,
                                   streaming=True, voice_thread=self.voice_thread)
        ctx = _Context(context_id, self._slots % 65536, synth)
        self._slots += 1
        self._contexts[context_id] = ctx
        self._out.put_now(context_id, ctx, ContextStarted(ctx.slot))
        ctx.pump = asyncio.create_task(self._pump(ctx), name=f"session-{context_id}-{synth.id}")
        self._pumps.add(ctx.pump)
        ctx.pump.add_done_callback(self._pumps.discard)

    def text(self, context_id: str, text: str) -> None:
        """Append text verbatim (the client supplies spaces); units go to the engine as they complete."""
        ctx = self._writable(context_id, "text")
        ctx.text += text
        ctx.synth.feed(text)

    def speak(self, context_id: str, text: str) -> None:
        """text + end. On a context with no text yet the whole-text chunker cuts it (the /v1/stream way)."""
        ctx = self._writable(context_id, "text")
        if ctx.text:
            self.text(context_id, text)
            ctx.synth.end()
        else:
            ctx.text = text
            ctx.synth.speak(text)

    def flush(self, context_id: str) -> None:
        """Synthesize everything buffered now; FlushDone follows once its audio is all out."""
        ctx = self._context(context_id)
        if ctx.synth.ended:
            ctx.flush_targets.append(None)  # whatever remains: answered just before its ContextDone
        else:
            ctx.synth.flush()
            ctx.flush_targets.append(ctx.synth.units_out)
            self._flushes_done(ctx)

    def end(self, context_id: str) -> None:
        """No more text: the remainder is the last unit; ContextDone("end") follows its audio. Idempotent."""
        self._context(context_id).synth.end()

    def cancel(self, context_id: str, played_ms: float | None = None, *, stage: str = "client") -> None:
        """Stop now. ContextDone("cancelled", heard=...) is queued, and nothing else of the context will be
        yielded. "*" cancels every live context. Unknown or finished: ContextDone(already_done=True)."""
        if context_id == ALL:
            for ctx in list(self._contexts.values()):
                self._cancel(ctx, played_ms, stage)
            return
        live = self._contexts.get(context_id)
        if live is None:
            self._out.put_now(context_id, None, ContextDone("cancelled", already_done=True))
            return
        self._cancel(live, played_ms, stage)

    def note(self, context_id: str | None, payload: Any) -> None:
        """Queue a transport message in order with the events (yielded as (context_id or "", Note(payload)))."""
        self._out.put_now(context_id or "", None, Note(payload))

    def expire_idle(self, idle_s: float) -> None:
        """End every context that is not ended and has received nothing for idle_s: its text is spoken, then
        ContextDone("idle"). Call it now and then (the transport's timer)."""
        if idle_s <= 0:
            return
        now = time.monotonic()
        for ctx in list(self._contexts.values()):
            if not ctx.synth.ended and now - ctx.last_input >= idle_s:
                ctx.done_reason = "idle"
                ctx.synth.end()

    # -- output ------------------------------------------------------------------------------------------------

    async def next(self) -> tuple[str, SessionEvent]:
        """The next (context_id, event) to send, in order. Waits while there is none."""
        while True:
            context_id, ctx, ev = await self._out.get()
            if ctx is not None and ctx.cancelled and not isinstance(ev, ContextDone):
                continue  # purged at cancel; kept as a second guard
            if ctx is not None:
                self._delivered(ctx, ev)
            return context_id, ev

    def __aiter__(self) -> Session:
        return self

    async def __anext__(self) -> tuple[str, SessionEvent]:
        return await self.next()

    # -- state ---------------------------------------------------------------------------------------------------

    @property
    def live_contexts(self) -> int:
        return len(self._contexts)

    @property
    def queued_events(self) -> int:
        return self._out.pending

    @property
    def buffered_audio_s(self) -> float:
        """Audio queued here, not yet taken by the transport (all contexts)."""
        return self._out.audio_s

    def sample_rate(self, context_id: str) -> int | None:
        ctx = self._contexts.get(context_id)
        return ctx.synth.sample_rate if ctx is not None else None

    def has_context(self, context_id: str) -> bool:
        return context_id in self._contexts

    async def aclose(self, stage: str = "disconnect") -> None:
        """The connection is gone: abort every context's engine work (no ContextDone is queued) and wait for it."""
        self._out.close()
        for ctx in list(self._contexts.values()):
            ctx.cancelled = True
            ctx.synth.cancel(stage)
        self._contexts.clear()
        pumps = list(self._pumps)
        for task in pumps:
            task.cancel()
        if pumps:
            await asyncio.gather(*pumps, return_exceptions=True)

    # -- internals -----------------------------------------------------------------------------------------------

    def _context(self, context_id: str) -> _Context:
        """The live context, opened with the defaults when the id is new."""
        ctx = self._contexts.get(context_id)
        if ctx is None:
            self.open(context_id)
            ctx = self._contexts[context_id]
        ctx.last_input = time.monotonic()
        return ctx

    def _writable(self, context_id: str, field: str) -> _Context:
        ctx = self._context(context_id)
        if ctx.synth.ended:
            raise BadRequest(f"context {context_id!r} has ended: no text is taken after end (wait for its "
                             "context.done, then reuse the id)", field=field)
        return ctx

    def _cancel(self, ctx: _Context, played_ms: float | None, stage: str) -> None:
        ctx.cancelled = True
        ctx.synth.cancel(stage)
        self._out.purge(ctx)  # its queued audio never leaves, nor a ContextDone("end") queued behind it
        if self._contexts.get(ctx.id) is ctx:
            del self._contexts[ctx.id]  # the id is free again; its ContextDone is queued before anything new
        self._out.put_now(ctx.id, ctx, ContextDone("cancelled", stats=ctx.synth.stats(),
                                                   heard=ctx.spoken.heard(ctx.text, played_ms)))

    def _delivered(self, ctx: _Context, ev: SessionEvent) -> None:
        ctx.spoken.note(ev)
        if isinstance(ev, ContextDone) and self._contexts.get(ctx.id) is ctx:
            del self._contexts[ctx.id]

    def _flushes_done(self, ctx: _Context) -> None:
        while ctx.flush_targets and ctx.flush_targets[0] is not None and \
                ctx.flush_targets[0] <= ctx.segments_ended:
            ctx.flush_targets.popleft()
            self._out.put_now(ctx.id, ctx, FlushDone())

    async def _pump(self, ctx: _Context) -> None:
        """One context's producer: its Synthesis's events into the outbox, then its ContextDone."""
        synth = ctx.synth
        error: TTSError | None = None
        try:
            async with synth, contextlib.aclosing(synth.events()) as events:
                async for ev in events:
                    if ctx.cancelled:
                        break
                    await self._out.put(ctx, ev)
                    if isinstance(ev, SegmentStarted):
                        ctx.segment_start = ev
                    elif isinstance(ev, SegmentEnded):
                        self._segment_ended(ctx, ev)
        except TTSError as e:
            error = e
        except Exception as e:  # a bug in one context: reported on it, the session and other contexts go on
            log.exception("session context %s failed", ctx.id)
            error = TTSError(f"internal error: {type(e).__name__}")
        if ctx.cancelled or self._out.closed:
            return
        if error is not None:
            self._out.put_now(ctx.id, ctx, ContextError(error))
            self._out.put_now(ctx.id, ctx, ContextDone("error", stats=synth.stats()))
            return
        for _ in ctx.flush_targets:
            self._out.put_now(ctx.id, ctx, FlushDone())
        ctx.flush_targets.clear()
        self._out.put_now(ctx.id, ctx, ContextDone(ctx.done_reason, stats=synth.stats()))

    def _segment_ended(self, ctx: _Context, ev: SegmentEnded) -> None:
        ctx.segments_ended = ev.segment_index + 1
        start = ctx.segment_start
        if start is not None and start.segment_index == ev.segment_index:
            words = estimate_words(ctx.text[start.text_start:start.text_end], start.text_start,
                                   start.audio_start_sample, ev.audio_end_sample)
            self._out.put_now(ctx.id, ctx, Words(ev.segment_index, tuple(words), estimated=True))
        self._flushes_done(ctx)
