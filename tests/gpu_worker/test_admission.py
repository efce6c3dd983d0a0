"""Admission control (gpu_worker/admission.py): the online step-time fit, the start-delay prediction, the
decision; and the worker refusing a first segment it cannot start in time, on the real tiny model (CPU)."""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import pytest

from realtime_tts import errors
from realtime_tts.engine import ipc
from realtime_tts.gpu_worker.admission import Admission, StepClock, start_delay_steps
from realtime_tts.gpu_worker.backend import ModelBackend
from realtime_tts.gpu_worker.loop import WorkerLoop
from realtime_tts.gpu_worker.scheduler import Scheduler


def test_step_clock_is_cold_until_it_has_seen_steps_then_fits_the_line() -> None:
    clock = StepClock(min_steps=10)
    assert clock.seconds(4096) is None
    for i in range(200):
        tokens = 500 + 97 * (i % 50)  # sizes from 500 to ~5300 tokens
        clock.observe(tokens, 0.002 + 1.5e-6 * tokens)
    a, b = clock.coefficients()  # type: ignore[misc]
    assert a == pytest.approx(0.002, rel=0.02) and b == pytest.approx(1.5e-6, rel=0.02)
    assert clock.seconds(6144) == pytest.approx(0.002 + 1.5e-6 * 6144, rel=0.01)
    clock.observe(0, 1.0)  # an empty or untimed step teaches nothing
    clock.observe(100, 0.0)
    assert clock.num_steps == 200


def test_step_clock_follows_a_change_and_falls_back_to_proportional_on_one_size() -> None:
    clock = StepClock(half_life=20, min_steps=5)
    for _ in range(100):
        clock.observe(2000, 0.004)
    # one size only: no slope to fit, so a step is taken as proportional to its tokens (errs towards refusing)
    assert clock.seconds(4000) == pytest.approx(0.008)
    for _ in range(200):  # the card got slower (e.g. the codec now shares it): the fit follows within a few half-lives
        clock.observe(2000, 0.006)
    assert clock.seconds(2000) == pytest.approx(0.006, rel=0.01)


def test_start_delay_in_the_fluid_view_of_continuous_batching() -> None:
    # room in the step: starts at once; so does a segment larger than a step on an idle worker (it runs alone)
    assert start_delay_steps([(1000, 10)], 0, 500, budget=2000, num_steps=32) == 0
    assert start_delay_steps([], 0, 5000, budget=2000, num_steps=32) == 0
    assert start_delay_steps([(1000, 10)], 0, 5000, budget=2000, num_steps=32) == 10
    # full: starts when enough running tokens have left; the soonest finishers go first
    running = [(1000, 20), (1000, 5), (1000, 12)]
    assert start_delay_steps(running, 0, 500, budget=3000, num_steps=32) == 5
    assert start_delay_steps(running, 0, 1500, budget=3000, num_steps=32) == 12
    # queued work ahead beyond what the running items free must pass through the batch: budget tokens every
    # num_steps steps
    assert start_delay_steps(running, 3000, 500, budget=3000, num_steps=32) == pytest.approx(20 + 500 * 32 / 3000)
    assert start_delay_steps([], 6000, 1000, budget=2000, num_steps=32) == pytest.approx(5000 * 32 / 2000)


def test_admission_refuses_only_what_cannot_start_in_time_and_says_when_to_retry() -> None:
    clock = StepClock(min_steps=1)
    admission = Admission(max_wait_s=0.5, budget=4000, clock=clock)
    busy = [(4000, 32)]
    assert admission.decide(busy, 0, 300, 32).admit  # cold: nothing measured, nothing refused
    clock.observe(4000, 0.01)  # 10 ms per full step
    fits = admission.decide([(3000, 32)], 0, 300, 32)
    assert fits.admit and fits.wait_s == 0
    soon = admission.decide([(2000, 30), (2000, 40)], 0, 300, 32)  # 30 steps = 0.3 s
    assert soon.admit and soon.wait_s == pytest.approx(0.3)
    # the running 4000 tokens leave after 32 steps, then 8000 + 300 - 4000 queued tokens must pass through the
    # batch first: 4300 × 32 / 4000 = 34.4 more steps
    late = admission.decide(busy, 8000, 300, 32)
    assert not late.admit and late.wait_s == pytest.approx(0.664)
    assert late.retry_after_ms == pytest.approx(1000 * (late.wait_s - 0.5), abs=1)
    assert admission.num_refused == 1
    assert Admission(max_wait_s=0, budget=4000, clock=clock).decide(busy, 10**6, 300, 32).admit  # 0 = never refuse


def test_scheduler_reports_the_load_ahead_of_a_class() -> None:
    now = [0.0]
    sched = Scheduler(max_batch_tokens=1000, clock=lambda: now[0])
    sched.add("run", num_tokens=600, num_steps=4, priority=2)
    sched.add("first0", num_tokens=200, num_steps=4, priority=0)
    sched.complete_step(sched.schedule())
    sched.add("first", num_tokens=300, num_steps=4, priority=0)
    sched.add("bulk", num_tokens=700, num_steps=4, priority=2)
    # bulk work, running or queued, pauses for a first segment: only first segments are ahead of one
    assert sched.load_ahead(0) == ([(200, 3)], 300)
    assert sorted(sched.load_ahead(2)[0]) == [(200, 3), (600, 3)] and sched.load_ahead(2)[1] == 1000


@pytest.fixture(scope="module")
def backend(tiny_checkpoint: Path) -> ModelBackend:
    return ModelBackend(ipc.WorkerOptions(worker_id=0, model_dir=str(tiny_checkpoint), device="cpu",
                                          dtype="fp32", max_batch_tokens=4096, num_threads=1))


def test_a_busy_worker_refuses_a_new_turn_at_once_but_never_a_playing_stream(backend: ModelBackend) -> None:
    options = ipc.WorkerOptions(worker_id=1, model_dir="", device="cpu", dtype="fp32", max_batch_tokens=1000,
                                stats_interval_s=0.05, admission_wait_s=0.05)
    inbox: queue.Queue[ipc.ToWorker] = queue.Queue()
    out: queue.Queue[ipc.FromWorker] = queue.Queue()
    loop = WorkerLoop(options, backend, inbox, out.put)
    loop.step_clock.min_steps = 5
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        # first segments (admitted while the step clock is cold) that fill every step and queue for a while
        for i in range(12):
            inbox.put(ipc.Submit(f"early{i}", "Some text to keep the worker busy.", duration_s=3.0,
                                 num_step=64, priority=0, seed=i))
        deadline = time.monotonic() + 60
        while loop.step_clock.seconds(1000) is None:  # measured on the real steps
            assert time.monotonic() < deadline, "the step clock never warmed up"
            time.sleep(0.01)
        sent = time.monotonic()
        inbox.put(ipc.Submit("turn", "A new turn.", duration_s=1.0, num_step=32, priority=0, seed=1))
        inbox.put(ipc.Submit("stream", "Next sentence.", duration_s=1.0, num_step=32, priority=1, seed=2))
        refused = None
        while refused is None:
            message = out.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(message, ipc.Failed):
                assert message.request_id == "turn", message  # never the stream segment
                refused = message
        # within one loop iteration: a step of the tiny model on a shared CPU, far inside this bound
        assert time.monotonic() - sent < 2.0
        assert refused.code == errors.Overloaded.code and refused.retry_after_ms and refused.retry_after_ms >= 100
        assert "would start in about" in refused.message
        assert loop.admission.num_refused == 1
        while "stream" not in loop.segments:  # a segment of a response already playing is never refused
            assert time.monotonic() < deadline, "the stream segment was not admitted"
            time.sleep(0.01)
        stats = None
        while stats is None or stats.refused < 1:
            message = out.get(timeout=max(0.01, deadline - time.monotonic()))
            assert not isinstance(message, ipc.Failed), message
            stats = message if isinstance(message, ipc.Stats) else stats
        assert stats.full_step_ms > 0 and stats.host_s > 0
    finally:
        inbox.put(ipc.Shutdown())
        thread.join(60)
