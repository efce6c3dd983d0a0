"""Production: a response's units become segments against its engine, in order, as the lookahead allows; each
segment's engine request runs in its own task and fills the segment's chunk queue; abort stops them all.
Imports engine.base (never a concrete engine), text, errors and this package's planning; never torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from realtime_tts.engine.base import AudioChunk, Engine, SegmentRequest
from realtime_tts.errors import TTSError
from realtime_tts.service.planning import Plan, speakable
from realtime_tts.text import Unit

log = logging.getLogger(__name__)

# Segments generated ahead of the one being sent (pipelining), per chunk_mode. Public for
# bench/omnivoice_sched_sim.py, which replays this service's timing.
LOOKAHEAD = {"concurrent": 2, "sequential": 1, "none": 1}


class Cancelled:
    """Sentinel pushed into queues to wake the sender when a synthesis is cancelled."""


CANCELLED = Cancelled()
END = None


@dataclass(slots=True)
class Segment:
    index: int
    unit: Unit
    request: SegmentRequest
    chunks: asyncio.Queue[AudioChunk | BaseException | Cancelled | None]
    task: asyncio.Task[None] | None = None
    has_audio: asyncio.Event = field(default_factory=asyncio.Event)  # first chunk arrived (or it ended)


class Production:
    """Units in (`units`, None ends them), segments out (`segments`: Segment, a TTSError, CANCELLED, or None at
    the end). on_first_audio(seg) runs when a segment's first chunk arrives. `adopted` is a running request
    (the confirmed speculative first unit) that becomes segment 0 instead of a new one."""

    def __init__(self, synth_id: str, engine: Engine, plan: Plan, *, lookahead: int,
                 on_first_audio: Callable[[Segment], None]):
        self._id = synth_id
        self._engine = engine
        self._plan = plan
        self._on_first_audio = on_first_audio
        self.units: asyncio.Queue[Unit | None] = asyncio.Queue()
        self.segments: asyncio.Queue[Segment | TTSError | Cancelled | None] = asyncio.Queue()
        self.live: dict[int, Segment] = {}
        self.lookahead = asyncio.Semaphore(lookahead)
        self.task: asyncio.Task[None] | None = None
        self.adopted: Segment | None = None
        self.cancelled = False

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._produce(), name=f"synth-{self._id}-producer")

    def launch(self, index: int, unit: Unit, request: SegmentRequest, *, name: str) -> Segment:
        """A segment whose engine request starts now, in a task of its own."""
        seg = Segment(index, unit, request, asyncio.Queue())
        seg.task = asyncio.create_task(self._generate(seg), name=name)
        return seg

    async def _produce(self) -> None:
        """Units → segments, in order, as the lookahead allows: segment k+1 generates while k is sent. On an
        engine that does not batch, a segment starts only once the one before it has audio (so it never competes
        with the response's first audio); a batching engine takes it at once (its scheduler ranks first segments
        first), so a reply's later sentences never queue behind its first one under load."""
        previous: Segment | None = None
        for index in itertools.count():
            unit = await self.units.get()
            if unit is None:
                self.segments.put_nowait(END)
                return
            if previous is not None and not self._engine.capabilities.batched:
                await previous.has_audio.wait()
            await self.lookahead.acquire()
            if self.cancelled:
                return
            if index == 0 and self.adopted is not None:
                # the speculative request, already running (maybe done): no second request. The speculation
                # adopted it for the very unit the buffer emitted first, which is this one.
                seg, self.adopted = self.adopted, None
            else:
                if index == 0:
                    self._plan.expect_first_audio()
                request = self._plan.request(index, unit)
                if speakable(unit.text):
                    seg = self.launch(index, unit, request, name=f"synth-{self._id}-seg{index}")
                else:  # only punctuation/emoji: no engine work, but the segment (and its offsets) stays in the stream
                    if self._plan.continuity is not None:  # never sent: it cannot be anyone's voice prompt
                        self._plan.continuity.finished(request.request_id)
                    seg = Segment(index, unit, request, asyncio.Queue())
                    seg.chunks.put_nowait(None)
                    seg.has_audio.set()
            self._plan.add(index, unit)
            self.live[index] = seg
            self.segments.put_nowait(seg)
            previous = seg

    async def _generate(self, seg: Segment) -> None:
        engine = self._engine
        try:
            async with contextlib.aclosing(engine.synthesize(seg.request)) as chunks:  # type: ignore[type-var]
                async for chunk in chunks:
                    if chunk.prompt is not None and self._plan.continuity is not None:
                        self._plan.continuity.learn(seg.request.request_id, chunk.prompt)
                    seg.chunks.put_nowait(chunk)
                    if not seg.has_audio.is_set():
                        seg.has_audio.set()
                        self._on_first_audio(seg)
            seg.chunks.put_nowait(None)
        except asyncio.CancelledError:
            raise
        except TTSError as e:
            seg.chunks.put_nowait(e)
        except Exception as e:  # an engine bug: report it as an internal error, keep the server up
            log.exception("engine %s failed on segment %s", engine.capabilities.engine, seg.request.request_id)
            seg.chunks.put_nowait(TTSError(f"engine error: {type(e).__name__}: {e}"))
        finally:
            if self._plan.continuity is not None:
                self._plan.continuity.finished(seg.request.request_id)
            seg.has_audio.set()
            # Every engine request is aborted here: a no-op when it finished, a stop when it did not.
            await engine.abort(seg.request.request_id)

    def tasks(self) -> list[asyncio.Task[None]]:
        """Every task still to be awaited on exit: live and adopted segments' requests, then the producer."""
        segs = (*self.live.values(), self.adopted)
        return [s.task for s in segs if s is not None and s.task is not None] + \
            ([self.task] if self.task is not None else [])

    def abort_segments(self) -> None:
        """Stop every adopted and live segment's request and wake whoever waits on its chunks."""
        adopted, self.adopted = self.adopted, None
        for seg in [*self.live.values(), *([adopted] if adopted is not None else [])]:
            if seg.task is not None:
                seg.task.cancel()
            seg.chunks.put_nowait(CANCELLED)
        self.live.clear()
