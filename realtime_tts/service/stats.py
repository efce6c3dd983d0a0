"""Per-response stats: the counters a Synthesis keeps while it runs (text in, audio out, engine queue and batch
figures, times) and the stats envelope built from them (PROTOCOL.md §5); the process RSS readers. Imports
engine.base for typing only; never torch."""

from __future__ import annotations

import os
import resource
import time
from typing import Any

import numpy as np

from realtime_tts.engine.base import Capabilities

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_MEMORY_TTL_S = 0.1  # /proc is read at most this often: every request's stats envelope reads it (2-3 times)
_memory: tuple[float, int, int] = (-1.0, 0, 0)  # (time.monotonic() of the read, RSS, peak RSS)


def _memory_now() -> tuple[int, int]:
    """(RSS, peak RSS) of this process, read from /proc at most every _MEMORY_TTL_S: at hundreds of requests a
    second, reading it for each was ~10% of the event loop's CPU (bench/load.py --profile-web, CPU timer)."""
    global _memory
    now = time.monotonic()
    if now - _memory[0] >= _MEMORY_TTL_S:
        _memory = (now, _read_rss_bytes(), _read_peak_rss_bytes())
    return _memory[1], _memory[2]


def rss_bytes() -> int:
    return _memory_now()[0]


def peak_rss_bytes() -> int:
    return _memory_now()[1]


def _read_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def _read_peak_rss_bytes() -> int:
    """Peak RSS of the whole process since it started: VmHWM, else ru_maxrss (both KiB on Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Stats:
    """One response's counters. Times are time.perf_counter(); first_audio_monotonic() converts the first audio's
    time to the engines' clock (time.monotonic) for deadlines."""

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        self.num_chars = 0
        self.t_start = time.perf_counter()
        self.t_first_text: float | None = None
        self.t_first_audio: float | None = None
        self.t_end: float | None = None
        self.samples_out = 0
        self.num_segments = 0
        self.text_done = 0  # text offset where the last finished segment ends (what is spoken, for limits)
        self.first_queue_ms: float | None = None
        self.batch_sizes: list[int] = []
        self.num_steps: list[int] = []  # diffusion steps of each finished segment, in order (diffusion engines)
        self.rss_start = rss_bytes()

    def note_text(self, n: int) -> None:
        if n and self.t_first_text is None:
            self.t_first_text = time.perf_counter()
        self.num_chars += n

    def note_audio(self, num_samples: int) -> None:
        if self.t_first_audio is None:
            self.t_first_audio = time.perf_counter()
        self.samples_out += num_samples

    def first_audio_monotonic(self) -> float | None:
        if self.t_first_audio is None:
            return None
        return time.monotonic() - (time.perf_counter() - self.t_first_audio)

    def envelope(self, caps: Capabilities) -> dict[str, Any]:
        """The stats envelope (PROTOCOL.md §5)."""
        t_end = self.t_end or time.perf_counter()
        t_total_ms = (t_end - self.t_start) * 1e3
        t_text = self.t_first_text or self.t_start
        ttfa_ms = (self.t_first_audio - t_text) * 1e3 if self.t_first_audio is not None else None
        audio_ms = self.samples_out / self.sample_rate * 1e3
        rss_end = rss_bytes()
        envelope: dict[str, Any] = {
            "t_total_ms": round(t_total_ms, 2),
            "ttfa_ms": round(ttfa_ms, 2) if ttfa_ms is not None else None,
            "queue_ms": round(self.first_queue_ms or 0.0, 2),
            "audio_duration_ms": round(audio_ms, 2),
            "rtf": round(t_total_ms / audio_ms, 5) if audio_ms > 0 else None,
            "segments": self.num_segments,
            "batch_size_mean": round(float(np.mean(self.batch_sizes)), 3) if self.batch_sizes else None,
            "engine": caps.engine,
            "model": caps.model,
            "device": caps.device,
            "sample_rate": self.sample_rate,
            "mem": {
                "rss_start_bytes": self.rss_start,
                "rss_end_bytes": rss_end,
                # the kernel updates the high-water mark lazily, so it can trail the current RSS slightly
                "rss_peak_bytes": max(peak_rss_bytes(), rss_end, self.rss_start),
                "vram_start_bytes": None,
                "vram_end_bytes": None,
                "vram_peak_bytes": None,
                "vram_measured": False,
            },
        }
        if self.num_steps:  # diffusion engines: the steps each finished segment ran, in order
            envelope["num_steps"] = list(self.num_steps)
        return envelope
