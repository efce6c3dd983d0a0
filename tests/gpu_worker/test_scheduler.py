"""The step scheduler without a GPU: continuous batching, token budget, priority, cancellation, no starvation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from realtime_tts.engine.base import PRIORITY_BULK, PRIORITY_FIRST, PRIORITY_STREAM
from realtime_tts.gpu_worker.scheduler import Scheduler, StepPlan, StepTimeModel


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


def test_latency_budget_is_raised_to_the_top_of_its_token_bucket() -> None:
    # The runner's steps cost their token bucket: a 35-token budget runs in the 40-token bucket anyway, so the
    # class policy fills those 5 tokens with later work (and never past max_batch_tokens).
    clock = Clock()
    s = Scheduler(max_batch_tokens=60, latency_batch_tokens=30, token_buckets=(20, 40, 80), clock=clock)
    s.add("first", num_tokens=35, num_steps=3, priority=PRIORITY_FIRST)
    for i in range(3):
        s.add(f"bulk{i}", num_tokens=5, num_steps=3)
    plan, _ = run_step(s, clock)
    assert plan.budget == 40 and plan.batch == ("first", "bulk0") and plan.num_tokens == 40
    s.cancel("first")
    plan, _ = run_step(s, clock)
    assert plan.budget == 60  # the full budget (inside the 80 bucket: capped at max_batch_tokens)
    # without buckets, as before: the budget is the urgent work's
    s2 = Scheduler(max_batch_tokens=60, latency_batch_tokens=30, clock=clock)
    s2.add("first", num_tokens=35, num_steps=3, priority=PRIORITY_FIRST)
    s2.add("bulk", num_tokens=5, num_steps=3)
    plan, _ = run_step(s2, clock)
    assert plan.budget == 35 and plan.batch == ("first",)
    with pytest.raises(ValueError, match="token_buckets"):
        Scheduler(max_batch_tokens=60, token_buckets=(40, 20))


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
    STEP_MODEL: tuple[tuple[int, float], ...] | None = None  # None: the class policy's checks

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.s = Scheduler(max_batch_tokens=self.BUDGET, latency_batch_tokens=self.LATENCY_BUDGET, urgent_s=1.0,
                           max_batch_items=8, max_wait_s=self.MAX_WAIT_S, step_model=self.STEP_MODEL,
                           first_deadline_s=0.3, stream_deadline_s=1.0, bulk_deadline_s=3.0, clock=self.clock)
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
        if self.STEP_MODEL is None:
            # the latency budget never holds urgent work back (up to the full budget)
            budget = min(self.BUDGET, max(self.LATENCY_BUDGET, urgent_tokens)) if urgent_tokens else self.BUDGET
            assert plan.budget == budget
        else:
            assert 1 <= plan.budget <= self.BUDGET
        budget = plan.budget
        assert tokens <= budget or len(batch) == 1, "budget exceeded by a multi-item batch"
        assert bool(batch) == bool(self.live), "idle step while work was waiting"
        assert set(plan.started) == {r for r in batch if self.steps[r] == 0}
        # greedy by priority: a skipped item that is not aged and of a strictly better class than some
        # batched item must not have fit
        aged = {r for r, v in self.live.items() if now - float(v["last"]) > self.MAX_WAIT_S}  # type: ignore[arg-type]
        if aged:  # no starvation: the longest-unserved aged item always runs
            oldest = min(aged, key=lambda r: (float(self.live[r]["last"]), int(r[1:])))  # type: ignore[arg-type]
            assert oldest in batch
        if len(batch) < 8 and self.STEP_MODEL is None:
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


class DeadlineMachine(SchedulerMachine):
    """The same random runs under the deadline policy: nothing starves, cancelled never runs, every item runs
    exactly num_steps steps, the budget holds except for a lone oversized head, never idle with work live."""

    STEP_MODEL = ((0, 0.002), (32, 0.004), (64, 0.008))


TestDeadlineMachine = DeadlineMachine.TestCase
TestDeadlineMachine.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)


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


# --- deadline policy ----------------------------------------------------------------------------------------

# 1 ms per step plus 1 ms per 100 tokens (a smooth model keeps the arithmetic of these tests readable)
LINEAR = ((0, 0.001), (1000, 0.011))


def test_step_time_model_interpolates_extends_and_inverts() -> None:
    m = StepTimeModel(LINEAR)
    assert m(0) == pytest.approx(0.001) and m(500) == pytest.approx(0.006) and m(2000) == pytest.approx(0.021)
    assert m.max_tokens_within(0.006) == 500 and m.max_tokens_within(0.0005) == 0
    assert m.max_tokens_within(0.021) == pytest.approx(2000, abs=1)
    stairs = StepTimeModel(((0, 0.002), (255, 0.002), (256, 0.005), (511, 0.005)))
    assert stairs.max_tokens_within(0.004) == 255 and stairs.max_tokens_within(0.005) == 511
    for bad in [((0, 0.001),), ((10, 0.001), (5, 0.002)), ((0, 0.002), (10, 0.001)), ((0, 0.0), (10, 0.001))]:
        with pytest.raises(ValueError, match="step_model"):
            StepTimeModel(bad)
    with pytest.raises(ValueError, match="urgency"):
        Scheduler(max_batch_tokens=10, step_model=LINEAR, urgency=0)


def test_budget_is_what_the_first_segments_deadline_allows() -> None:
    # A first segment of 32 steps must end within 0.25 s: ≤ 7.8 ms per step → ≤ 681 tokens by the model.
    # Bulk with seconds of slack only fills up to that; the class policy used a fixed latency budget instead.
    clock = Clock()
    s = Scheduler(max_batch_tokens=5000, latency_batch_tokens=4000, step_model=LINEAR, first_deadline_s=0.25,
                  clock=clock)
    for i in range(20):
        s.add(f"bulk{i}", num_tokens=100, num_steps=32, priority=PRIORITY_BULK)
    plan, _ = run_step(s, clock)
    assert len(plan.batch) == 20, "bulk alone: nothing is due soon, the step holds everything"
    s.add("first", num_tokens=100, num_steps=32, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock, dt=0.0075)
    assert plan.batch[0] == "first" and plan.budget == 681 and plan.num_tokens == 600
    while "first" in s:
        plan, _ = run_step(s, clock, dt=StepTimeModel(LINEAR)(plan.num_tokens))
    assert clock.now - 100.0 - 0.01 <= 0.25 + 1e-9  # it made its deadline (0.01: the bulk-only step)


def test_a_stream_about_to_run_dry_beats_a_fresh_first_segment() -> None:
    # Room for one item per step. The class policy always runs the first segment first; the stream segment's
    # playback runs dry in 0.2 s and its 16 steps take 0.176 s, while the first segment has 0.5 s.
    clock = Clock()
    s = Scheduler(max_batch_tokens=100, step_model=LINEAR, first_deadline_s=0.5, deadline_margin_s=0.0,
                  clock=clock)
    s.add("first", num_tokens=100, num_steps=16, priority=PRIORITY_FIRST)
    s.add("stream", num_tokens=100, num_steps=16, priority=PRIORITY_STREAM, deadline_s=clock.now + 0.2)
    order = [run_step(s, clock, dt=0.011)[0].batch for _ in range(32)]
    assert order[:16] == [("stream",)] * 16 and order[16:] == [("first",)] * 16


def test_overload_holds_every_urgent_item_beyond_the_deadline_budget() -> None:
    # 40 first segments at once, each 32 steps: short steps (the deadline's budget) would run a few at a time
    # and leave the rest waiting; urgent work all runs together, up to max_batch_tokens.
    clock = Clock()
    s = Scheduler(max_batch_tokens=10_000, step_model=LINEAR, first_deadline_s=0.25, clock=clock)
    for i in range(40):
        s.add(f"r{i}", num_tokens=100, num_steps=32, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock)
    assert len(plan.batch) == 40 and plan.budget >= 4000


def test_a_nearly_late_item_does_not_shrink_every_step() -> None:
    # One item 1 step from its deadline wants a ~2 ms step; the 30 first segments behind it are urgent (judged
    # against a busy step, not that tiny one) and run with it: throughput does not collapse to one item.
    clock = Clock()
    s = Scheduler(max_batch_tokens=10_000, latency_batch_tokens=1000, step_model=LINEAR, first_deadline_s=0.3,
                  deadline_margin_s=0.0, clock=clock)
    s.add("late", num_tokens=100, num_steps=1, priority=PRIORITY_STREAM, deadline_s=clock.now + 0.0025)
    for i in range(30):
        s.add(f"r{i}", num_tokens=100, num_steps=32, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock)
    assert "late" in plan.batch and len(plan.batch) == 31


@pytest.mark.parametrize("policy", ["class", "deadline"])
def test_backlog_of_first_segments_drains_at_full_throughput(policy: str) -> None:
    # 40 first segments arrive at once (10 tokens, 4 steps each); with the latency budget (30) in force for
    # every step they would need ~54 steps; with urgent work filling the step up to the full budget (200) it
    # takes 4 × ceil(400 / 200) = 8 steps.
    clock = Clock()
    s = Scheduler(max_batch_tokens=200, latency_batch_tokens=30, step_model=LINEAR if policy == "deadline" else None,
                  clock=clock)
    for i in range(40):
        s.add(f"r{i}", num_tokens=10, num_steps=4, priority=PRIORITY_FIRST)
    steps = 0
    while len(s):
        run_step(s, clock)
        steps += 1
    assert steps == 8


def test_min_tokens_for_rate() -> None:
    m = StepTimeModel(LINEAR)  # x tokens take 1 ms + x/100 ms: x / t rises towards 100k tokens/s
    assert m.min_tokens_for_rate(50_000, 5000) == 100  # 100 tokens in 2 ms
    assert m.min_tokens_for_rate(90_000, 5000) == 900  # 900 tokens in 10 ms
    assert m.min_tokens_for_rate(99_000, 5000) == 5000  # out of reach below the cap: the cap
    for r in (1_000, 20_000, 75_000, 95_000):
        b = m.min_tokens_for_rate(r, 50_000)
        assert b / m(b) >= r * (1 - 1e-9) and (b == 1 or (b - 1) / m(b - 1) < r)


def test_demand_budget_runs_slack_rich_work_early_enough() -> None:
    # 30 items of 100 tokens × 20 steps, all due in 0.3 s: 60k token-steps in 0.3 s is more than this device
    # can carry (< 100k tokens/s), so the demand budget holds all 30 in every step (the cap). Without it, τ
    # (0.3 s / 20 steps = 15 ms → 1400 tokens) runs 14 and the rest wait: none is urgent yet against a busy
    # step of 200 tokens (20 × 3 ms ≪ 0.3 s).
    clock = Clock()
    without, with_demand = (Scheduler(max_batch_tokens=10_000, latency_batch_tokens=200, step_model=LINEAR,
                                      deadline_margin_s=0.0, demand_budget=d, clock=clock) for d in (False, True))
    for s in (without, with_demand):
        for i in range(30):
            s.add(f"r{i}", num_tokens=100, num_steps=20, priority=PRIORITY_STREAM, deadline_s=clock.now + 0.3)
    assert len(with_demand.schedule().batch) == 30
    assert len(without.schedule().batch) < 30


def test_a_full_lower_bucket_beats_a_barely_used_higher_one() -> None:
    # A staircase model (a step costs its CUDA-graph bucket): 11 urgent items of 100 tokens. All 11 need the
    # 2048 bucket (4 ms: 275k tokens/s); 10 fill the 1024 bucket (2 ms: 500k tokens/s). The step takes 10 and
    # the one left out runs first in the next step, so no item falls behind for long.
    stairs = ((0, 0.002), (1023, 0.002), (1024, 0.004), (2047, 0.004), (2048, 0.008), (4095, 0.008))
    clock = Clock()
    s = Scheduler(max_batch_tokens=4000, step_model=stairs, first_deadline_s=0.01, clock=clock)
    for i in range(11):
        s.add(f"r{i}", num_tokens=100, num_steps=8, priority=PRIORITY_FIRST)
    plan, _ = run_step(s, clock, dt=0.002)
    assert len(plan.batch) == 10 and plan.num_tokens == 1000 and plan.budget == 1023
    left_out = ({f"r{i}" for i in range(11)} - set(plan.batch)).pop()
    plan, _ = run_step(s, clock, dt=0.002)
    assert left_out in plan.batch and len(plan.batch) == 10
    # a smooth model has no such step: all 11 run
    s2 = Scheduler(max_batch_tokens=4000, step_model=LINEAR, first_deadline_s=0.01, clock=clock)
    for i in range(11):
        s2.add(f"r{i}", num_tokens=100, num_steps=8, priority=PRIORITY_FIRST)
    assert len(s2.schedule().batch) == 11


def test_step_time_model_from_buckets() -> None:
    m = StepTimeModel.from_buckets([(256, 0.002), (512, 0.003), (1024, 0.005)], host_s=0.001)
    # a step of n tokens replays the smallest bucket holding n (runner.bucket_key)
    assert m(1) == m(256) == pytest.approx(0.003)
    assert m(257) == m(512) == pytest.approx(0.004)
    assert m(1024) == pytest.approx(0.006)
    assert m.max_tokens_within(0.0045) == 512 and m.max_tokens_within(0.0035) == 256
