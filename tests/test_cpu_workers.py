"""The CPU voice's worker processes (engine/cpu.py, no server): spread over processes, a killed worker fails only
the job it was running (errors.EngineDead) and comes back; priority order, cancel and determinism hold."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from live_server import SAMPLE_RATE, assert_speech

from realtime_tts.config import load_config
from realtime_tts.engine.base import PRIORITY_BULK, PRIORITY_FIRST, SegmentRequest, Voice
from realtime_tts.engine.cpu import CpuEngine
from realtime_tts.errors import EngineDead, EngineUnavailable

LONG = " ".join(f"Sentence number {i} of this request is long enough to keep a worker busy." for i in range(12))


@contextlib.asynccontextmanager
async def _running(workers: int) -> AsyncIterator[CpuEngine]:
    """A started CpuEngine of `workers` voice processes, stopped on the way out."""
    engine = CpuEngine(load_config({"cpu_workers": workers}, env={}))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()


def _request(rid: str, text: str, seed: int = 0, priority: int = PRIORITY_BULK) -> SegmentRequest:
    return SegmentRequest(request_id=rid, text=text, voice=Voice(mode="auto"), seed=seed, priority=priority)  # type: ignore[arg-type]


async def _speak(engine: CpuEngine, request: SegmentRequest) -> np.ndarray:
    parts = [c.samples async for c in engine.synthesize(request)]
    return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def test_a_killed_worker_fails_only_its_job_and_restarts() -> None:
    async def run() -> None:
        async with _running(2) as engine:
            pids = engine.worker_pids()
            assert len(set(pids)) == 2 and os.getpid() not in pids
            tasks = [asyncio.create_task(_speak(engine, _request(f"r{i}", LONG, seed=i))) for i in range(3)]
            # Kill worker 0 while it is running a job (3 long requests on 2 workers keep both busy).
            deadline = time.monotonic() + 30
            while not (engine.health().workers[0].in_flight and engine.load().queued_segments):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            victim = pids[0]
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            results = await asyncio.gather(*tasks, return_exceptions=True)
            dead = [r for r in results if isinstance(r, BaseException)]
            assert len(dead) == 1 and isinstance(dead[0], EngineDead), results
            for r in results:
                if not isinstance(r, BaseException):
                    assert_speech(r, min_s=20.0, max_s=80.0)  # the other requests finished whole
            # The worker came back as a new process and serves again.
            deadline = time.monotonic() + 60
            while engine.health().workers[0].status != "ok":
                assert time.monotonic() < deadline, engine.health()
                await asyncio.sleep(0.05)
            assert engine.health().workers[0].restarts == 1 and engine.worker_pids()[0] not in (None, victim)
            assert engine.health().status == "ok"
            again = await asyncio.gather(*(_speak(engine, _request(f"s{i}", "Back again.", seed=1))
                                           for i in range(4)))
            assert all(np.array_equal(a, again[0]) for a in again)  # both processes, same audio for one seed
            rms = float(np.sqrt(np.mean(again[0].astype(np.float64) ** 2)))  # raw voice: padded, not paced
            assert 0.5 < len(again[0]) / SAMPLE_RATE < 3.0 and 0.01 < rms < 0.3
        assert all(p is None for p in engine.worker_pids())

    asyncio.run(run())


def test_first_audio_jumps_the_bulk_queue_and_cancel_drops_queued_jobs() -> None:
    async def run() -> None:
        async with _running(1) as engine:
            bulk = [asyncio.create_task(_speak(engine, _request(f"b{i}", LONG, seed=i))) for i in range(3)]
            while engine.load().queued_segments < 2:
                await asyncio.sleep(0.005)
            t0 = time.perf_counter()
            first = await _speak(engine, _request("f", "Quick answer.", priority=PRIORITY_FIRST))
            waited = time.perf_counter() - t0
            assert not any(t.done() for t in bulk)  # it went ahead of the queued bulk sentences
            assert waited < 2.0 and len(first) > SAMPLE_RATE // 4
            for t in bulk:
                t.cancel()
            await asyncio.gather(*bulk, return_exceptions=True)
            deadline = time.monotonic() + 10
            while engine.load().queued_segments or engine.load().in_flight_segments:
                assert time.monotonic() < deadline, engine.load()  # cancelled jobs were dropped, not run
                await asyncio.sleep(0.01)

    asyncio.run(run())


def test_a_worker_killed_while_idle_fails_nothing() -> None:
    async def run() -> None:
        async with _running(1) as engine:
            (victim,) = engine.worker_pids()
            assert victim is not None
            os.kill(victim, signal.SIGKILL)
            while Path(f"/proc/{victim}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                await asyncio.sleep(0.01)  # dying (a zombie until the engine reaps it)
            await asyncio.sleep(0.3)  # its other threads (onnxruntime's) are torn down before it can be reaped
            audio = await _speak(engine, _request("after", "Nobody noticed.", seed=3))
            assert len(audio) > SAMPLE_RATE // 2
            health = engine.health().workers[0]
            assert health.status == "ok" and health.restarts == 1 and engine.worker_pids()[0] != victim

    asyncio.run(run())


def test_stop_fails_the_job_a_worker_is_running() -> None:
    async def run() -> None:
        async with _running(1) as engine:
            task = asyncio.create_task(_speak(engine, _request("r", LONG)))
            deadline = time.monotonic() + 30
            while not engine.health().workers[0].in_flight:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.005)
            await engine.stop()
            with pytest.raises(EngineUnavailable, match="stopped"):
                await asyncio.wait_for(task, 10)  # not left waiting for a reply that never comes

    asyncio.run(run())
