"""CUDA graphs of the codec decoder: a decode job's grids (every finished segment the decode thread took) sorted by
length, cut into padded batches (model/codec_batch.plan_chunks) and each batch decoded by one replay of a graph
captured per (batch bucket, frame bucket) on first use, the items' lengths a device-tensor input of the graph:
the decoder masks each item past its length, so its audio is its own unpadded decode's (codec_batch.py says why
that is exact). One replay replaces the decoder's few hundred module calls and kernel launches, and a batch keeps
the card busier than one small segment does (H200, before: ~3 ms of device time per 2-3 s segment at batch 1
against 0.75 ms per 6 s segment in bulk). PerLengthCodecGraphs is the previous scheme (a batch-1 graph per exact
length), kept for bench/omnivoice_codec.py's side-by-side. Worker processes only (torch, CUDA).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from realtime_tts.gpu_worker.host_copy import to_device, to_host
from realtime_tts.model.codec import Codec
from realtime_tts.model.codec_batch import HOP, decode_padded, pad_grids, plan_chunks

log = logging.getLogger("realtime_tts.codec_graphs")


@dataclass
class CodecGraphStats:
    hits: int = 0  # items decoded by a graph replay
    misses: int = 0  # items decoded eagerly (too long, or the capture failed)
    calls: int = 0  # codec calls: graph replays + eager calls
    captured: int = 0
    capture_s: float = 0.0
    failed: set[Any] = field(default_factory=set)  # graph keys whose capture failed (decoded eagerly since)

    @property
    def items(self) -> int:
        return self.hits + self.misses


def _capture_graph(pool: Any, dev: torch.device, run: Callable[[], torch.Tensor]
                   ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
    """run() once on a side stream (cuDNN algorithm choice, Triton compiles, allocator), then captured into a graph
    in `pool` with thread-local capture checks (the step loop keeps launching meanwhile) → (graph, its static
    output). Raises RuntimeError when something in run() cannot be captured."""
    side = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = run()
    return graph, out


def _keep(graphs: OrderedDict[Any, Any], key: Any, entry: Any, max_graphs: int, stats: CodecGraphStats,
          t0: float) -> None:
    """A captured graph into the LRU (the least recently used dropped past max_graphs), counted in stats."""
    graphs[key] = entry
    if len(graphs) > max_graphs:
        graphs.popitem(last=False)
    stats.captured += 1
    stats.capture_s += time.perf_counter() - t0


@dataclass
class _BatchGraph:
    graph: torch.cuda.CUDAGraph
    codes: torch.Tensor  # [rows, C, frames] long: static input
    lengths: torch.Tensor  # [rows] long: static input (frames of each row; 0 = an empty row)
    audio: torch.Tensor  # [rows, 960·frames] float32: static output


class CodecGraphs:
    """Decodes code grids [C, T] like Codec.decode, in padded masked batches: a CUDA graph per (rows, frames) with
    rows a batch bucket, frames a multiple of frame_step up to max_frames and rows × frames ≤ max_batch_frames
    (which bounds a call's memory), at most max_graphs kept (least recently used dropped). Longer grids, or a key
    whose capture failed, decode eagerly through the same masked batched path. All graphs share one memory pool,
    so they must be replayed from one thread (the worker's decode thread) on one stream. Captures run with
    thread-local capture checks, so the step loop may keep launching work meanwhile (the caller holds the
    worker's capture lock)."""

    def __init__(self, codec: Codec, max_frames: int, max_graphs: int = 256,
                 batch_buckets: Sequence[int] = (1, 2, 4, 8, 16), frame_step: int = 16,
                 max_batch_frames: int = 2048, max_pad_ratio: float = 1.5) -> None:
        self.codec = codec
        self.max_frames = max_frames
        self.max_graphs = max_graphs
        self.batch_buckets = tuple(sorted(batch_buckets))
        self.frame_step = frame_step
        # at least one longest segment fits one call
        self.max_batch_frames = max(max_batch_frames, max_frames)
        self.max_pad_ratio = max_pad_ratio  # no item padded past this times its length (plan_chunks)
        self.graphs: OrderedDict[tuple[int, int], _BatchGraph] = OrderedDict()
        self.stats = CodecGraphStats()
        self._pool: Any = torch.cuda.graph_pool_handle()

    def _capture(self, key: tuple[int, int]) -> _BatchGraph | None:
        if key in self.stats.failed:
            return None
        rows, frames = key
        t0 = time.perf_counter()
        dev = self.codec.device
        codes = torch.zeros(rows, self.codec.num_codebooks, frames, dtype=torch.long, device=dev)
        lengths = torch.full((rows,), frames, dtype=torch.long, device=dev)
        model = self.codec.model
        try:
            graph, audio = _capture_graph(self._pool, dev, lambda: decode_padded(model, codes, lengths))
        except RuntimeError as exc:  # something in the decoder cannot be captured: this key stays eager
            log.warning("codec graph for %d x %d frames not captured (%s); decoding it eagerly", rows, frames, exc)
            self.stats.failed.add(key)
            return None
        entry = _BatchGraph(graph, codes, lengths, audio)
        _keep(self.graphs, key, entry, self.max_graphs, self.stats, t0)
        return entry

    def graph_for(self, rows: int, frames: int) -> _BatchGraph | None:
        if frames > self.max_frames:
            return None
        entry = self.graphs.get((rows, frames))
        if entry is None:
            return self._capture((rows, frames))
        self.graphs.move_to_end((rows, frames))
        return entry

    def warm_keys(self, max_frames: int = 160) -> list[tuple[int, int]]:
        """The graph keys a serving decode job of segments up to max_frames (160: 6.4 s) lands in: every batch bucket
        × every frame bucket up to there, within max_batch_frames; small batches first."""
        top = min(max_frames, self.max_frames)
        frames = sorted({min(f, self.max_frames) for f in range(self.frame_step, top + self.frame_step,
                                                                  self.frame_step)})
        return [(rows, f) for rows in self.batch_buckets for f in frames if rows * f <= self.max_batch_frames]

    @torch.inference_mode()
    def warm_up(self, max_frames: int = 160, max_seconds: float = 10.0) -> int:
        """Before serving: the masked kernels' Triton variants compiled (eager padded batches of 1-16 frames: every
        length mod 16), then the graphs of warm_keys(max_frames) captured until max_seconds have passed → how many
        were captured. Left to the first requests, each capture stalls the decode thread (~60 ms on the H200)."""
        dev = self.codec.device
        for t in range(1, 17):  # the eager path (segments past max_frames): each length's stride divisibility
            grid = torch.zeros(self.codec.num_codebooks, t, dtype=torch.long, device=dev)
            decode_padded(self.codec.model, grid[None], torch.tensor([t], dtype=torch.long, device=dev))
        t0 = time.perf_counter()
        before = self.stats.captured
        for rows, frames in self.warm_keys(max_frames):
            if time.perf_counter() - t0 > max_seconds:
                break
            self.graph_for(rows, frames)
        return self.stats.captured - before

    @torch.inference_mode()
    def decode(self, codes: list[torch.Tensor]) -> list[np.ndarray]:
        """Code grids [C, T_i] (device or host) → float32 waveforms [960·T_i]: one graph replay (or eager call) per
        chunk of the plan, each chunk's audio gathered into one device buffer, one host copy for the job."""
        if not codes:
            return []
        lengths = [int(c.shape[-1]) for c in codes]
        chunks = plan_chunks(lengths, self.batch_buckets, self.frame_step, self.max_batch_frames, self.max_frames,
                             self.max_pad_ratio)
        dev = self.codec.device
        flat = torch.empty(HOP * sum(lengths), dtype=torch.float32, device=dev)  # the chunks' items in plan order
        spans: list[tuple[int, int]] = [(0, 0)] * len(codes)
        start = 0
        for chunk in chunks:
            items = [codes[i] for i in chunk.items]
            entry = self.graph_for(chunk.rows, chunk.frames)
            if entry is None:
                padded, lens = pad_grids(items, chunk.frames, device=dev)
                wave = decode_padded(self.codec.model, padded, lens)  # [len(items), 960·frames]
                self.stats.misses += len(items)
            else:
                for j, grid in enumerate(items):  # frames past a length keep earlier valid ids: masked anyway
                    entry.codes[j, :, :grid.shape[-1]].copy_(grid, non_blocking=True)
                to_device(torch.tensor([lengths[i] for i in chunk.items] + [0] * (chunk.rows - len(items)),
                                       dtype=torch.long), entry.lengths)
                entry.graph.replay()
                wave = entry.audio
                self.stats.hits += len(items)
            self.stats.calls += 1
            parts = [wave[j, :HOP * lengths[i]] for j, i in enumerate(chunk.items)]
            end = start + sum(p.numel() for p in parts)
            torch.cat(parts, out=flat[start:end])  # before the next replay of this graph overwrites its output
            for i, p in zip(chunk.items, parts, strict=True):
                spans[i] = (start, start + p.numel())
                start += p.numel()
        host = to_host(flat).numpy()
        return [host[a:b] for a, b in spans]


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    codes: torch.Tensor  # [1, C, T] long: the static input
    audio: torch.Tensor  # [S] float32: the static output (one item's waveform)


class PerLengthCodecGraphs:
    """The previous scheme (bench/omnivoice_codec.py compares against it): decodes code grids [C, T] like
    Codec.decode, each through a batch-1 CUDA graph per exact T ≤ max_frames (at most max_graphs kept, least
    recently used dropped); the same pool and capture rules as CodecGraphs."""
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
        if length in self.stats.failed:
            return None
        t0 = time.perf_counter()
        dev = self.codec.device
        codes = torch.zeros(1, self.codec.num_codebooks, length, dtype=torch.long, device=dev)
        try:
            graph, audio = _capture_graph(self._pool, dev, lambda: self._forward(codes))
        except RuntimeError as exc:  # something in the decoder cannot be captured: this length stays eager
            log.warning("codec graph for %d frames not captured (%s); decoding it eagerly", length, exc)
            self.stats.failed.add(length)
            return None
        entry = _Graph(graph, codes, audio)
        _keep(self.graphs, length, entry, self.max_graphs, self.stats, t0)
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
        self.stats.calls += len(replayed) + len({int(codes[i].shape[-1]) for i in eager})
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
