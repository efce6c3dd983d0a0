"""The capacity bound (bench/omnivoice_capacity_bound.py): the processor-demand test over windows, turns left out
for a quantile target, the agents' jobs as the serving bench starts them, and the card's rates from a cost file."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "bench"))  # appended: see test_sched_sim_costs.py

from omnivoice_capacity_bound import Jobs, first_turns, peak_need, rates  # bench/ is put on the path above
from omnivoice_costs import load_costs


def jobs(*rows: tuple[float, float, float, int]) -> Jobs:
    r, d, w, t = (np.array(col) for col in zip(*rows, strict=True))
    return Jobs(r, d, w.astype(float), t, audio_s=1.0)


def test_peak_need_is_the_densest_window() -> None:
    # [0, 1] holds 100 + 100 work: 200/s; [0.5, 1] holds only the second job: 100 / 0.5 = 200/s; [0.5, 3] adds the
    # third: 400 / 2.5 = 160/s; [2, 3] alone: 300/s, the densest
    need, r, d = peak_need(jobs((0.0, 1.0, 100, 0), (0.5, 1.0, 100, 1), (2.0, 3.0, 300, 2)))
    assert need == pytest.approx(300.0)
    assert (r, d) == (2.0, 3.0)


def test_work_released_before_a_window_does_not_count_in_it() -> None:
    # the big job is released at 0 and due at 10: only the whole [0, 10] window holds it
    need, r, d = peak_need(jobs((0.0, 10.0, 1000, 0), (5.0, 6.0, 50, 1)))
    assert need == pytest.approx(max(1050 / 10, 50 / 1))
    assert (r, d) == (0.0, 10.0)


def test_late_turns_leave_out_the_turns_with_the_most_work_in_the_window() -> None:
    rows = ((0.0, 1.0, 400, 0), (0.0, 1.0, 100, 1), (0.2, 1.0, 100, 1), (0.0, 1.0, 50, 2))
    assert peak_need(jobs(*rows))[0] == pytest.approx(650.0)
    assert peak_need(jobs(*rows), late_turns=1)[0] == pytest.approx(250.0)  # turn 0 (400) left out
    assert peak_need(jobs(*rows), late_turns=2)[0] == pytest.approx(50.0)  # and turn 1 (200)


def test_first_turns_follow_the_bench_and_continuity_adds_the_prompt() -> None:
    off = first_turns(10, continuity=False, first_audio_s=0.3)
    on = first_turns(10, continuity=True, first_audio_s=0.3)
    assert np.array_equal(off.release, on.release) and np.array_equal(off.due, on.due)
    assert off.audio_s == pytest.approx(on.audio_s) and off.audio_s > 0
    assert sorted(set(off.turn.tolist())) == list(range(10))
    firsts = np.flatnonzero(np.r_[True, np.diff(off.turn) != 0])  # each turn's first segment
    assert np.array_equal(off.work[firsts], on.work[firsts])  # the first segment carries no prompt
    later = np.setdiff1d(np.arange(len(off.work)), firsts)
    assert (on.work[later] > off.work[later]).all()  # every later one carries the first's codes and text
    assert (off.release <= off.due).all()
    # a later first audio moves every deadline by the same amount, releases stay
    late = first_turns(10, continuity=False, first_audio_s=1.0)
    assert np.allclose(late.due - off.due, 0.7) and np.array_equal(late.release, off.release)


def test_rates_come_from_the_cost_files_staircase() -> None:
    model = load_costs(REPO / "bench" / "results" / "h200_costs.json")
    card = rates(model.step.bucket_ms, 4096)
    per = {t: 1000.0 * t / ms for t, ms in model.step.bucket_ms}
    assert card["best bucket <= 4096"] == pytest.approx(max(v for t, v in per.items() if t <= 4096))
    assert card["best bucket of all"] == pytest.approx(max(per.values()))
    assert card["best bucket of all"] >= card["best bucket <= 4096"]
    assert card["2048 bucket"] == pytest.approx(per[2048])
