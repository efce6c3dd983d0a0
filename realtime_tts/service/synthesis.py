"""Synthesis: one response ("context"): text in (whole or incremental), ordered audio events out, with text
offsets and segment indices, reusable by the multi-context session mode. A facade over the parts, each the
one owner of its concern: planning (units, duration shares, SegmentRequests, deadlines), speculation (the
speculative first unit), production (segments against the engine), output (pacing, framing, events) and stats.
This module takes the text, ties the parts together and owns cancellation and teardown.

Imports engine.base (never a concrete engine), text, errors, protocol and the parts; never torch, never
Starlette. The parts never import this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from realtime_tts.engine.base import Engine, SegmentRequest, Voice, VoicePrompt
from realtime_tts.errors import TTSError
from realtime_tts.protocol import Params
from realtime_tts.service.continuity import Continuity, VoiceThread, voice_signature
from realtime_tts.service.events import Event
from realtime_tts.service.output import Output
from realtime_tts.service.planning import SPLIT_INLINE_CHARS, Plan, duration_shares, split_units
from realtime_tts.service.production import CANCELLED, END, LOOKAHEAD, Production, Segment
from realtime_tts.service.speculation import Speculation
from realtime_tts.service.stats import Stats
from realtime_tts.text import SentenceBuffer, Unit

if TYPE_CHECKING:
    from realtime_tts.service.service import Service

log = logging.getLogger(__name__)


class Synthesis:
    """One response: text in (whole or incremental), ordered audio events out.

    Use as `async with service.open(...) as synth:`; leaving the block aborts every engine request still
    running and records the request's metrics exactly once. Incremental text speculates on its first unit
    (service/speculation.py).
    """

    def __init__(self, service: Service, engine: Engine, params: Params, *, endpoint: str, incremental: bool,
                 streaming: bool, prompt: VoicePrompt | None, voice_thread: VoiceThread | None = None):
        self.id = uuid.uuid4().hex[:12]
        self._service = service
        self._engine = engine
        self.params = params
        self.endpoint = endpoint
        self.sample_rate = engine.capabilities.sample_rate
        self.engine_name = engine.capabilities.engine
        cfg = service.config
        self._buffer = SentenceBuffer(min_chars=cfg.text.min_chars,
                                      first_segment_min_chars=cfg.text.first_segment_min_chars,
                                      target_chars=cfg.text.target_chars, max_chars=cfg.text.max_chars) \
            if incremental else None
        self._stats = Stats(self.sample_rate)
        voice = Voice(mode=params.voice_mode, instruct=params.instruct, prompt=prompt, preset=params.preset)
        continuity = None
        self.voice_thread: VoiceThread | None = None  # the conversation's voice (engines with continuity)
        if engine.capabilities.continuity and cfg.omnivoice.voice_continuity:
            self.voice_thread = voice_thread or VoiceThread()
            self.voice_thread.adopt(voice_signature(params))
            continuity = Continuity(self.id, self.voice_thread, voice, chunk_mode=params.chunk_mode,
                                    prompt_max_s=cfg.omnivoice.continuity_prompt_max_s)
        self._plan = Plan(self.id, params, voice, engine=engine.capabilities.engine, streaming=streaming,
                          stats=self._stats, continuity=continuity)
        self._production = Production(self.id, engine, self._plan, lookahead=LOOKAHEAD[params.chunk_mode],
                                      on_first_audio=self._confirm_by_audio)
        self._speculation = Speculation(self.id, self._production, self._plan, service.metrics)
        self._output = Output(self.sample_rate, cfg.pacing, self._stats)
        self._splitter: asyncio.Task[None] | None = None
        self._ended = False
        self.units_out = 0  # units handed to production so far (each becomes one segment, in order)
        self.cancel_stage: str | None = None
        self.error: TTSError | None = None
        self.warnings: tuple[str, ...] = ()  # e.g. a preset this engine plays with another voice
        self._recorded = False

    # -- text in -------------------------------------------------------------------------------------------

    def speak(self, text: str) -> None:
        """Whole text at once (/v1/stream, HTTP): the long-text chunker cuts it (on a thread when the text is
        long), then the text ends."""
        self._stats.note_text(len(text))
        if self.params.chunk_mode == "none" or len(text) <= SPLIT_INLINE_CHARS:
            self._speak_units(self._split(text))
        else:
            self._ended = True  # no more text comes; the units and the end mark follow from the thread
            self._splitter = asyncio.create_task(self._split_off_loop(text), name=f"synth-{self.id}-split")

    def _split(self, text: str) -> list[Unit]:
        return split_units(text, self.params.chunk_mode, self._service.config.text)

    async def _split_off_loop(self, text: str) -> None:
        try:
            units = await asyncio.to_thread(self._split, text)
        except TTSError as e:
            self._production.segments.put_nowait(e)
            return
        except Exception as e:  # a text-package bug: an internal error for this request, the server stays up
            log.exception("split_text failed")
            self._production.segments.put_nowait(TTSError(f"text split failed: {type(e).__name__}: {e}"))
            return
        self._speak_units(units)

    def _speak_units(self, units: list[Unit]) -> None:
        if self.params.duration is not None and units:
            self._plan.duration_share = duration_shares(units, self.params.duration)
        self._put_units(units)
        self._ended = True
        self._production.units.put_nowait(END)

    def feed(self, chunk: str) -> None:
        if self._buffer is None or self._ended:
            return
        self._stats.note_text(len(chunk))
        self._put_units(self._buffer.feed(chunk))
        if not (self._speculation.first_unit_out or self._production.cancelled):
            self._speculation.consider(self._buffer.peek_first_unit())

    def flush(self) -> None:
        if self._buffer is not None and not self._ended:
            self._put_units(self._buffer.flush())

    def end(self) -> None:
        if self._ended:
            return
        if self._buffer is not None:
            self._put_units(self._buffer.end())
        self._ended = True
        self._production.units.put_nowait(END)

    @property
    def ended(self) -> bool:
        return self._ended

    def _put_units(self, units: list[Unit]) -> None:
        for u in units:
            if u.text.strip():
                self.units_out += 1
                self._speculation.unit_out(u)
                self._production.units.put_nowait(u)

    def _confirm_by_audio(self, seg: Segment) -> None:
        """A segment's first audio arrived: if it is the speculation's, no text contradicted it yet and more text
        may still come, cut the turn there (Speculation.confirms_by_audio says when)."""
        if (self._buffer is not None and not self._ended and not self._production.cancelled
                and self._speculation.confirms_by_audio(seg)):
            self._put_units(self._buffer.flush())

    def segment_request(self, index: int, unit: Unit) -> SegmentRequest:
        """The engine request unit would become as segment index (Service.open lets engines check it)."""
        return self._plan.request(index, unit, shaped=False)

    # -- audio out -----------------------------------------------------------------------------------------

    def buffered(self) -> None:
        """The caller collects all the audio before sending it (an HTTP body with "stream": false): frames are
        whole segments. Call before events()."""
        self._output.whole_segments()

    async def events(self) -> AsyncGenerator[Event, None]:
        """Ordered events until the text has ended and all its audio is out (or cancel). Engine errors are
        raised here (errors.TTSError)."""
        self._production.start()
        # aclosing: closing this generator closes the output loop at once, not when it is garbage-collected
        async with contextlib.aclosing(self._output.events(self._production,
                                                           lambda: self._service.wants_events(self))) as events:
            async for event in events:
                yield event

    # -- cancellation and teardown ---------------------------------------------------------------------------

    def cancel(self, stage: str = "client") -> None:
        """Stop now: queued and in-flight segments are aborted, unsent audio is dropped."""
        if self._production.cancelled or self._stats.t_end is not None:
            return
        self._production.cancelled = True
        self.cancel_stage = stage
        self._abort_all()
        self._production.segments.put_nowait(CANCELLED)

    @property
    def cancelled(self) -> bool:
        return self._production.cancelled

    def _abort_all(self) -> None:
        if self._production.task is not None:
            self._production.task.cancel()
        if self._splitter is not None:
            self._splitter.cancel()
        self._speculation.drop(miss=False)
        self._production.abort_segments()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        spec = self._speculation.spec
        tasks = self._production.tasks() + ([spec.task] if spec is not None and spec.task is not None else [])
        tasks += ([self._splitter] if self._splitter is not None else []) + self._speculation.dropped
        self._abort_all()
        try:
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:  # recorded even when this wait is cancelled (an HTTP client that left: Starlette cancels)
            if isinstance(exc, TTSError):
                self.error = exc
            elif exc is not None and not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                self.error = TTSError(str(exc))
            self._service.record(self, disconnected=exc is not None and self.error is None)

    # -- stats ---------------------------------------------------------------------------------------------

    @property
    def num_chars(self) -> int:
        return self._stats.num_chars

    @property
    def pending_chars(self) -> int:
        """Text received but not yet spoken (its segment has not finished): what limits.check_buffered bounds."""
        return max(0, self._stats.num_chars - self._stats.text_done)

    @property
    def t_start(self) -> float:
        return self._stats.t_start

    @property
    def num_segments(self) -> int:
        return self._stats.num_segments

    @property
    def samples_out(self) -> int:
        return self._stats.samples_out

    @property
    def batch_sizes(self) -> list[int]:
        return self._stats.batch_sizes

    @property
    def num_steps(self) -> list[int]:
        return self._stats.num_steps

    def stats(self) -> dict[str, Any]:
        """The stats envelope (PROTOCOL.md §5)."""
        return self._stats.envelope(self._engine.capabilities)
