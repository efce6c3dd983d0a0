"""Audio out: a response's segments, in order, become paced (edge silence trimmed, gaps set) and framed audio,
as the events a Synthesis yields; it counts what was sent in the response's Stats. Imports audio, config,
errors and this package's events, production and stats; never torch, never an engine.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable, Iterator

import numpy as np

from realtime_tts.audio import Framer, Pacer, to_pcm16
from realtime_tts.config import PacingConfig
from realtime_tts.errors import TTSError
from realtime_tts.service.events import AudioFrame, Event, SegmentEnded, SegmentStarted
from realtime_tts.service.production import Cancelled, Production
from realtime_tts.service.stats import Stats

WHOLE_FRAME_MS = 3_600_000  # whole_segments(): longer than any segment, so a frame ends only at a segment's end


class Output:
    """One response's pacer and framer, and the loop that sends its segments."""

    def __init__(self, sample_rate: int, cfg: PacingConfig, stats: Stats):
        self._pacer = Pacer(sample_rate, lead_in_ms=cfg.lead_in_ms, gap_ms=cfg.gap_ms, tail_ms=cfg.tail_ms,
                            silence_db=cfg.silence_db)
        self._framer = Framer(sample_rate, first_frame_ms=cfg.first_frame_ms, frame_ms=cfg.frame_ms)
        self._stats = stats
        self._sample_rate = sample_rate
        self._production: Production | None = None
        # The segment.start not sent yet: _emit sends it with the segment's first frame, so a segment the engine
        # refuses or fails before any audio (overloaded at its first step) is never announced.
        self._unannounced: SegmentStarted | None = None

    def whole_segments(self) -> None:
        """Frames of a whole segment each (its flush), for a buffered body that nobody plays as it comes: no cutting
        into 120 ms frames that are joined again (~17 frames a short sentence, each through the event loop)."""
        self._framer = Framer(self._sample_rate, first_frame_ms=WHOLE_FRAME_MS, frame_ms=WHOLE_FRAME_MS)

    async def events(self, production: Production, wants_events: Callable[[], bool]) -> AsyncGenerator[Event, None]:
        """Ordered events until production ends and all its audio is out (or cancel). Engine errors are raised
        here (errors.TTSError). Segment events only when wants_events()."""
        stats = self._stats
        self._production = production
        while True:
            seg = await production.segments.get()
            if seg is None or isinstance(seg, Cancelled) or production.cancelled:
                break
            if isinstance(seg, TTSError):
                raise seg
            if wants_events():
                self._unannounced = SegmentStarted(seg.index, seg.unit.text, seg.unit.start, seg.unit.end,
                                                   stats.samples_out)
            queue_ms = gen_ms = 0.0
            num_steps = 0
            while True:
                item = await seg.chunks.get()
                if isinstance(item, Cancelled) or production.cancelled:
                    return
                if isinstance(item, BaseException):
                    raise item
                if item is None:
                    break
                if seg.index == 0 and stats.first_queue_ms is None:
                    stats.first_queue_ms = item.queue_ms
                queue_ms += item.queue_ms
                gen_ms += item.gen_ms
                stats.batch_sizes.append(item.batch_size)
                num_steps = max(num_steps, item.num_steps)
                for frame in self._push(item.samples, seg.index):
                    yield frame
                if production.cancelled:
                    return
                if item.last:
                    break
            for frame in self._emit(self._framer.flush(), seg.index):
                yield frame
            if production.cancelled:
                return
            production.live.pop(seg.index, None)
            production.lookahead.release()
            stats.num_segments += 1
            if num_steps:
                stats.num_steps.append(num_steps)
            stats.text_done = max(stats.text_done, seg.unit.end)
            if self._unannounced is not None:  # a segment without audio: announced at its end
                yield self._unannounced
                self._unannounced = None
            if wants_events():
                yield SegmentEnded(seg.index, stats.samples_out, queue_ms, gen_ms, num_steps or None)
        if production.cancelled:
            return
        tail = to_pcm16(self._pacer.finish())
        for frame in self._emit(self._framer.push(tail) + self._framer.flush(), max(0, stats.num_segments - 1)):
            yield frame
        stats.t_end = time.perf_counter()

    def _push(self, samples: np.ndarray, index: int) -> Iterator[Event]:
        return self._emit(self._framer.push(to_pcm16(self._pacer.push(samples))), index)

    def _emit(self, frames: list[bytes], index: int) -> Iterator[Event]:
        """Frames as they are sent, the first after its segment's pending segment.start: counted one by one as the
        consumer takes each (deadlines read the count).
        None after a cancel: one engine chunk can be seconds of audio (a whole sentence on the CPU voice), so
        the cancel is checked before every frame, not once per chunk."""
        for pcm in frames:
            if self._production is not None and self._production.cancelled:
                return
            if self._unannounced is not None:
                yield self._unannounced
                self._unannounced = None
            self._stats.note_audio(len(pcm) // 2)
            yield AudioFrame(pcm, index)
