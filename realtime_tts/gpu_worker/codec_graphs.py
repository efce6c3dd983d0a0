"""CUDA graphs of the codec decoder, one per code length (frames), captured on first use: decoding a segment
becomes one graph replay instead of the decoder's few hundred module calls and kernel launches, which the
worker's decode thread otherwise spends beside the step loop, holding the GIL (H200 run 10: 27-92 ms per
decode call at N=100 agents). Lengths are not padded together: the decoder's convolutions see across frames,
so only exact lengths share a graph. Worker processes only (torch, CUDA).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from realtime_tts.model.codec import Codec

log = logging.getLogger("realtime_tts.codec_graphs")


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    codes: torch.Tensor  # [1, C, T] long: the static input
    audio: torch.Tensor  # [S] float32: the static output (one item's waveform)


@dataclass
class CodecGraphStats:
    hits: int = 0
    misses: int = 0  # items decoded eagerly (too long, or the capture failed)
    captured: int = 0
    capture_s: float = 0.0
    failed_lengths: set[int] = field(default_factory=set)


class CodecGraphs:
    """Decodes code grids [C, T] like Codec.decode, through a CUDA graph per T ≤ max_frames (at most max_graphs
    kept, least recently used dropped). All graphs share one memory pool, so they must be replayed from one
    thread (the worker's decode thread) on one stream. Captures run with thread-local capture checks, so the
    step loop may keep launching work meanwhile."""

    def __init__(self, codec: Codec, max_frames: int, max_graphs: int = 512) -> None:
        self.codec = codec
        self.max_frames = max_frames
        self.max_graphs = max_graphs
        self.graphs: OrderedDict[int, _Graph] = OrderedDict()
        self.stats = CodecGraphStats()
        self._pool: Any = torch.cuda.graph_pool_handle()

    def _forward(self, codes: torch.Tensor) -> torch.Tensor:
        """[1, C, T] → the waveform [960·T] in float32 (what Codec.decode computes for one item)."""
        out: torch.Tensor = self.codec.model.decode(codes).audio_values[0, 0].float()
        return out

    def _capture(self, length: int) -> _Graph | None:
        if length in self.stats.failed_lengths:
            return None
        t0 = time.perf_counter()
        dev = self.codec.device
        codes = torch.zeros(1, self.codec.num_codebooks, length, dtype=torch.long, device=dev)
        try:
            side = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                self._forward(codes)  # warm up: cuDNN algorithm choice, allocator
            torch.cuda.current_stream(dev).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
                audio = self._forward(codes)
        except RuntimeError as exc:  # something in the decoder cannot be captured: this length stays eager
            log.warning("codec graph for %d frames not captured (%s); decoding it eagerly", length, exc)
            self.stats.failed_lengths.add(length)
            return None
        entry = _Graph(graph, codes, audio)
        self.graphs[length] = entry
        if len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        self.stats.captured += 1
        self.stats.capture_s += time.perf_counter() - t0
        return entry

    def graph_for(self, length: int) -> _Graph | None:
        if length > self.max_frames:
            return None
        entry = self.graphs.get(length)
        if entry is None:
            return self._capture(length)
        self.graphs.move_to_end(length)
        return entry

    @torch.inference_mode()
    def decode(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """Code grids [C, T_i] (device or host) → float32 waveforms [960·T_i]; one host copy for the graphed
        ones, the rest (too long, not capturable) through Codec.decode."""
        out: list[np.ndarray | None] = [None] * len(codes)
        replayed: list[tuple[int, torch.Tensor]] = []
        eager: list[int] = []
        for i, c in enumerate(codes):
            entry = self.graph_for(int(c.shape[-1]))
            if entry is None:
                eager.append(i)
                continue
            entry.codes.copy_(c[None], non_blocking=True)
            entry.graph.replay()
            replayed.append((i, entry.audio.clone()))  # before the next replay of this length overwrites it
        self.stats.hits += len(replayed)
        self.stats.misses += len(eager)
        if replayed:
            flat = torch.cat([w for _, w in replayed]).cpu().numpy()
            start = 0
            for i, w in replayed:
                out[i] = flat[start:start + w.numel()]
                start += w.numel()
        if eager:
            for i, wave in zip(eager, self.codec.decode([codes[i] for i in eager]), strict=True):
                out[i] = wave
        return [w for w in out if w is not None]
