"""Load-adaptive steps without a GPU: the full count while the card carries it, fewer only when deadlines in
flight or the sustained demand say it could not, never below the floor; a fake clock drives time."""

from __future__ import annotations

import pytest

from realtime_tts.gpu_worker.steps import BULK_TARGET_S, DELIVERY_S, FIRST_TARGET_S, StepChooser, Work, due_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CAPACITY = 1_000_000.0  # token-steps per second (an H200-sized card: 4096 tokens in ~4 ms)


def chooser(clock: Clock, **kw: object) -> StepChooser:
    return StepChooser(num_step=32, min_num_step=16, clock=clock, **kw)  # type: ignore[arg-type]


def arrive(c: StepChooser, clock: Clock, tokens: int, live: list[Work] | None = None,
           due_in_s: float = FIRST_TARGET_S, capacity: float | None = CAPACITY) -> int:
    n = c.choose(tokens, clock.now + due_in_s, live or [], capacity)
    c.admitted(tokens, n, chosen=True)
    return n


def test_full_count_while_the_card_has_room_and_while_nothing_is_measured() -> None:
    clock = Clock()
    c = chooser(clock)
    assert arrive(c, clock, 400, capacity=None) == 32  # a cold worker: nothing to judge by
    for _ in range(50):  # 50 segments of 400 tokens over 5 s: 0.13 M token-steps/s of 1 M
        clock.now += 0.1
        assert arrive(c, clock, 400) == 32


def test_off_when_the_floor_is_the_count() -> None:
    clock = Clock()
    c = StepChooser(num_step=32, min_num_step=32, clock=clock)
    assert not c.adaptive
    assert c.choose(4000, clock.now, [Work(clock.now, 10**9)], CAPACITY) == 32


def test_sustained_demand_past_headroom_scales_steps_down_and_holds_steady() -> None:
    clock = Clock()
    c = chooser(clock, headroom=0.9, window_s=3.0)
    # 1.35 M token-steps/s at the full count (a segment of 422 tokens every 10 ms) against 0.9 M allowed
    counts = []
    for _ in range(1500):
        clock.now += 0.01
        counts.append(arrive(c, clock, 422, due_in_s=5.0))
    steady = counts[-300:]
    # demand is counted at the full count, so the choice settles instead of swinging back up as steps fall
    assert max(steady) - min(steady) <= 1, sorted(set(steady))
    assert steady[-1] == 21  # 32 × 0.9 / 1.35 = 21.3
    # the work admitted per second is then within the headroom
    assert 422 * steady[-1] * 100 <= 0.9 * CAPACITY


def test_never_below_the_floor() -> None:
    clock = Clock()
    c = chooser(clock)
    for _ in range(600):
        clock.now += 0.005
        n = arrive(c, clock, 2000, due_in_s=5.0)  # 12.8 M token-steps/s: 14× the card
    assert n == 16


def test_the_demand_window_forgets_a_burst() -> None:
    clock = Clock()
    c = chooser(clock, window_s=3.0)
    for _ in range(400):
        clock.now += 0.005
        arrive(c, clock, 1000, due_in_s=5.0)
    assert arrive(c, clock, 1000, due_in_s=5.0) == 16
    clock.now += 20.0  # quiet for ~7 windows
    assert arrive(c, clock, 1000, due_in_s=5.0) == 32


def test_work_due_first_leaves_the_new_segment_fewer_steps() -> None:
    clock = Clock()
    c = chooser(clock)
    now = clock.now
    # 250 k token-steps due before the new first segment (due in 0.3 s): 50 k token-steps of room left, 2000
    # tokens per step → 25 steps; with the work due after it instead, the full count
    ahead = [Work(now + 0.2, 250_000)]
    assert c.choose(2000, now + 0.3, ahead, CAPACITY) == 25
    assert c.choose(2000, now + 0.3, [Work(now + 2.0, 250_000)], CAPACITY) == 32
    # so much due first that not even the floor fits: the floor (overload is admission's to refuse)
    assert c.choose(2000, now + 0.3, [Work(now + 0.2, 400_000)], CAPACITY) == 16


def test_a_later_segment_the_new_one_would_make_late_limits_it() -> None:
    clock = Clock()
    c = chooser(clock)
    now = clock.now
    # due after the new one, 280 k token-steps by now + 0.3 s of 300 k: the new one (1000 tokens) may add 20 k
    later = [Work(now + 0.3, 280_000)]
    assert c.choose(1000, now + 0.1, later, CAPACITY) == 20
    # one that is late whatever the new segment does is no reason to cut it
    assert c.choose(1000, now + 0.1, [Work(now + 0.3, 900_000)], CAPACITY) == 32


def test_due_time_by_class_and_deadline() -> None:
    assert due_s(0, None, 10.0) == 10.0 + FIRST_TARGET_S
    assert due_s(2, None, 10.0) == 10.0 + BULK_TARGET_S
    assert due_s(1, 12.5, 10.0) == 12.5 - DELIVERY_S


@pytest.mark.parametrize("kw", [{"min_num_step": 0}, {"min_num_step": 40}, {"headroom": 0.0}, {"window_s": 0.0}])
def test_bad_settings_are_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StepChooser(**{"num_step": 32, "min_num_step": 16, **kw})  # type: ignore[arg-type]
