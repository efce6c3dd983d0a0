"""Load-adaptive steps without a GPU: the full count while the card meets every deadline in flight, a uniform
cut only when it otherwise could not, never below the floor; a fake clock drives time."""

from __future__ import annotations

import pytest

from realtime_tts.gpu_worker.steps import BULK_TARGET_S, DELIVERY_S, FIRST_TARGET_S, StepChooser, Work, due_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CAPACITY = 1_000_000.0  # token-steps per second (an H200-sized card: 4096 tokens in ~4 ms)


def chooser(clock: Clock, **kw: float) -> StepChooser:
    return StepChooser(num_step=32, min_num_step=16, headroom=1.0, clock=clock, **kw)  # type: ignore[arg-type]


def waiting(clock: Clock, due_in_s: float, tokens: int, n: int = 1) -> list[Work]:
    return [Work(clock.now + due_in_s, tokens, 32, True) for _ in range(n)]


def test_full_count_while_every_deadline_is_met_and_while_nothing_is_measured() -> None:
    clock = Clock()
    c = chooser(clock)
    # 30 first segments of 300 tokens due in 0.3 s: 288 k token-steps at 32 steps, 300 k of room
    assert c.level(waiting(clock, 0.3, 300, 30), CAPACITY) == 32
    assert c.level(waiting(clock, 0.3, 300, 3000), None) == 32  # a cold worker: nothing to judge by


def test_off_when_the_floor_is_the_count() -> None:
    clock = Clock()
    c = StepChooser(num_step=32, min_num_step=32, clock=clock)
    assert not c.adaptive
    assert c.level(waiting(clock, 0.1, 4000, 100), CAPACITY) == 32


def test_more_work_than_the_deadlines_allow_cuts_every_adjustable_segment_alike() -> None:
    clock = Clock()
    c = chooser(clock)
    # 50 segments of 300 tokens due in 0.3 s: 480 k token-steps at 32 steps, 300 k of room → 20 steps
    assert c.level(waiting(clock, 0.3, 300, 50), CAPACITY) == 20
    # the same work due later fits
    assert c.level(waiting(clock, 0.6, 300, 50), CAPACITY) == 32


def test_started_work_is_fixed_and_counts_first() -> None:
    clock = Clock()
    c = chooser(clock)
    started = [Work(clock.now + 0.2, 2000, 50, False)]  # 100 k token-steps that will run whatever we choose
    # 30 waiting segments of 300 tokens due in 0.3 s: 200 k of room left for 288 k at 32 → 22 steps
    assert c.level(started + waiting(clock, 0.3, 300, 30), CAPACITY) == 22
    # a named num_step is fixed work too: 240 k token-steps due in 0.25 s leave 60 k by 0.3 s for 96 k at 32
    named = [Work(clock.now + 0.25, 300, 32, False) for _ in range(25)]
    assert c.level(named + waiting(clock, 0.3, 300, 10), CAPACITY) == 20


def test_never_below_the_floor_and_a_deadline_already_past_is_no_constraint() -> None:
    clock = Clock()
    c = chooser(clock)
    assert c.level(waiting(clock, 0.3, 2000, 500), CAPACITY) == 16  # 14× the card: the floor
    # one segment already late (its due time passed): no reason to cut the rest, which all fit
    late = [Work(clock.now - 0.05, 300, 32, True)]
    assert c.level(late + waiting(clock, 2.0, 300, 10), CAPACITY) == 32


def test_later_deadlines_see_the_earlier_work() -> None:
    clock = Clock()
    c = chooser(clock)
    # each group alone fits by its own due time; together the second group's due time is the binding one:
    # 20 × 300 × 32 (due 0.2 s) + 40 × 300 × 32 (due 0.5 s) = 576 k token-steps by 0.5 s, 500 k of room
    work = waiting(clock, 0.2, 300, 20) + waiting(clock, 0.5, 300, 40)
    assert c.level(work, CAPACITY) == 27  # 32 × 500 / 576 = 27.8


def test_headroom_keeps_a_share_of_the_card_free() -> None:
    clock = Clock()
    c = StepChooser(num_step=32, min_num_step=16, headroom=0.8, clock=clock)
    assert c.level(waiting(clock, 0.3, 300, 30), CAPACITY) == 26  # 240 k of room for 288 k


def test_due_time_by_class_and_deadline() -> None:
    assert due_s(0, None, 10.0) == 10.0 + FIRST_TARGET_S
    assert due_s(2, None, 10.0) == 10.0 + BULK_TARGET_S
    assert due_s(1, 12.5, 10.0) == 12.5 - DELIVERY_S


@pytest.mark.parametrize("kw", [{"min_num_step": 0}, {"min_num_step": 40}, {"headroom": 0.0}, {"headroom": 1.5}])
def test_bad_settings_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StepChooser(**{"num_step": 32, "min_num_step": 16, **kw})  # type: ignore[arg-type]
