"""OmniVoiceEngine on CUDA (marked gpu; skipped without it): the spawned worker steps through CUDA graphs
and fused kernels, its reports show graph hits, and a seeded segment gives the same audio twice."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realtime_tts.config import load_config
from realtime_tts.engine.base import SegmentRequest
from realtime_tts.engine.client import OmniVoiceEngine, count_gpus
from realtime_tts.engine.ipc import Stats

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(count_gpus() == 0 or shutil.which("nvidia-smi") is None,
                                                  reason="needs CUDA")]


def test_gpu_worker_serves_through_graphs(tiny_checkpoint: Path, loop_thread: Any) -> None:
    engine = OmniVoiceEngine(load_config({"model": str(tiny_checkpoint), "device": "cuda", "gpus": 1,
                                          "dtype": "fp32"}, env={}))
    reports: list[Stats] = []

    async def scenario() -> list[np.ndarray]:
        await engine.start()
        engine.add_stats_listener(reports.append)
        out = []
        for rid in ("g1", "g2"):
            chunks = [c async for c in engine.synthesize(SegmentRequest(rid, "Graphs on the GPU.", duration_s=1.0,
                                                                        num_step=8, seed=11))]
            out.append(np.concatenate([c.samples for c in chunks]))
        many = await asyncio.gather(*([_collect(engine, SegmentRequest(f"m{i}", f"Batch member {i}.",
                                                                       duration_s=0.4 + 0.1 * i, num_step=8))
                                       for i in range(8)]))
        out.extend(many)
        return out

    try:
        audio = loop_thread.run(scenario(), timeout=600)
        assert engine.health().workers[0].device == "cuda:0"
        assert audio[0].size == 25 * 960
        np.testing.assert_array_equal(audio[0], audio[1])
        for i, a in enumerate(audio[2:]):
            # duration → frames truncates, as the reference does (0.7 s → 17 frames, not 18)
            assert a.size == int((0.4 + 0.1 * i) * 25) * 960 and np.isfinite(a).all()
        deadline = time.monotonic() + 10
        while not reports or reports[-1].num_running + reports[-1].num_waiting:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert reports[-1].cuda_graph_hits > 0, reports[-1]
    finally:
        loop_thread.run(engine.stop(), timeout=60)


async def _collect(engine: OmniVoiceEngine, request: SegmentRequest) -> np.ndarray:
    return np.concatenate([c.samples async for c in engine.synthesize(request)])
