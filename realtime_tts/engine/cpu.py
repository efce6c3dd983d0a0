"""CpuEngine: the English voice shipped inside the `hibari-tts` wheel, run in a bounded thread pool.

One Hibari instance (ONNX session + G2P) per thread; nothing runs on the event loop. Only the in-package
voice "heart" is used, so nothing is ever downloaded. Must not import torch or the OmniVoice engine.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np

from realtime_tts.config import Config
from realtime_tts.engine.base import (
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
# Admission limit: segments waiting for a thread, per thread (beyond it: Overloaded, retry later).
MAX_QUEUED_PER_WORKER = 64


class CpuEngine:
    """Engine protocol over hibari. Each segment: G2P + first sentence in one thread job (short time to first
    audio), then one job per further sentence, so an abort takes effect between sentences."""

    def __init__(self, config: Config):
        self._num_workers = config.cpu.cpu_workers or os.cpu_count() or 1
        self._threads_per_worker = config.cpu.cpu_threads_per_worker
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._status: str = "loading"
        self._detail = ""
        self._active: set[str] = set()
        self._aborted: set[str] = set()
        self._queued = 0
        self._busy = 0
        self._busy_lock = threading.Lock()  # _busy is changed from pool threads
        self._capabilities = Capabilities(
            engine="cpu", model=MODEL_ID, sample_rate=SAMPLE_RATE, voice_modes=frozenset({"auto"}),
            languages=("en",), presets=PRESETS, deterministic=True, device="cpu")

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(self._num_workers, thread_name_prefix="cpu-voice",
                                            initializer=self._load_thread)
        # One warm-up per thread: the barrier keeps each job on its own thread, so every thread has loaded
        # its model and G2P before the first request arrives.
        barrier = threading.Barrier(self._num_workers)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.gather(*(loop.run_in_executor(self._executor, self._warm_up, barrier)
                                   for _ in range(self._num_workers)))
        except Exception as e:
            self._status, self._detail = "error", f"CPU voice failed to load: {e}"
            raise EngineUnavailable(self._detail) from e
        self._status = "ok"

    async def stop(self) -> None:
        self._status = "error"
        self._detail = "stopped"
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    def _load_thread(self) -> None:
        from hibari import Hibari  # imported here: only engine threads need onnxruntime

        self._local.tts = Hibari(voice=VOICE, threads=self._threads_per_worker)

    def _warm_up(self, barrier: threading.Barrier) -> None:
        barrier.wait(timeout=120)
        self._local.tts("Warm up.", seed=0)

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
        if self._executor is None or self._status != "ok":
            raise EngineUnavailable(f"CPU voice is not ready ({self._status})")
        if self._queued >= MAX_QUEUED_PER_WORKER * self._num_workers:
            raise Overloaded("CPU voice queue is full", retry_after_ms=500)
        loop = asyncio.get_running_loop()
        executor = self._executor
        rid = request.request_id
        t_submit = time.perf_counter()
        self._active.add(rid)
        try:
            phonemes: list[str] | None = None
            index = 0
            while phonemes is None or index < len(phonemes):
                if rid in self._aborted:
                    return
                self._queued += 1
                job = loop.run_in_executor(executor, self._synth_job, request, phonemes, index)
                try:
                    t_start, t_end, phonemes_out, samples = await job
                finally:
                    self._queued -= 1
                phonemes = phonemes_out
                index += 1
                yield AudioChunk(samples=samples, last=index >= len(phonemes),
                                 queue_ms=(t_start - t_submit) * 1e3 if index == 1 else 0.0,
                                 gen_ms=(t_end - t_start) * 1e3, batch_size=1)
        finally:
            self._active.discard(rid)
            self._aborted.discard(rid)

    def _synth_job(self, request: SegmentRequest, phonemes: list[str] | None,
                   index: int) -> tuple[float, float, list[str], np.ndarray]:
        """Runs on a pool thread: G2P when not done yet, then one sentence → float32 [num_samples]."""
        t_start = time.perf_counter()
        with self._busy_lock:
            self._busy += 1
        try:
            tts: Any = self._local.tts
            if phonemes is None:
                phonemes = list(tts.phonemize(request.text))
            if not phonemes:
                return t_start, time.perf_counter(), [""], np.zeros(0, np.float32)
            # A fresh generator per sentence: a sentence's audio depends only on its text and the seed, so
            # how the text was cut into segments does not change the sound.
            rng = np.random.default_rng(request.seed)
            samples = tts.from_ids(tts.ids(phonemes[index]), request.speed, rng)  # [num_samples] float32
            return t_start, time.perf_counter(), phonemes, np.asarray(samples, dtype=np.float32)
        finally:
            with self._busy_lock:
                self._busy -= 1

    async def abort(self, request_id: str) -> None:
        if request_id in self._active:
            self._aborted.add(request_id)

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        raise UnsupportedVoiceMode(f"voice cloning is not supported by the CPU voice; it needs the {GPU_ENGINE!r} "
                                   "engine (start the server with --model DIR)", field="voice")

    def health(self) -> EngineHealth:
        status: Literal["ok", "loading", "error"] = (
            "ok" if self._status == "ok" else "loading" if self._status == "loading" else "error")
        workers = tuple(WorkerHealth(worker_id=i, status=status, device="cpu") for i in range(self._num_workers))
        return EngineHealth(status=status, detail=self._detail, workers=workers)

    def load(self) -> EngineLoad:
        busy = min(self._busy, self._num_workers)
        return EngineLoad(pool_size=self._num_workers, idle=self._num_workers - busy,
                          queued_segments=max(0, self._queued - busy), in_flight_segments=busy)
