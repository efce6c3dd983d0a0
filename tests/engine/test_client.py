"""OmniVoiceEngine end to end on CPU: a real spawned worker running the tiny random checkpoint.

Audio of random weights is noise: these tests assert shapes, lengths, rates, determinism, batching, abort and
worker restart, not intelligibility.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realtime_tts import errors
from realtime_tts.config import load_config
from realtime_tts.engine.base import PRIORITY_FIRST, AudioChunk, Engine, SegmentRequest, Voice, VoicePrompt
from realtime_tts.engine.client import OmniVoiceEngine
from realtime_tts.metrics import Metrics

FRAME_SAMPLES = 960  # 24 kHz / 25 Hz


@pytest.fixture(scope="module")
def engine(tiny_checkpoint: Path, loop_thread: Any) -> Iterator[OmniVoiceEngine]:
    # A small step budget (two 8 s segments) so the priority test can fill it.
    config = load_config({"model": str(tiny_checkpoint), "device": "cpu", "max_batch_tokens": 1000}, env={})
    eng = OmniVoiceEngine(config)
    loop_thread.run(eng.start(), timeout=300)
    yield eng
    loop_thread.run(eng.stop(), timeout=60)


async def collect(engine: OmniVoiceEngine, request: SegmentRequest) -> tuple[np.ndarray, list[AudioChunk]]:
    chunks = [chunk async for chunk in engine.synthesize(request)]
    assert chunks and chunks[-1].last
    return np.concatenate([c.samples for c in chunks]), chunks


def test_is_an_engine_and_reports_health(engine: OmniVoiceEngine) -> None:
    assert isinstance(engine, Engine)
    caps = engine.capabilities
    assert caps.engine == "omnivoice" and caps.sample_rate == 24000
    assert caps.voice_modes == frozenset({"auto", "design", "clone"})
    health = engine.health()
    assert health.status == "ok"
    assert [(w.status, w.device) for w in health.workers] == [("ok", "cpu")]
    load = engine.load()
    assert load.pool_size == 1 and load.in_flight_segments == 0


def test_auto_audio_length_follows_duration_and_is_deterministic(engine: OmniVoiceEngine,
                                                                 loop_thread: Any) -> None:
    request = SegmentRequest("auto-1", "Hello there, how are you?", duration_s=1.2, num_step=8, seed=7)
    audio, chunks = loop_thread.run(collect(engine, request))
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == 30 * FRAME_SAMPLES  # 1.2 s at 25 Hz
    assert np.isfinite(audio).all() and float(np.abs(audio).max()) > 0
    assert chunks[-1].gen_ms > 0 and chunks[-1].queue_ms >= 0
    again, _ = loop_thread.run(collect(engine, SegmentRequest("auto-2", request.text, duration_s=1.2, num_step=8,
                                                              seed=7)))
    np.testing.assert_array_equal(audio, again)


def test_estimated_length_grows_with_text(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    short, _ = loop_thread.run(collect(engine, SegmentRequest("len-s", "Hi there.", num_step=4, seed=1)))
    long, _ = loop_thread.run(collect(engine, SegmentRequest(
        "len-l", "This is a much longer sentence that should take clearly more time to say out loud.",
        num_step=4, seed=1)))
    assert short.size % FRAME_SAMPLES == 0 and long.size % FRAME_SAMPLES == 0
    assert long.size > short.size


def test_design_and_clone(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    design = SegmentRequest("design-1", "A designed voice.", voice=Voice("design", instruct="female, low pitch"),
                            duration_s=0.8, num_step=4, seed=3)
    audio, _ = loop_thread.run(collect(engine, design))
    assert audio.size == 20 * FRAME_SAMPLES
    rng = np.random.default_rng(0)
    reference = (0.1 * rng.standard_normal(16000 * 2)).astype(np.float32)  # 2 s at 16 kHz
    prompt = loop_thread.run(engine.encode_voice(reference, 16000, "This is my reference."))
    assert isinstance(prompt, VoicePrompt) and prompt.engine == "omnivoice"
    assert prompt.num_codebooks == 8 and prompt.num_frames == 50
    assert len(prompt.codes) == 2 * 8 * 50
    clone = SegmentRequest("clone-1", "Now in the cloned voice.", voice=Voice("clone", prompt=prompt),
                           duration_s=1.0, num_step=4, seed=3)
    audio, _ = loop_thread.run(collect(engine, clone))
    assert audio.size == 25 * FRAME_SAMPLES
    # the estimate with a prompt follows the prompt's speaking rate: a longer text → longer audio
    est, _ = loop_thread.run(collect(engine, SegmentRequest("clone-2", "Now in the cloned voice.",
                                                            voice=Voice("clone", prompt=prompt), num_step=4)))
    assert est.size > 0 and est.size % FRAME_SAMPLES == 0


def test_concurrent_segments_share_steps(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    async def many() -> list[tuple[np.ndarray, list[AudioChunk]]]:
        return await asyncio.gather(*(collect(engine, SegmentRequest(
            f"batch-{i}", f"Sentence number {i} is here.", duration_s=0.4 + 0.2 * i, num_step=8, seed=i))
            for i in range(4)))

    results = loop_thread.run(many())
    for i, (audio, _) in enumerate(results):
        assert audio.size == round((0.4 + 0.2 * i) * 25) * FRAME_SAMPLES
    assert max(chunks[-1].batch_size for _, chunks in results) > 1  # they ran in one batch
    # batch membership does not change an item's audio (per-item seeded noise)
    alone, _ = loop_thread.run(collect(engine, SegmentRequest("alone-2", "Sentence number 2 is here.",
                                                              duration_s=0.8, num_step=8, seed=2)))
    np.testing.assert_array_equal(alone, results[2][0])


def test_first_segment_overtakes_queued_and_running_bulk(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    async def scenario() -> list[str]:
        finished: list[str] = []

        async def run(request: SegmentRequest) -> None:
            await collect(engine, request)
            finished.append(request.request_id)

        # ~450 tokens each: two fill the 1000-token step budget, the others wait
        bulk = [asyncio.ensure_future(run(SegmentRequest(f"bulk-{i}", "Bulk work to do.", duration_s=8.0,
                                                         num_step=16, seed=i))) for i in range(4)]
        await asyncio.sleep(0.5)  # bulk-0 and bulk-1 are running
        await run(SegmentRequest("first", "The first words of a turn.", duration_s=3.0, num_step=16,
                                 priority=PRIORITY_FIRST))
        await asyncio.gather(*bulk)
        return finished

    finished = loop_thread.run(scenario(), timeout=300)
    # FIFO would finish it after bulk-0 and bulk-1 (it does not fit beside them); priority pauses bulk-1
    assert finished.index("first") < finished.index("bulk-1") < finished.index("bulk-2")
    assert finished.index("first") < finished.index("bulk-3")


def test_bad_input_is_refused_before_the_worker(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    cases = [
        (SegmentRequest("bad-1", "x", voice=Voice("design", instruct="purple, loud")), "instruct"),
        (SegmentRequest("bad-2", "x", voice=Voice("design")), "instruct"),
        (SegmentRequest("bad-3", "x", voice=Voice("clone")), "voice"),
        (SegmentRequest("bad-4", "x", language="klingonese"), "language"),
        (SegmentRequest("bad-5", "x", num_step=0), "num_step"),
        (SegmentRequest("bad-6", "x", speed=9.0), "speed"),
        (SegmentRequest("bad-7", "   "), "text"),
        (SegmentRequest("bad-8", "x", voice=Voice("clone", prompt=VoicePrompt("cpu", "a", b"", 8, 0, 0.1))),
         "voice"),
    ]
    for request, field in cases:
        with pytest.raises(errors.BadRequest) as info:
            loop_thread.run(collect(engine, request))
        assert info.value.field == field, (request, info.value)
    assert engine.health().status == "ok"


def test_abort_and_early_close_stop_the_work(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    async def abort_soon() -> None:
        task = asyncio.ensure_future(collect(engine, SegmentRequest("abort-1", "A long one.", duration_s=20.0,
                                                                    num_step=64, seed=1)))
        await asyncio.sleep(0.05)
        await engine.abort("abort-1")
        with pytest.raises(errors.Cancelled):
            await task

    loop_thread.run(abort_soon())

    async def close_early() -> None:
        gen = engine.synthesize(SegmentRequest("close-1", "Another long one.", duration_s=20.0, num_step=64))
        task = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.2)
        task.cancel()  # what a WS session does when its client goes away: the generator's finally aborts
        with pytest.raises(asyncio.CancelledError):
            await task
        await gen.aclose()

    loop_thread.run(close_early())
    # the worker keeps serving, quickly (nothing left running in its batch)
    t0 = time.monotonic()
    audio, chunks = loop_thread.run(collect(engine, SegmentRequest("after-abort", "Still here.", duration_s=0.4,
                                                                   num_step=4, priority=PRIORITY_FIRST)))
    assert audio.size == 10 * FRAME_SAMPLES and chunks[-1].batch_size == 1
    assert time.monotonic() - t0 < 10
    assert engine.load().in_flight_segments == 0


def test_worker_death_fails_only_in_flight_then_restarts(engine: OmniVoiceEngine,
                                                          loop_thread: Any) -> None:
    (pid,) = engine.worker_pids()
    assert pid is not None

    async def die() -> None:
        gens = [collect(engine, SegmentRequest(f"doomed-{i}", "This will never finish.", duration_s=20.0,
                                               num_step=64)) for i in range(2)]
        tasks = [asyncio.ensure_future(g) for g in gens]
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        for task in tasks:
            with pytest.raises(errors.EngineDead, match="exited"):
                await task

    loop_thread.run(die())
    health = engine.health()
    assert health.workers[0].restarts == 1
    assert health.workers[0].status in ("restarting", "ok")
    if health.status != "ok":
        with pytest.raises(errors.EngineUnavailable):
            loop_thread.run(collect(engine, SegmentRequest("too-soon", "Hi.", duration_s=0.4, num_step=2)))
    deadline = time.monotonic() + 120
    while engine.health().status != "ok":
        assert time.monotonic() < deadline, engine.health()
        time.sleep(0.1)
    assert engine.worker_pids()[0] != pid
    # the dead process's pipe thread is gone: one reader per live worker (writes go from the loop, engine/pipe.py)
    deadline = time.monotonic() + 10
    while len([t for t in threading.enumerate() if t.name.startswith("omnivoice-")]) != 1:
        assert time.monotonic() < deadline, threading.enumerate()
        time.sleep(0.05)
    audio, _ = loop_thread.run(collect(engine, SegmentRequest("reborn", "Back again.", duration_s=0.4,
                                                              num_step=4)))
    assert audio.size == 10 * FRAME_SAMPLES


def test_stats_reports_reach_listeners(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    reports = []
    metrics = Metrics()
    loop_thread.run(_add_listener(engine, reports.append, metrics))
    loop_thread.run(collect(engine, SegmentRequest("stats-1", "Count my steps.", duration_s=0.4, num_step=6)))
    deadline = time.monotonic() + 10
    while sum(len(r.step_ms) for r in reports) < 6 or reports[-1].num_running + reports[-1].num_waiting:
        assert time.monotonic() < deadline, reports
        time.sleep(0.05)
    assert all(ms > 0 for r in reports for ms in r.step_ms)
    last = reports[-1]
    assert last.cuda_graph_hits == 0 and last.cuda_graph_misses >= 6  # CPU: every step eager
    assert last.num_finished >= 1 and engine.load().queued_segments == 0
    text = metrics.render().decode()
    assert f"realtime_tts_step_seconds_count {float(sum(len(r.step_ms) for r in reports))}" in text
    assert f"realtime_tts_cuda_graph_misses_total {float(last.cuda_graph_misses)}" in text
    assert 'realtime_tts_queue_depth{worker="omnivoice-0"} 0.0' in text


async def _add_listener(engine: OmniVoiceEngine, fn: Any, metrics: Metrics) -> None:
    engine.add_stats_listener(fn)
    engine.attach_metrics(metrics)


def test_a_model_that_cannot_load_is_a_clear_start_error(tmp_path: Path) -> None:
    async def start(model_dir: Path) -> OmniVoiceEngine:
        eng = OmniVoiceEngine(load_config({"model": str(model_dir), "device": "cpu"}, env={}))
        await eng.start()
        return eng

    with pytest.raises(errors.EngineUnavailable, match="does not exist"):
        asyncio.run(start(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    t0 = time.monotonic()
    with pytest.raises(errors.EngineUnavailable, match="cannot load model"):
        asyncio.run(start(tmp_path / "empty"))
    assert time.monotonic() - t0 < 120


def test_full_workers_refuse_with_overloaded(engine: OmniVoiceEngine, loop_thread: Any) -> None:
    async def overfill() -> None:
        engine.max_in_flight_per_worker = 2
        try:
            gens = [engine.synthesize(SegmentRequest(f"full-{i}", "Fill the worker.", duration_s=2.0, num_step=32))
                    for i in range(3)]
            tasks = [asyncio.ensure_future(g.__anext__()) for g in gens]
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 120)
        finally:
            engine.max_in_flight_per_worker = OmniVoiceEngine.max_in_flight_per_worker
        refused = [r for r in done if isinstance(r, errors.Overloaded)]
        assert len(refused) == 1 and refused[0].retry_after_ms == 1000
        assert sum(isinstance(r, AudioChunk) for r in done) == 2
        for g in gens:
            await g.aclose()

    loop_thread.run(overfill())
