"""CpuEngine: the English voice shipped inside the `hibari-tts` wheel, run in a bounded pool of threads.

One Hibari instance (ONNX session + G2P) per thread; jobs are taken in priority order (first audio of a turn
first, then streams about to run dry, then bulk); nothing runs on the event loop. Only the in-package voice
"heart" is used, so nothing is ever downloaded. Must not import torch or the OmniVoice engine.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from realtime_tts.config import Config
from realtime_tts.engine.base import (
    PRIORITY_FIRST,
    PRIORITY_STREAM,
    AudioChunk,
    Capabilities,
    EngineHealth,
    EngineLoad,
    SegmentRequest,
    VoicePrompt,
    WorkerHealth,
)
from realtime_tts.errors import BadRequest, EngineUnavailable, Overloaded, UnsupportedVoiceMode

SAMPLE_RATE = 24_000
VOICE = "heart"  # the only voice inside the wheel (American English, female)
MODEL_ID = "hibari-heart"
# Every OpenAI voice name and "auto"/"base" map to the one built-in voice (documented in docs/protocol.md).
OPENAI_PRESETS = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
PRESETS = (VOICE, *OPENAI_PRESETS)
ENGLISH = ("en", "en-us", "en_us", "en-gb", "en_gb", "english", "auto")
GPU_ENGINE = "omnivoice"
# Admission limit: jobs waiting for a thread, per thread (beyond it: Overloaded, retry later).
MAX_QUEUED_PER_WORKER = 64


@dataclass(order=True)
class _Job:
    key: tuple[int, float, int]  # (priority, deadline, arrival): the queue's order
    fn: Callable[[Any], Any] | None = field(compare=False)  # None: the thread stops
    future: asyncio.Future[Any] | None = field(compare=False, default=None)
    loop: asyncio.AbstractEventLoop | None = field(compare=False, default=None)


class _VoiceThreads:
    """n threads, each owning one Hibari instance, serving jobs from one priority queue."""

    def __init__(self, num_threads: int, threads_per_voice: int):
        self.num_threads = num_threads
        self._threads_per_voice = threads_per_voice
        self._jobs: queue.PriorityQueue[_Job] = queue.PriorityQueue()
        self._arrival = itertools.count()
        self._lock = threading.Lock()
        self.busy = 0
        self.queued = 0
        self._threads: list[threading.Thread] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ready = [loop.create_future() for _ in range(self.num_threads)]
        for i, fut in enumerate(ready):
            t = threading.Thread(target=self._run, args=(loop, fut), name=f"cpu-voice-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        await asyncio.gather(*ready)

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(_Job((1 << 30, math.inf, next(self._arrival)), None))  # sorts after every job

    def submit(self, fn: Callable[[Any], Any], priority: int, deadline: float | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            self.queued += 1
        key = (priority, deadline if deadline is not None else math.inf, next(self._arrival))
        self._jobs.put(_Job(key, fn, fut, loop))
        return fut

    def _run(self, loop: asyncio.AbstractEventLoop, ready: asyncio.Future[None]) -> None:
        try:
            from hibari import Hibari  # imported here: only voice threads need onnxruntime

            tts = Hibari(voice=VOICE, threads=self._threads_per_voice)
            tts("Warm up.", seed=0)  # loads the G2P tables and touches every ONNX kernel once
        except Exception as e:  # noqa: BLE001 — the thread's edge: reported to start(), which raises
            loop.call_soon_threadsafe(_settle, ready, None, e)
            return
        loop.call_soon_threadsafe(_settle, ready, None, None)
        while True:
            job = self._jobs.get()
            if job.fn is None or job.future is None or job.loop is None:
                return
            with self._lock:
                self.queued -= 1
            if job.future.cancelled():  # the request went away while queued
                continue
            with self._lock:
                self.busy += 1
            try:
                result, error = job.fn(tts), None
            except Exception as e:  # noqa: BLE001 — the worker-loop edge: re-raised in the awaiting coroutine
                result, error = None, e
            finally:
                with self._lock:
                    self.busy -= 1
            job.loop.call_soon_threadsafe(_settle, job.future, result, error)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class CpuEngine:
    """Engine protocol over hibari. Each segment: G2P + first sentence in one job (short time to first
    audio), then one job per further sentence, so an abort takes effect between sentences."""

    def __init__(self, config: Config):
        num = config.cpu.cpu_workers or os.cpu_count() or 1
        self._pool = _VoiceThreads(num, config.cpu.cpu_threads_per_worker)
        self._status: str = "loading"
        self._detail = ""
        self._active: set[str] = set()
        self._aborted: set[str] = set()
        self._capabilities = Capabilities(
            engine="cpu", model=MODEL_ID, sample_rate=SAMPLE_RATE, voice_modes=frozenset({"auto"}),
            languages=("en",), presets=PRESETS, deterministic=True, device="cpu")

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def start(self) -> None:
        try:
            await self._pool.start()
        except Exception as e:
            self._status, self._detail = "error", f"CPU voice failed to load: {e}"
            raise EngineUnavailable(self._detail) from e
        self._status = "ok"

    async def stop(self) -> None:
        self._status, self._detail = "error", "stopped"
        self._pool.stop()

    def check(self, request: SegmentRequest) -> None:
        """Refuse what this voice cannot do, before any work is queued."""
        mode = request.voice.mode
        if mode != "auto":
            raise UnsupportedVoiceMode(
                f"voice mode {mode!r} is not supported by the CPU voice; it needs the {GPU_ENGINE!r} engine "
                f"(start the server with --model DIR)", field="voice")
        preset = request.voice.preset
        if preset is not None and preset.lower() not in PRESETS:
            raise BadRequest(f"voice {preset!r} is not a preset of the CPU voice; use auto, base or one of "
                             f"{', '.join(PRESETS)}", field="voice")
        if request.language is not None and request.language.lower() not in ENGLISH:
            raise BadRequest(f"language {request.language!r}: the CPU voice speaks English only (en); other "
                             f"languages need the {GPU_ENGINE!r} engine", field="language")

    async def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        self.check(request)
        if self._status != "ok":
            raise EngineUnavailable(f"CPU voice is not ready ({self._status})")
        if self._pool.queued >= MAX_QUEUED_PER_WORKER * self._pool.num_threads:
            raise Overloaded("CPU voice queue is full", retry_after_ms=500)
        rid = request.request_id
        t_submit = time.perf_counter()
        self._active.add(rid)
        try:
            phonemes: list[str] | None = None
            index = 0
            while phonemes is None or index < len(phonemes):
                if rid in self._aborted:
                    return
                # Only the segment's first sentence is "first audio"; the rest can wait behind other turns'.
                priority = request.priority if index == 0 else max(request.priority, PRIORITY_STREAM)
                deadline = request.deadline_s if priority != PRIORITY_FIRST else None
                job = self._pool.submit(_SentenceJob(request, phonemes, index), priority, deadline)
                t_start, t_end, phonemes, samples = await job
                index += 1
                yield AudioChunk(samples=samples, last=index >= len(phonemes),
                                 queue_ms=(t_start - t_submit) * 1e3 if index == 1 else 0.0,
                                 gen_ms=(t_end - t_start) * 1e3, batch_size=1)
        finally:
            self._active.discard(rid)
            self._aborted.discard(rid)

    async def abort(self, request_id: str) -> None:
        if request_id in self._active:
            self._aborted.add(request_id)

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        raise UnsupportedVoiceMode(f"voice cloning is not supported by the CPU voice; it needs the {GPU_ENGINE!r} "
                                   "engine (start the server with --model DIR)", field="voice")

    def health(self) -> EngineHealth:
        status: Literal["ok", "loading", "error"] = (
            "ok" if self._status == "ok" else "loading" if self._status == "loading" else "error")
        workers = tuple(WorkerHealth(worker_id=i, status=status, device="cpu") for i in range(self._pool.num_threads))
        return EngineHealth(status=status, detail=self._detail, workers=workers)

    def load(self) -> EngineLoad:
        n = self._pool.num_threads
        busy = min(self._pool.busy, n)
        return EngineLoad(pool_size=n, idle=n - busy, queued_segments=max(0, self._pool.queued),
                          in_flight_segments=busy)


@dataclass(frozen=True, slots=True)
class _SentenceJob:
    """Runs on a voice thread: G2P when not done yet, then one sentence → float32 [num_samples]."""

    request: SegmentRequest
    phonemes: list[str] | None
    index: int

    def __call__(self, tts: Any) -> tuple[float, float, list[str], np.ndarray]:
        t_start = time.perf_counter()
        phonemes = self.phonemes if self.phonemes is not None else list(tts.phonemize(self.request.text))
        if not phonemes:
            return t_start, time.perf_counter(), [""], np.zeros(0, np.float32)
        # A fresh generator per sentence: a sentence's audio depends only on its text and the seed, so how
        # the text was cut into segments does not change the sound.
        rng = np.random.default_rng(self.request.seed)
        samples = tts.from_ids(tts.ids(phonemes[self.index]), self.request.speed, rng)  # [num_samples] float32
        return t_start, time.perf_counter(), phonemes, np.asarray(samples, dtype=np.float32)
