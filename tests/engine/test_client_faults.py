"""The OmniVoice worker client's watchdog, end to end on CPU with a real spawned worker (tiny random checkpoint):
a frozen worker (SIGSTOP) fails its in-flight request with a retryable engine_dead within the job timeout
instead of hanging, is killed and comes back; a frozen idle worker is found by the ping the same way."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from realtime_tts import errors
from realtime_tts.config import load_config
from realtime_tts.engine.base import SegmentRequest
from realtime_tts.engine.client import OmniVoiceEngine
from realtime_tts.metrics import Metrics

JOB_TIMEOUT_S = 3.0


@pytest.fixture(scope="module")
def watched(tiny_checkpoint: Path, loop_thread: Any) -> Iterator[tuple[OmniVoiceEngine, Metrics]]:
    config = load_config({"model": str(tiny_checkpoint), "device": "cpu", "engine_job_timeout_s": JOB_TIMEOUT_S,
                          "worker_check_interval_s": 0.5}, env={})
    eng = OmniVoiceEngine(config)
    metrics = Metrics()
    eng.attach_metrics(metrics)
    loop_thread.run(eng.start(), timeout=300)
    yield eng, metrics
    loop_thread.run(eng.stop(), timeout=60)


def _wait_ok(eng: OmniVoiceEngine, restarts: int, limit_s: float = 180) -> float:
    t0 = time.monotonic()
    while not (eng.health().status == "ok" and eng.health().workers[0].restarts >= restarts):
        assert time.monotonic() - t0 < limit_s, eng.health()
        time.sleep(0.1)
    return time.monotonic() - t0


def test_a_frozen_worker_fails_its_request_in_bounded_time_and_restarts(watched: Any, loop_thread: Any) -> None:
    eng, metrics = watched
    pid = eng.worker_pids()[0]
    assert pid is not None

    async def run() -> float:
        # long enough to be mid-generation when the worker freezes
        request = SegmentRequest("frozen-1", "A long sentence that keeps the worker busy. " * 6, num_step=32, seed=1)
        gen = eng.synthesize(request)
        with pytest.raises(errors.EngineDead) as e:
            async for _ in gen:
                pass
            raise AssertionError("finished before the freeze")  # pragma: no cover
        assert "engine_job_timeout_s" in e.value.message and e.value.retryable
        return time.monotonic()  # when the error arrived

    async def freeze_soon() -> float:
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGSTOP)
        return time.monotonic()

    async def both() -> float:
        freeze = asyncio.create_task(freeze_soon())
        t_end = await run()
        return t_end - await freeze

    waited = loop_thread.run(both(), timeout=60)
    assert waited < JOB_TIMEOUT_S + 2.5, waited
    back = _wait_ok(eng, 1)
    value = metrics.worker_restarts_total.labels(engine="omnivoice", cause="stuck")._value.get()
    assert value == 1
    print(f"frozen GPU-client worker: engine_dead {waited:.2f} s after SIGSTOP; back after {back:.1f} s")


def test_a_frozen_idle_worker_is_found_by_the_ping(watched: Any) -> None:
    eng, _ = watched
    before = eng.health().workers[0].restarts
    pid = eng.worker_pids()[0]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    while eng.health().workers[0].restarts == before:
        assert time.monotonic() - t0 < JOB_TIMEOUT_S + 3
        time.sleep(0.05)
    print(f"frozen idle worker noticed after {time.monotonic() - t0:.2f} s")
    _wait_ok(eng, before + 1)
