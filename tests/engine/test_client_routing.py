"""Two CPU workers: new segments go to the least-loaded worker, and a dead worker fails only its own
in-flight segments while the other worker's finish."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realtime_tts import errors
from realtime_tts.config import load_config
from realtime_tts.engine.base import SegmentRequest
from realtime_tts.engine.client import OmniVoiceEngine, worker_devices


@pytest.fixture(scope="module")
def engine2(tiny_checkpoint: Path, loop_thread: Any) -> Iterator[OmniVoiceEngine]:
    eng = OmniVoiceEngine(load_config({"model": str(tiny_checkpoint), "device": "cpu", "gpus": 2}, env={}))
    loop_thread.run(eng.start(), timeout=300)
    yield eng
    loop_thread.run(eng.stop(), timeout=60)


def test_least_loaded_routing_and_isolated_worker_death(engine2: OmniVoiceEngine, loop_thread: Any) -> None:
    assert [w.status for w in engine2.health().workers] == ["ok", "ok"]
    pids = engine2.worker_pids()
    assert len(set(pids)) == 2

    async def scenario() -> tuple[BaseException | None, np.ndarray]:
        async def run(rid: str, duration_s: float) -> np.ndarray:
            chunks = [c async for c in engine2.synthesize(SegmentRequest(rid, "Which worker am I on?",
                                                                         duration_s=duration_s, num_step=32))]
            return np.concatenate([c.samples for c in chunks])

        on_0 = asyncio.ensure_future(run("on-0", 30.0))  # long: still running when its worker dies
        await asyncio.sleep(0)
        on_1 = asyncio.ensure_future(run("on-1", 2.0))
        await asyncio.sleep(0.05)
        assert [w.in_flight for w in engine2.health().workers] == [1, 1]  # least-loaded: one each
        os.kill(pids[0], signal.SIGKILL)
        results = await asyncio.gather(on_0, on_1, return_exceptions=True)
        dead = results[0] if isinstance(results[0], BaseException) else None
        assert isinstance(results[1], np.ndarray), results[1]
        return dead, results[1]

    dead, audio = loop_thread.run(scenario(), timeout=300)
    assert isinstance(dead, errors.EngineDead) and "worker 0" in dead.message
    assert audio.size == 50 * 960
    workers = engine2.health().workers
    assert workers[0].restarts == 1 and workers[1].restarts == 0
    assert engine2.health().status == "ok"  # worker 1 keeps the engine serving during the restart
    deadline = time.monotonic() + 120
    while engine2.health().workers[0].status != "ok":
        assert time.monotonic() < deadline, engine2.health()
        time.sleep(0.1)
    assert engine2.worker_pids()[1] == pids[1]


@pytest.mark.parametrize(("visible", "overrides", "expected"), [
    ("0,1", {}, ["cuda:0", "cuda:1"]),
    ("0,1", {"gpus": 1}, ["cuda:0"]),
    ("3", {"device": "cuda"}, ["cuda:0"]),  # indices are within the visible set
    ("0,1", {"device": "cpu"}, ["cpu"]),
    ("", {}, ["cpu"]),
    ("-1", {"gpus": 2}, ["cpu", "cpu"]),
    ("0,1", {"gpus": 3}, "only 2 GPU"),
    ("", {"device": "cuda"}, "no GPU is visible"),
])
def test_worker_devices(monkeypatch: pytest.MonkeyPatch, visible: str, overrides: dict[str, Any],
                        expected: list[str] | str) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    config = load_config({"model": "/nowhere", **overrides}, env={})
    if isinstance(expected, str):
        with pytest.raises(errors.EngineUnavailable, match=expected):
            worker_devices(config)
    else:
        assert worker_devices(config) == expected
