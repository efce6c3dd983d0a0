"""Early admission in the web process (engine/admission.py's arithmetic, engine/client.py's decision): a first
segment is refused on arrival when the worker's last report plus what was sent to it since predicts a start
later than admission_wait_ms; a cold worker refuses nothing; another worker with room takes it instead."""

from __future__ import annotations

import random
import time

import pytest

from realtime_tts import errors
from realtime_tts.config import load_config
from realtime_tts.engine import admission, ipc
from realtime_tts.engine.base import SegmentRequest
from realtime_tts.engine.client import OmniVoiceEngine, _Worker, estimate_tokens, predicted_start

BUDGET = 1000
STEP_MS = 10.0


def report(now: float, *, running: list[tuple[int, int]], waiting: int = 0, num_submits: int = 0,
           step_ms: float = STEP_MS, tokens_per_char: float = 2.0) -> ipc.Stats:
    return ipc.Stats(0, 0, len(running), 0, 0, 0, step_ms, 0, 0, full_step_ms=step_ms, at_s=now,
                     budget_tokens=BUDGET, running=admission.running_by_steps_left(running), waiting_tokens=waiting,
                     num_submits=num_submits, tokens_per_char=tokens_per_char)


def submit(text: str = "x" * 50, priority: int = 0, num_step: int = 32) -> ipc.Submit:
    return ipc.Submit("r", text, num_step=num_step, priority=priority)


def test_grouping_by_steps_left_keeps_the_prediction() -> None:
    rng = random.Random(0)
    for _ in range(200):
        running = [(rng.randint(20, 400), rng.randint(1, 32)) for _ in range(rng.randint(0, 40))]
        waiting, tokens = rng.randint(0, 3000), rng.randint(20, 400)
        assert admission.start_delay_steps(admission.running_by_steps_left(running), waiting, tokens, BUDGET, 32) == \
            pytest.approx(admission.start_delay_steps(running, waiting, tokens, BUDGET, 32))


def test_refusal_rule() -> None:
    assert admission.decide(0.9, 1.0) == admission.Decision(True, 0.9, 0)
    assert admission.decide(5.0, 0.0).admit  # 0: admission control off
    d = admission.decide(1.2345, 1.0)
    assert not d.admit and d.retry_after_ms == 235
    assert admission.decide(1.001, 1.0).retry_after_ms == admission.MIN_RETRY_MS
    assert admission.decide(1e6, 1.0).retry_after_ms == admission.MAX_RETRY_MS


def test_backlog_wait_is_the_worker_prediction_less_the_steps_since_the_report() -> None:
    running = [(400, 10), (500, 30)]
    b = admission.Backlog(tuple(admission.running_by_steps_left(running)), 2000, BUDGET, 0.01, at_s=100.0)
    steps = admission.start_delay_steps(running, 2000, 100, BUDGET, 32)
    assert steps > 0
    assert b.wait_s(100.0, 0, 100, 32) == pytest.approx(steps * 0.01)
    assert b.wait_s(100.05, 0, 100, 32) == pytest.approx((steps - 5) * 0.01)  # 5 steps ran since
    assert b.wait_s(100.0, 3000, 100, 32) > b.wait_s(100.0, 0, 100, 32)  # work sent since the report is ahead
    assert b.wait_s(100.0 + steps * 0.01 + 1, 0, 100, 32) == 0.0


def test_a_cold_worker_admits_everything() -> None:
    w = _Worker(0, "cpu", status="ok")
    assert predicted_start(w, submit(), time.monotonic(), 0.001, 32).admit
    # reported, but its step clock has not measured a step yet (full_step_ms 0)
    w.take_stats(ipc.Stats(0, 500, 100, 0, 0, 0, 0.0, 0, 0, at_s=time.monotonic(), budget_tokens=BUDGET,
                           running=[(BUDGET, 32)], waiting_tokens=100_000, tokens_per_char=2.0))
    assert w.backlog is None and predicted_start(w, submit(), time.monotonic(), 0.001, 32).admit


def test_the_web_refuses_what_the_report_and_the_segments_sent_since_say_cannot_start_in_time() -> None:
    now = time.monotonic()
    w = _Worker(0, "cpu", status="ok")
    # a full batch, half of it finishing in 5 steps: a 100-token segment starts in 5 steps (50 ms)
    w.take_stats(report(now, running=[(500, 5), (500, 20)], num_submits=7))
    assert estimate_tokens(submit(), w.tokens_per_char) == 100
    d = predicted_start(w, submit(), now, 1.0, 32)
    assert d.admit and d.wait_s == pytest.approx(0.05, abs=1e-6)
    # 40 first segments sent since (100 tokens each): 4000 tokens pass through the batch ahead of it
    for i in range(40):
        w.num_sent += 1
        w.unseen_first.append((7 + i + 1, 100))
    d = predicted_start(w, submit(), now, 1.0, 32)
    assert not d.admit and d.wait_s > 1.0 and d.retry_after_ms >= 100
    # ...which the next report has taken (and its worker has started): the backlog is the report's again
    w.take_stats(report(now, running=[(500, 5), (500, 20)], num_submits=47))
    assert not w.unseen_first and predicted_start(w, submit(), now, 1.0, 32).admit
    # only first segments count: later segments of a playing response wait behind them, not ahead
    assert estimate_tokens(submit(priority=2), 0.0) == 0


def test_the_engine_refuses_on_arrival_or_sends_to_a_worker_with_room() -> None:
    engine = OmniVoiceEngine(load_config({"model": "/nonexistent", "admission_wait_ms": 200}, env={}))
    refused: list[int] = []
    engine._on_refuse = lambda w: refused.append(w.worker_id)
    now = time.monotonic()
    full, idle = _Worker(0, "cpu", status="ok"), _Worker(1, "cpu", status="ok")
    full.take_stats(report(now, running=[(BUDGET, 32)], waiting=20 * BUDGET))
    idle.take_stats(report(now, running=[]))
    engine._workers = [full, idle]
    assert engine._admit(full, submit()) is idle
    engine._workers = [full]
    with pytest.raises(errors.Overloaded) as e:
        engine._admit(full, submit())
    assert e.value.retry_after_ms is not None and e.value.retry_after_ms >= 100
    assert "would start in about" in e.value.message and "web process" in e.value.message
    assert refused == [0]
    # the web side counts what it sends: first segments only, until a report has taken them
    engine._send(full, submit())
    engine._send(full, submit(priority=2))
    assert full.num_sent == 2 and [t for _, t in full.unseen_first] == [100]


def test_service_open_check_refuses_a_first_segment_before_any_work_is_queued() -> None:
    engine = OmniVoiceEngine(load_config({"model": "/nonexistent", "admission_wait_ms": 200}, env={}))
    first, later = SegmentRequest("a-0", "x" * 50, priority=0), SegmentRequest("a-1", "x" * 50, priority=2)
    engine.check(first)  # no worker up yet: left for synthesize to report
    w = _Worker(0, "cpu", status="ok")
    engine._workers = [w]
    engine.check(first)  # a cold worker refuses nothing
    w.take_stats(report(time.monotonic(), running=[(BUDGET, 32)], waiting=20 * BUDGET))
    with pytest.raises(errors.Overloaded):
        engine.check(first)
    engine.check(later)  # a response already playing is never refused
