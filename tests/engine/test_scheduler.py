"""The step scheduler without a GPU: continuous batching, token budget, priority, cancellation, no starvation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from realtime_tts.engine.base import PRIORITY_BULK, PRIORITY_FIRST, PRIORITY_STREAM
from realtime_tts.engine.scheduler import Scheduler, StepPlan


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run_step(s: Scheduler, clock: Clock, dt: float = 0.01) -> tuple[StepPlan, list[str]]:
    plan = s.schedule()
    clock.now += dt
    return plan, s.complete_step(plan)


def test_join_at_next_step_and_leave_after_last() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=1000, clock=clock)
    s.add("a", num_tokens=10, num_steps=3)
    plan, done = run_step(s, clock)
    assert plan.batch == ("a",) and plan.started == ("a",) and done == []
    s.add("b", num_tokens=10, num_steps=2)  # arrives while a is mid-generation
    plan, done = run_step(s, clock)
    assert set(plan.batch) == {"a", "b"} and plan.started == ("b",) and done == []
    plan, done = run_step(s, clock)
    assert set(plan.batch) == {"a", "b"} and set(done) == {"a", "b"}
    plan, done = run_step(s, clock)
    assert plan.batch == () and len(s) == 0
    assert s.stats().num_finished == 2


def test_token_budget_is_respected_and_fills_with_smaller_items() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=100, clock=clock)
    s.add("big1", num_tokens=60, num_steps=1)
    s.add("big2", num_tokens=60, num_steps=1)
    s.add("small", num_tokens=30, num_steps=1)
    plan = s.schedule()
    assert plan.batch == ("big1", "small") and plan.num_tokens == 90
    s.complete_step(plan)
    assert s.schedule().batch == ("big2",)


def test_oversized_item_runs_alone() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=100, clock=clock)
    s.add("huge", num_tokens=500, num_steps=1)
    s.add("small", num_tokens=10, num_steps=1)
    plan, done = run_step(s, clock)
    assert plan.batch == ("huge",) and done == ["huge"]
    assert s.schedule().batch == ("small",)


def test_priority_first_segment_then_closest_deadline_then_bulk() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=10, clock=clock)
    s.add("bulk", num_tokens=10, num_steps=1, priority=PRIORITY_BULK)
    s.add("stream_late", num_tokens=10, num_steps=1, priority=PRIORITY_STREAM, deadline_s=clock.now + 5)
    s.add("stream_soon", num_tokens=10, num_steps=1, priority=PRIORITY_STREAM, deadline_s=clock.now + 1)
    s.add("first", num_tokens=10, num_steps=1, priority=PRIORITY_FIRST)
    order: list[str] = []
    for _ in range(4):
        plan, _ = run_step(s, clock)
        order.extend(plan.batch)
    assert order == ["first", "stream_soon", "stream_late", "bulk"]


def test_first_segment_preempts_running_bulk_at_next_step() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=10, clock=clock)
    s.add("bulk", num_tokens=10, num_steps=4)
    run_step(s, clock)
    s.add("first", num_tokens=10, num_steps=2, priority=PRIORITY_FIRST)
    assert run_step(s, clock)[0].batch == ("first",)
    assert run_step(s, clock)[1] == ["first"]
    assert run_step(s, clock)[0].batch == ("bulk",)  # paused bulk resumes where it was
    assert s.steps_done("bulk") == 2


def test_cancel_removes_at_next_step() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=100, clock=clock)
    s.add("a", num_tokens=10, num_steps=5)
    s.add("b", num_tokens=10, num_steps=5)
    plan = s.schedule()
    assert s.cancel("a")  # arrives while the step runs
    assert s.complete_step(plan) == []
    plan = s.schedule()
    assert plan.batch == ("b",) and plan.cancelled == ("a",)
    assert not s.cancel("a") and not s.cancel("nope")
    assert s.schedule().cancelled == ()


def test_cancel_of_waiting_item() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=10, clock=clock)
    s.add("a", num_tokens=10, num_steps=5)
    s.add("b", num_tokens=10, num_steps=5)
    s.cancel("b")
    plan = s.schedule()
    assert plan.batch == ("a",) and plan.cancelled == ("b",)


def test_bulk_is_not_starved_by_a_flood_of_first_segments() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=10, max_wait_s=0.5, clock=clock)
    s.add("bulk", num_tokens=10, num_steps=3)
    n = 0
    for step in range(400):  # a new first segment every step, each of which alone fills the budget
        s.add(f"first{step}", num_tokens=10, num_steps=1, priority=PRIORITY_FIRST)
        _, done = run_step(s, clock, dt=0.05)
        if "bulk" in done:
            n = step
            break
    assert 0 < n < 400
    # served roughly once per max_wait_s: 3 steps within ~3 waits
    assert n * 0.05 <= 3 * (0.5 + 0.1)


def test_max_batch_items_and_queue_time() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=1000, max_batch_items=2, clock=clock)
    for name in "abc":
        s.add(name, num_tokens=1, num_steps=1)
    clock.now += 0.25
    plan = s.schedule()
    assert plan.batch == ("a", "b")
    assert s.queue_s("a") == pytest.approx(0.25)
    assert s.queue_s("c") is None


def test_max_active_bounds_started_items() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=1000, max_active=2, clock=clock)
    for name in "abc":
        s.add(name, num_tokens=1, num_steps=2)
    plan, _ = run_step(s, clock)
    assert plan.batch == ("a", "b")
    plan, done = run_step(s, clock)
    assert plan.batch == ("a", "b") and done == ["a", "b"]
    assert s.schedule().batch == ("c",)


def test_latency_budget_while_a_first_or_urgent_segment_is_live() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=100, latency_batch_tokens=30, urgent_s=0.5, clock=clock)
    for i in range(5):
        s.add(f"bulk{i}", num_tokens=20, num_steps=5)
    plan, _ = run_step(s, clock)
    assert plan.budget == 100 and len(plan.batch) == 5  # bulk only: the full budget
    s.add("first", num_tokens=10, num_steps=2, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock)
    assert plan.budget == 30 and plan.batch == ("first", "bulk0")  # short steps until it is done
    plan, done = run_step(s, clock)
    assert plan.budget == 30 and done == ["first"]
    plan, _ = run_step(s, clock)
    assert plan.budget == 100
    # a stream segment counts once its deadline is within urgent_s
    s.add("stream", num_tokens=10, num_steps=5, priority=PRIORITY_STREAM, deadline_s=clock.now + 2.0)
    assert run_step(s, clock)[0].budget == 100
    clock.now += 1.6
    assert run_step(s, clock)[0].budget == 30


def test_latency_budget_never_leaves_waiting_first_segments_out() -> None:
    # Under load every HTTP request's only segment is a first segment: a fixed small budget would run 3 of
    # these 8 per step and let the rest queue; the step must hold them all (up to max_batch_tokens).
    clock = Clock()
    s = Scheduler(max_batch_tokens=1000, latency_batch_tokens=30, clock=clock)
    for i in range(8):
        s.add(f"req{i}", num_tokens=10, num_steps=3, priority=PRIORITY_FIRST)
    s.add("bulk", num_tokens=10, num_steps=3)
    plan, _ = run_step(s, clock)
    assert plan.budget == 80 and plan.batch == tuple(f"req{i}" for i in range(8))  # bulk still cut
    # ... but never past max_batch_tokens
    s2 = Scheduler(max_batch_tokens=50, latency_batch_tokens=30, clock=clock)
    for i in range(8):
        s2.add(f"req{i}", num_tokens=10, num_steps=3, priority=PRIORITY_FIRST)
    plan, _ = run_step(s2, clock)
    assert plan.budget == 50 and len(plan.batch) == 5


def test_backlog_of_first_segments_drains_at_full_throughput() -> None:
    # 40 first segments arrive at once (10 tokens, 4 steps each); with the latency budget (30) in force for
    # every step they would need ~54 steps; with urgent work filling the step up to the full budget (200) it
    # takes 4 × ceil(400 / 200) = 8 steps.
    clock = Clock()
    s = Scheduler(max_batch_tokens=200, latency_batch_tokens=30, clock=clock)
    for i in range(40):
        s.add(f"r{i}", num_tokens=10, num_steps=4, priority=PRIORITY_FIRST)
    steps = 0
    while len(s):
        run_step(s, clock)
        steps += 1
    assert steps == 8


def test_new_items_join_together_at_most_once_per_admit_interval() -> None:
    clock = Clock()
    s = Scheduler(max_batch_tokens=1000, admit_interval_s=0.05, clock=clock)
    s.add("a", num_tokens=10, num_steps=20, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock, dt=0.01)
    assert plan.started == ("a",), "nothing running: a new item starts at once"
    s.add("b", num_tokens=10, num_steps=20, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock, dt=0.01)
    assert plan.batch == ("a",), "the batch keeps its composition (the runner replays without re-packing)"
    s.add("c", num_tokens=10, num_steps=20, priority=PRIORITY_FIRST)
    batches = [run_step(s, clock, dt=0.01)[0].batch for _ in range(4)]
    # t = 0.02, 0.03, 0.04 wait; at 0.05 b and c join in one step
    assert batches == [("a",), ("a",), ("a",), ("a", "b", "c")]
    assert s.queue_s("b") == pytest.approx(0.04) and s.queue_s("c") == pytest.approx(0.03)
    # with the interval off (default) a new item joins at the next step
    s0 = Scheduler(max_batch_tokens=1000, clock=clock)
    s0.add("a", num_tokens=10, num_steps=5)
    run_step(s0, clock)
    s0.add("b", num_tokens=10, num_steps=5)
    assert run_step(s0, clock)[0].started == ("b",)
    with pytest.raises(ValueError, match="admit_interval_s"):
        Scheduler(max_batch_tokens=10, admit_interval_s=-1.0)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_batch_tokens"):
        Scheduler(max_batch_tokens=0)
    s = Scheduler(max_batch_tokens=10)
    s.add("a", num_tokens=1, num_steps=1)
    with pytest.raises(ValueError, match="already scheduled"):
        s.add("a", num_tokens=1, num_steps=1)
    with pytest.raises(ValueError, match="num_tokens"):
        s.add("b", num_tokens=0, num_steps=1)


class SchedulerMachine(RuleBasedStateMachine):
    """Random arrivals, cancels, steps and clock jumps; checks every plan against a shadow model."""

    BUDGET = 64
    LATENCY_BUDGET = 24
    MAX_WAIT_S = 1.0

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.s = Scheduler(max_batch_tokens=self.BUDGET, latency_batch_tokens=self.LATENCY_BUDGET, urgent_s=1.0,
                           max_batch_items=8, max_wait_s=self.MAX_WAIT_S, clock=self.clock)
        self.live: dict[str, dict[str, float | int | None]] = {}
        self.steps: dict[str, int] = {}
        self.cancelled: set[str] = set()
        self.finished: set[str] = set()
        self.pending_cancel: set[str] = set()
        self.n = 0

    @rule(tokens=st.integers(1, 100), steps=st.integers(1, 6), priority=st.sampled_from([0, 1, 2]),
          deadline=st.none() | st.floats(0, 10))
    def add(self, tokens: int, steps: int, priority: int, deadline: float | None) -> None:
        self.n += 1
        rid = f"r{self.n}"
        dl = None if deadline is None else self.clock.now + deadline
        self.s.add(rid, num_tokens=tokens, num_steps=steps, priority=priority, deadline_s=dl)
        self.live[rid] = {"tokens": tokens, "steps": steps, "priority": priority, "deadline": dl,
                          "last": self.clock.now}
        self.steps[rid] = 0

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.live)))
        assert self.s.cancel(rid)
        del self.live[rid]
        self.cancelled.add(rid)
        self.pending_cancel.add(rid)

    @rule(dt=st.floats(0.001, 0.6))
    def step(self, dt: float) -> None:
        now = self.clock.now
        plan = self.s.schedule()
        assert set(plan.cancelled) == self.pending_cancel
        self.pending_cancel.clear()
        batch = list(plan.batch)
        assert len(batch) == len(set(batch)) <= 8
        assert set(batch) <= set(self.live), "cancelled or finished item scheduled"
        tokens = sum(int(self.live[r]["tokens"] or 0) for r in batch)
        assert tokens == plan.num_tokens
        urgent_tokens = 0
        for v in self.live.values():
            deadline = v["deadline"]
            if v["priority"] == 0 or (v["priority"] == 1 and deadline is not None and deadline - now <= 1.0):
                urgent_tokens += int(v["tokens"] or 0)
        # the latency budget never holds urgent work back (up to the full budget)
        budget = min(self.BUDGET, max(self.LATENCY_BUDGET, urgent_tokens)) if urgent_tokens else self.BUDGET
        assert plan.budget == budget
        assert tokens <= budget or len(batch) == 1, "budget exceeded by a multi-item batch"
        assert bool(batch) == bool(self.live), "idle step while work was waiting"
        assert set(plan.started) == {r for r in batch if self.steps[r] == 0}
        # greedy by priority: a skipped item that is not aged and of a strictly better class than some
        # batched item must not have fit
        aged = {r for r, v in self.live.items() if now - float(v["last"]) > self.MAX_WAIT_S}  # type: ignore[arg-type]
        if aged:  # no starvation: the longest-unserved aged item always runs
            oldest = min(aged, key=lambda r: (float(self.live[r]["last"]), int(r[1:])))  # type: ignore[arg-type]
            assert oldest in batch
        if len(batch) < 8:
            for r, v in self.live.items():
                if r in batch or aged:
                    continue
                worse = [b for b in batch if int(self.live[b]["priority"]) > int(v["priority"])]  # type: ignore[arg-type]
                if worse:
                    assert tokens + int(v["tokens"]) > budget, f"{r} skipped though it fit"  # type: ignore[arg-type]
        for r in batch:
            self.live[r]["last"] = now
        self.clock.now += dt
        done = self.s.complete_step(plan)
        for r in batch:
            self.steps[r] += 1
        expect_done = {r for r in batch if self.steps[r] == self.live[r]["steps"]}
        assert set(done) == expect_done
        for r in done:
            del self.live[r]
            self.finished.add(r)

    @invariant()
    def counts(self) -> None:
        assert len(self.s) == len(self.live)
        assert not (self.finished & self.cancelled)

    def teardown(self) -> None:
        # drain with no new arrivals: everything left finishes, each after exactly num_steps steps
        for _ in range(10_000):
            if not self.live:
                break
            self.step(0.1)
        assert not self.live
        for r in self.finished:
            assert r not in self.cancelled


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.one_of(st.tuples(st.just("add"), st.integers(1, 5), st.sampled_from([0, 1, 2])),
                              st.tuples(st.just("step"), st.floats(0.001, 0.04), st.just(0))), max_size=60))
def test_admission_interval_property(ops: list[tuple[str, float, int]]) -> None:
    """With an admission interval and room for everything: while items run, new ones start only once the
    interval since the last start has passed, and then all of them together; with nothing running, at once."""
    interval = 0.05
    clock = Clock()
    s = Scheduler(max_batch_tokens=10_000, admit_interval_s=interval, max_wait_s=1e9, clock=clock)
    waiting: set[str] = set()
    running: set[str] = set()
    last_start = -math.inf
    for i, (op, arg, priority) in enumerate(ops):
        if op == "add":
            s.add(f"r{i}", num_tokens=1, num_steps=int(arg), priority=priority)
            waiting.add(f"r{i}")
            continue
        now = clock.now
        plan = s.schedule()
        assert bool(plan.batch) == bool(waiting or running), "idle while work was live"
        assert running <= set(plan.batch), "a running item was left out with room to spare"
        if not running or now - last_start >= interval:
            assert set(plan.started) == waiting, "everything waiting joins together"
        else:
            assert not plan.started, "joined before the interval passed"
        if plan.started:
            last_start = now
        running |= set(plan.started)
        waiting -= set(plan.started)
        clock.now += arg
        running -= set(s.complete_step(plan))
