"""Service layer: turns a request or a WS text stream into segments, drives an engine, paces and frames the
audio, builds the stats envelope, records metrics and owns cancellation.

The unit of work is a Synthesis ("context"): text stream → units → segments → ordered audio events, with
text offsets and segment indices, reusable by the multi-context session mode. Imports engine.base (never a
concrete engine), text, audio, metrics, protocol, omnivoice_text; never torch, never Starlette.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import resource
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import numpy as np

from realtime_tts.audio import Framer, Pacer, to_pcm16
from realtime_tts.config import Config
from realtime_tts.engine.base import (
    PRIORITY_BULK,
    PRIORITY_FIRST,
    PRIORITY_STREAM,
    AudioChunk,
    Engine,
    Priority,
    SegmentRequest,
    Voice,
    VoicePrompt,
)
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import NotFound, TTSError
from realtime_tts.metrics import Metrics
from realtime_tts.omnivoice_text import FRAME_RATE_HZ, target_frames
from realtime_tts.protocol import Params, SpeechRequest
from realtime_tts.text import SentenceBuffer, Unit, normalize_space, number_may_go_on, split_text, text_length

log = logging.getLogger(__name__)

# Segments generated ahead of the one being sent (pipelining), per chunk_mode. Public for
# bench/omnivoice_sched_sim.py, which replays this service's timing.
LOOKAHEAD = {"concurrent": 2, "sequential": 1, "none": 1}
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# Texts longer than this are cut into units on a thread: split_text takes ~1 ms per 2,000 characters here but
# grows faster than linearly (~11 ms at 8,000, ~26 ms at 20,000), too long to hold the event loop.
_SPLIT_INLINE_CHARS = 2_000
# Assumed time from a response's first segment starting to its first audio: issue 5's p95 first-audio target
# under load (an idle engine is faster; under load is when deadlines rank anything).
FIRST_AUDIO_S = 0.3
# Share of the estimated audio of earlier segments counted in a later segment's deadline: pacing trims their
# edge silence, so real playback is a little shorter than the estimate.
_ESTIMATE_TRIM = 0.9
# Speech per spoken token (text_length) for engines without a length rule. The CPU voice measured 0.32–0.46 s per
# word on 3–11 word English sentences; the low end keeps the estimated deadlines early rather than late.
_SECONDS_PER_TOKEN = 0.3


def speakable(text: str) -> bool:
    """Has something a voice can say: a letter or a digit (only punctuation, symbols or emoji: nothing)."""
    return any(ch.isalnum() for ch in text)


def estimate_audio_s(text: str, *, engine: str, speed: float = 1.0, prompt: VoicePrompt | None = None,
                     duration_s: float | None = None) -> float:
    """Seconds of audio a unit of text will become, from the text alone (pure Python, no model).

    OmniVoice: its own length rule (omnivoice_text.target_frames, at the clone reference's pace when there is
    one), which is the length it generates. Other engines: _SECONDS_PER_TOKEN per spoken token (words; CJK
    characters) over speed, a language-agnostic rough figure. A fixed duration_s wins. Text with nothing to
    say is 0 s. Pacing gaps between segments are not counted (they only add slack).
    """
    if duration_s is not None:
        return duration_s
    if not speakable(text):
        return 0.0
    if engine == "omnivoice":
        ref_text, ref_frames = (prompt.ref_text, prompt.num_frames) if prompt is not None else (None, None)
        return target_frames(text, ref_text, ref_frames, speed=speed) / FRAME_RATE_HZ
    return max(1, text_length(text)) * _SECONDS_PER_TOKEN / speed


def playback_deadline(first_audio_at: float | None, first_due: float | None, sent_s: float,
                      planned_s: float) -> float | None:
    """When playback of a stream runs dry without its next segment (on the clock of the times given): from the
    first audio (first_audio_at once it was sent, else first_due, when it is expected), the audio of every
    earlier segment: what was sent (sent_s), or the estimate of all of them (planned_s) trimmed for the silence
    pacing removes, whichever is longer. Not just what was sent: a reply's third sentence is due after the
    second one's audio, not with it. None while no first segment has started."""
    if first_audio_at is not None:
        return first_audio_at + max(sent_s, _ESTIMATE_TRIM * planned_s)
    if first_due is not None:
        return first_due + _ESTIMATE_TRIM * planned_s
    return None


# -- events a Synthesis yields, in order ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentStarted:
    segment_index: int
    text: str
    text_start: int
    text_end: int
    audio_start_sample: int


@dataclass(frozen=True, slots=True)
class AudioFrame:
    pcm: bytes  # int16 little-endian mono at the response's sample rate
    segment_index: int


@dataclass(frozen=True, slots=True)
class SegmentEnded:
    segment_index: int
    audio_end_sample: int
    queue_ms: float
    gen_ms: float


Event = SegmentStarted | AudioFrame | SegmentEnded


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def peak_rss_bytes() -> int:
    """Peak RSS of the whole process since it started: VmHWM, else ru_maxrss (both KiB on Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _Cancelled:
    """Sentinel pushed into queues to wake the sender when a synthesis is cancelled."""


_CANCELLED = _Cancelled()
_END = None


@dataclass(slots=True)
class _Segment:
    index: int
    unit: Unit
    request: SegmentRequest
    chunks: asyncio.Queue[AudioChunk | BaseException | _Cancelled | None]
    task: asyncio.Task[None] | None = None
    has_audio: asyncio.Event = field(default_factory=asyncio.Event)  # first chunk arrived (or it ended)


class Synthesis:
    """One response: text in (whole or incremental), ordered audio events out.

    Use as `async with service.open(...) as synth:`; leaving the block aborts every engine request still
    running and records the request's metrics exactly once.

    Speculative first unit (incremental text only): while the turn's first unit is undecided and the text so far
    ends where it would end if the next word starts a new sentence (SentenceBuffer.peek_first_unit), that unit's
    engine request starts at once, privately (not a segment yet). The next text either confirms it (the buffer
    emits the same unit: the running request becomes segment 0) or contradicts it (abort; the real unit goes
    the normal way). If its audio arrives before any more text, the turn is cut there (buffer flush) and the
    audio goes out: first audio never waits for the next word, at the price of a sentence split in two when the
    text later turns out to go on ("that." ... "in five minutes"): still every word once, in order. A guess
    ending in a number ("3.") is the exception: it waits for the next text (see _confirm_by_audio).
    """

    def __init__(self, service: Service, engine: Engine, params: Params, *, endpoint: str, incremental: bool,
                 streaming: bool, prompt: VoicePrompt | None):
        self.id = uuid.uuid4().hex[:12]
        self._service = service
        self._engine = engine
        self.params = params
        self.endpoint = endpoint
        self.sample_rate = engine.capabilities.sample_rate
        self._streaming = streaming
        self._voice = Voice(mode=params.voice_mode, instruct=params.instruct, prompt=prompt, preset=params.preset)
        cfg = service.config
        self._buffer = SentenceBuffer(min_chars=cfg.text.min_chars,
                                      first_segment_min_chars=cfg.text.first_segment_min_chars,
                                      target_chars=cfg.text.target_chars, max_chars=cfg.text.max_chars) \
            if incremental else None
        self._pacer = Pacer(self.sample_rate, lead_in_ms=cfg.pacing.lead_in_ms, gap_ms=cfg.pacing.gap_ms,
                            tail_ms=cfg.pacing.tail_ms, silence_db=cfg.pacing.silence_db)
        self._framer = Framer(self.sample_rate, first_frame_ms=cfg.pacing.first_frame_ms,
                              frame_ms=cfg.pacing.frame_ms)
        self._units: asyncio.Queue[Unit | None] = asyncio.Queue()
        self._segments: asyncio.Queue[_Segment | TTSError | _Cancelled | None] = asyncio.Queue()
        self._splitter: asyncio.Task[None] | None = None
        self._live: dict[int, _Segment] = {}
        self._lookahead = asyncio.Semaphore(LOOKAHEAD[params.chunk_mode])
        self._producer: asyncio.Task[None] | None = None
        self._ended = False
        self._cancelled = False
        self.cancel_stage: str | None = None
        self.error: TTSError | None = None
        self._duration_share: dict[int, float] = {}
        # speculative first unit (see the class docstring)
        self._first_unit_out = False  # the turn's first unit has been emitted (then nothing is speculated)
        self._spec: _Segment | None = None  # running, private: its unit is not confirmed yet
        self._adopted: _Segment | None = None  # confirmed: becomes segment 0 when the producer gets there
        self._dropped: list[asyncio.Task[None]] = []  # aborted speculations, awaited on exit
        self._num_speculations = 0
        # estimated deadlines of later segments before first audio
        self._first_due: float | None = None  # time.monotonic() the first audio is expected by
        self._planned_audio_s = 0.0  # estimated audio of the segments created so far (streaming only)
        # stats
        self.num_chars = 0
        self.t_start = time.perf_counter()
        self._t_first_text: float | None = None
        self._t_first_audio: float | None = None
        self._t_end: float | None = None
        self._samples_out = 0
        self._num_segments = 0
        self._first_queue_ms: float | None = None
        self._batch_sizes: list[int] = []
        self._rss_start = rss_bytes()
        self._recorded = False

    # -- text in -------------------------------------------------------------------------------------------

    def speak(self, text: str) -> None:
        """Whole text at once (/v1/stream, HTTP): the long-text chunker cuts it (on a thread when the text is
        long), then the text ends."""
        self._note_text(len(text))
        if self.params.chunk_mode == "none" or len(text) <= _SPLIT_INLINE_CHARS:
            self._speak_units(self._split(text))
        else:
            self._ended = True  # no more text comes; the units and the end mark follow from the thread
            self._splitter = asyncio.create_task(self._split_off_loop(text), name=f"synth-{self.id}-split")

    def _split(self, text: str) -> list[Unit]:
        if self.params.chunk_mode == "none":
            stripped = text.strip()
            if not stripped:
                return []
            start = len(text) - len(text.lstrip())
            return [Unit(text=normalize_space(text), start=start, end=start + len(stripped), first=True)]
        cfg = self._service.config.text
        return split_text(text, target_chars=cfg.target_chars, max_chars=cfg.max_chars,
                          first_chars=cfg.first_segment_min_chars)

    async def _split_off_loop(self, text: str) -> None:
        try:
            units = await asyncio.to_thread(self._split, text)
        except TTSError as e:
            self._segments.put_nowait(e)
            return
        except Exception as e:  # a text-package bug: an internal error for this request, the server stays up
            log.exception("split_text failed")
            self._segments.put_nowait(TTSError(f"text split failed: {type(e).__name__}: {e}"))
            return
        self._speak_units(units)

    def _speak_units(self, units: list[Unit]) -> None:
        if self.params.duration is not None and units:
            lengths = [max(1, text_length(u.text)) if speakable(u.text) else 0 for u in units]
            total = max(1, sum(lengths))
            self._duration_share = {i: self.params.duration * n / total for i, n in enumerate(lengths)}
        self._put_units(units)
        self._ended = True
        self._units.put_nowait(_END)

    def feed(self, chunk: str) -> None:
        if self._buffer is None or self._ended:
            return
        self._note_text(len(chunk))
        self._put_units(self._buffer.feed(chunk))
        self._speculate()

    def flush(self) -> None:
        if self._buffer is not None and not self._ended:
            self._put_units(self._buffer.flush())

    def end(self) -> None:
        if self._ended:
            return
        if self._buffer is not None:
            self._put_units(self._buffer.end())
        self._ended = True
        self._units.put_nowait(_END)

    @property
    def ended(self) -> bool:
        return self._ended

    def _note_text(self, n: int) -> None:
        if n and self._t_first_text is None:
            self._t_first_text = time.perf_counter()
        self.num_chars += n

    def _put_units(self, units: list[Unit]) -> None:
        for u in units:
            if u.text.strip():
                if not self._first_unit_out:
                    self._first_unit_out = True
                    self._settle_speculation(u)
                self._units.put_nowait(u)

    # -- speculative first unit ------------------------------------------------------------------------------

    def _speculate(self) -> None:
        """After text arrived without emitting the first unit: start, keep or drop the speculative request."""
        if self._first_unit_out or self._cancelled or self._buffer is None:
            return
        candidate = self._buffer.peek_first_unit()
        spec = self._spec
        if spec is not None:
            if candidate == spec.unit:
                return  # e.g. trailing whitespace arrived: still undecided
            self._drop_speculation(miss=True)  # the text went on past it: that unit will never be emitted
        if candidate is None or not speakable(candidate.text):
            return
        self._num_speculations += 1
        # Its own request id: an aborted speculation may still be in an engine when the real segment 0 arrives.
        request = self._segment_request(0, candidate, request_id=f"{self.id}-0s{self._num_speculations}")
        spec = self._spec = _Segment(0, candidate, request, asyncio.Queue())
        self._first_due = time.monotonic() + FIRST_AUDIO_S
        spec.task = asyncio.create_task(self._generate(spec), name=f"synth-{self.id}-spec{self._num_speculations}")
        self._service.metrics.speculations_total.inc()

    def _settle_speculation(self, first: Unit) -> None:
        """The buffer emitted the turn's first unit: adopt the speculation if it is that very unit, else drop it."""
        spec = self._spec
        if spec is None:
            return
        if spec.unit == first:
            self._spec, self._adopted = None, spec
            self._service.metrics.speculation_hits_total.inc()
        else:
            self._drop_speculation(miss=True)

    def _drop_speculation(self, *, miss: bool) -> None:
        spec, self._spec = self._spec, None
        if spec is None:
            return
        if spec.task is not None:
            spec.task.cancel()  # _generate's finally aborts the engine request
            self._dropped.append(spec.task)
        if miss:
            self._service.metrics.speculation_misses_total.inc()

    def _confirm_by_audio(self, seg: _Segment) -> None:
        """The speculation has audio and no text contradicted it yet: cut the turn there (flush emits exactly
        that unit) so the audio goes out now instead of after the next word. Not after a number ("went up by
        3."): "5" is as likely next as a new sentence, and speaking "3." alone cannot be taken back; that guess
        waits for the next text (its engine work is done early all the same)."""
        if (seg is self._spec and self._buffer is not None and not self._ended and not self._cancelled
                and not number_may_go_on(seg.unit.text)):
            self._put_units(self._buffer.flush())

    # -- audio out -----------------------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[Event]:
        """Ordered events until the text has ended and all its audio is out (or cancel). Engine errors are
        raised here (errors.TTSError)."""
        if self._producer is None:
            self._producer = asyncio.create_task(self._produce(), name=f"synth-{self.id}-producer")
        while True:
            seg = await self._segments.get()
            if seg is None or isinstance(seg, _Cancelled) or self._cancelled:
                break
            if isinstance(seg, TTSError):
                raise seg
            start = SegmentStarted(seg.index, seg.unit.text, seg.unit.start, seg.unit.end, self._samples_out)
            if self._service.wants_events(self):
                yield start
            queue_ms = gen_ms = 0.0
            while True:
                item = await seg.chunks.get()
                if isinstance(item, _Cancelled) or self._cancelled:
                    return
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    break
                if seg.index == 0 and self._first_queue_ms is None:
                    self._first_queue_ms = item.queue_ms
                queue_ms += item.queue_ms
                gen_ms += item.gen_ms
                self._batch_sizes.append(item.batch_size)
                for frame in self._framer.push(to_pcm16(self._pacer.push(item.samples))):
                    yield self._emit(frame, seg.index)
                if item.last:
                    break
            for frame in self._framer.flush():
                yield self._emit(frame, seg.index)
            self._live.pop(seg.index, None)
            self._lookahead.release()
            self._num_segments += 1
            if self._service.wants_events(self):
                yield SegmentEnded(seg.index, self._samples_out, queue_ms, gen_ms)
        if self._cancelled:
            return
        tail = to_pcm16(self._pacer.finish())
        for frame in self._framer.push(tail) + self._framer.flush():
            yield self._emit(frame, max(0, self._num_segments - 1))
        self._t_end = time.perf_counter()

    def _emit(self, pcm: bytes, index: int) -> AudioFrame:
        if self._t_first_audio is None:
            self._t_first_audio = time.perf_counter()
        self._samples_out += len(pcm) // 2
        return AudioFrame(pcm, index)

    async def _produce(self) -> None:
        """Units → segments, in order, as the lookahead allows: segment k+1 generates while k is sent. On an
        engine that does not batch, a segment starts only once the one before it has audio (so it never competes
        with the response's first audio); a batching engine takes it at once (its scheduler ranks first segments
        first), so a reply's later sentences never queue behind its first one under load."""
        previous: _Segment | None = None
        for index in itertools.count():
            unit = await self._units.get()
            if unit is None:
                self._segments.put_nowait(_END)
                return
            if previous is not None and not self._engine.capabilities.batched:
                await previous.has_audio.wait()
            await self._lookahead.acquire()
            if self._cancelled:
                return
            if index == 0 and self._adopted is not None:
                # the speculative request, already running (maybe done): no second request. _settle_speculation
                # adopted it for the very unit the buffer emitted first, which is this one.
                seg, self._adopted = self._adopted, None
            else:
                if index == 0:
                    self._first_due = time.monotonic() + FIRST_AUDIO_S
                seg = _Segment(index, unit, self._segment_request(index, unit), asyncio.Queue())
                if speakable(unit.text):
                    seg.task = asyncio.create_task(self._generate(seg), name=f"synth-{self.id}-seg{index}")
                else:  # only punctuation/emoji: no engine work, but the segment (and its offsets) stays in the stream
                    seg.chunks.put_nowait(None)
                    seg.has_audio.set()
            if self._streaming:  # only stream deadlines read it (a long HTTP text would estimate every unit)
                self._planned_audio_s += self._estimate_audio_s(index, unit)
            self._live[index] = seg
            self._segments.put_nowait(seg)
            previous = seg

    def _estimate_audio_s(self, index: int, unit: Unit) -> float:
        return estimate_audio_s(unit.text, engine=self._engine.capabilities.engine, speed=self.params.speed,
                                prompt=self._voice.prompt, duration_s=self._duration_share.get(index))

    def _segment_request(self, index: int, unit: Unit, *, request_id: str | None = None) -> SegmentRequest:
        p = self.params
        priority: Priority = PRIORITY_FIRST if index == 0 else (PRIORITY_STREAM if self._streaming else PRIORITY_BULK)
        deadline = None
        if index > 0 and self._streaming:
            # the first audio's time on the engines' clock (time.monotonic); stats keep perf_counter
            first_audio_at = None if self._t_first_audio is None else \
                time.monotonic() - (time.perf_counter() - self._t_first_audio)
            deadline = playback_deadline(first_audio_at, self._first_due, self._samples_out / self.sample_rate,
                                         self._planned_audio_s)
        kwargs: dict[str, Any] = {}
        if p.num_step is not None:
            kwargs["num_step"] = p.num_step
        if p.guidance_scale is not None:
            kwargs["guidance_scale"] = p.guidance_scale
        if p.temperature is not None:
            kwargs["temperature"] = p.temperature
        return SegmentRequest(
            request_id=request_id or f"{self.id}-{index}", text=unit.text, voice=self._voice, language=p.language,
            speed=p.speed, duration_s=self._duration_share.get(index), top_p=p.top_p, seed=p.seed, priority=priority,
            deadline_s=deadline, **kwargs)

    async def _generate(self, seg: _Segment) -> None:
        engine = self._engine
        try:
            async with contextlib.aclosing(engine.synthesize(seg.request)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    seg.chunks.put_nowait(chunk)
                    if not seg.has_audio.is_set():
                        seg.has_audio.set()
                        self._confirm_by_audio(seg)
            seg.chunks.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except TTSError as e:
            seg.chunks.put_nowait(e)
        except Exception as e:  # an engine bug: report it as an internal error, keep the server up
            log.exception("engine %s failed on segment %s", engine.capabilities.engine, seg.request.request_id)
            seg.chunks.put_nowait(TTSError(f"engine error: {type(e).__name__}: {e}"))
        finally:
            seg.has_audio.set()
            # Every engine request is aborted here: a no-op when it finished, a stop when it did not.
            await engine.abort(seg.request.request_id)

    # -- cancellation and teardown ---------------------------------------------------------------------------

    def cancel(self, stage: str = "client") -> None:
        """Stop now: queued and in-flight segments are aborted, unsent audio is dropped."""
        if self._cancelled or self._t_end is not None:
            return
        self._cancelled = True
        self.cancel_stage = stage
        self._abort_all()
        self._segments.put_nowait(_CANCELLED)

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def _abort_all(self) -> None:
        if self._producer is not None:
            self._producer.cancel()
        if self._splitter is not None:
            self._splitter.cancel()
        self._drop_speculation(miss=False)
        adopted, self._adopted = self._adopted, None
        for seg in [*self._live.values(), *([adopted] if adopted is not None else [])]:
            if seg.task is not None:
                seg.task.cancel()
            seg.chunks.put_nowait(_CANCELLED)
        self._live.clear()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        segs = (*self._live.values(), self._spec, self._adopted)
        tasks = [s.task for s in segs if s is not None and s.task is not None]
        tasks += [t for t in (self._producer, self._splitter) if t is not None] + self._dropped
        self._abort_all()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if isinstance(exc, TTSError):
            self.error = exc
        elif exc is not None and not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            self.error = TTSError(str(exc))
        self._service.record(self, disconnected=exc is not None and self.error is None)

    # -- stats ---------------------------------------------------------------------------------------------

    @property
    def num_segments(self) -> int:
        return self._num_segments

    @property
    def samples_out(self) -> int:
        return self._samples_out

    def stats(self) -> dict[str, Any]:
        """The stats envelope (PROTOCOL.md §5)."""
        t_end = self._t_end or time.perf_counter()
        t_total_ms = (t_end - self.t_start) * 1e3
        t_text = self._t_first_text or self.t_start
        ttfa_ms = (self._t_first_audio - t_text) * 1e3 if self._t_first_audio is not None else None
        audio_ms = self._samples_out / self.sample_rate * 1e3
        caps = self._engine.capabilities
        rss_end = rss_bytes()
        return {
            "t_total_ms": round(t_total_ms, 2),
            "ttfa_ms": round(ttfa_ms, 2) if ttfa_ms is not None else None,
            "queue_ms": round(self._first_queue_ms or 0.0, 2),
            "audio_duration_ms": round(audio_ms, 2),
            "rtf": round(t_total_ms / audio_ms, 5) if audio_ms > 0 else None,
            "segments": self._num_segments,
            "batch_size_mean": round(float(np.mean(self._batch_sizes)), 3) if self._batch_sizes else None,
            "engine": caps.engine,
            "model": caps.model,
            "device": caps.device,
            "sample_rate": self.sample_rate,
            "mem": {
                "rss_start_bytes": self._rss_start,
                "rss_end_bytes": rss_end,
                # the kernel updates the high-water mark lazily, so it can trail the current RSS slightly
                "rss_peak_bytes": max(peak_rss_bytes(), rss_end, self._rss_start),
                "vram_start_bytes": None,
                "vram_end_bytes": None,
                "vram_peak_bytes": None,
                "vram_measured": False,
            },
        }


class Service:
    """Builds Synthesis objects for the API layer and keeps the request metrics."""

    def __init__(self, config: Config, pool: EnginePool, metrics: Metrics):
        self.config = config
        self.pool = pool
        self.metrics = metrics
        for name, engine in pool.engines.items():
            # Engines with worker processes feed their own series (per-worker queue depth, step times, CUDA
            # graph hits/misses) from worker reports; the others get one queue_depth series here.
            attach = getattr(engine, "attach_metrics", None)
            if attach is not None:
                attach(metrics)
            metrics.watch_pool(name, (lambda e=engine: float(e.load().pool_size)),  # type: ignore[misc]
                               (lambda e=engine: float(e.load().idle)),  # type: ignore[misc]
                               None if attach is not None else
                               (lambda e=engine: float(e.load().queued_segments)))  # type: ignore[misc]

    def engine_for(self, params: Params) -> Engine:
        return self.pool.route(params.model, params.voice_mode)

    def open(self, request: SpeechRequest, *, endpoint: str, incremental: bool = False, streaming: bool = True,
             prompt: VoicePrompt | None = None, engine: Engine | None = None) -> Synthesis:
        """Validate a request against its engine and start a Synthesis (nothing is generated until the
        caller iterates events()). Raises errors.TTSError before any audio for every refusal."""
        params = request.params
        engine = engine or self.engine_for(params)
        # params.sample_rate is the wire rate: the api layer resamples (audio_out), the engine rate stays.
        if params.voice_mode == "clone" and prompt is None:
            raise NotFound(f"voice_id {params.voice_id!r} not found (no saved voices yet: upload the reference "
                           "audio to POST /v1/audio/clone)", field="voice_id")
        synth = Synthesis(self, engine, params, endpoint=endpoint, incremental=incremental, streaming=streaming,
                          prompt=prompt)
        check = getattr(engine, "check", None)
        if check is not None:  # engines may refuse a request before any work is queued
            check(synth._segment_request(0, Unit(text=request.text or ".", start=0, end=0, first=True)))
        return synth

    async def encode_voice(self, engine: Engine, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        return await engine.encode_voice(audio, sample_rate, ref_text)

    def wants_events(self, synth: Synthesis) -> bool:
        return synth.params.events

    def record(self, synth: Synthesis, *, disconnected: bool = False) -> None:
        """Metrics for one finished Synthesis (called once, from its __aexit__)."""
        if synth._recorded:
            return
        synth._recorded = True
        m = self.metrics
        if synth.error is not None:
            status = synth.error.code  # errors_total is counted where the error is reported (api)
        elif synth.cancelled:
            status = "cancelled"
            m.cancellations_total.labels(stage=synth.cancel_stage or "client").inc()
        elif disconnected:
            status = "disconnected"
            m.cancellations_total.labels(stage="disconnect").inc()
        else:
            status = "ok"
        m.requests_total.labels(endpoint=synth.endpoint, voice_mode=synth.params.voice_mode, status=status).inc()
        st = synth.stats()
        m.request_duration_seconds.labels(endpoint=synth.endpoint).observe(st["t_total_ms"] / 1e3)
        m.input_chars_total.labels(endpoint=synth.endpoint).inc(synth.num_chars)
        if st["ttfa_ms"] is not None:
            m.ttfa_seconds.labels(endpoint=synth.endpoint).observe(st["ttfa_ms"] / 1e3)
        if status == "ok" and st["rtf"] is not None:
            m.rtf.observe(st["rtf"])
        m.audio_seconds_total.labels(engine=st["engine"]).inc(st["audio_duration_ms"] / 1e3)
        for b in synth._batch_sizes:
            m.batch_size.observe(b)
