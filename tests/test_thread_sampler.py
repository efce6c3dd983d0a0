"""thread_sampler.StackSampler: it attributes a thread's wall time to the line it is at, per thread, and only
for the threads asked for."""

from __future__ import annotations

import threading
import time

import pytest

from realtime_tts.thread_sampler import StackSampler


def _sleeper(stop: threading.Event) -> None:
    while not stop.is_set():
        time.sleep(0.001)  # blocked in a C call: sampled on this function's line


def _spinner(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        x += 1


def test_samples_named_threads_and_attributes_their_lines() -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=_sleeper, args=(stop,), name="sleepy"),
               threading.Thread(target=_spinner, args=(stop,), name="busy"),
               threading.Thread(target=_sleeper, args=(stop,), name="ignored")]
    for t in threads:
        t.start()
    sampler = StackSampler(want=lambda name: name in ("sleepy", "busy"), period_s=0.001)
    sampler.start()
    time.sleep(0.5)
    report = sampler.stop()
    stop.set()
    for t in threads:
        t.join()
    assert set(sampler.counts) == {"sleepy", "busy"}
    sleepy, busy = sampler.counts["sleepy"], sampler.counts["busy"]
    assert sleepy.samples > 50 and busy.samples > 50
    # every sample of each thread has its own function on the stack, and none of the other's
    assert sleepy.total_counts["test_thread_sampler.py _sleeper"] == sleepy.samples
    assert "test_thread_sampler.py _spinner" not in sleepy.total_counts
    assert busy.total_counts["test_thread_sampler.py _spinner"] == busy.samples
    top_sleepy = max(sleepy.self_counts.items(), key=lambda kv: kv[1])[0]
    assert top_sleepy.startswith("test_thread_sampler.py:") and top_sleepy.endswith(" _sleeper")
    assert "## thread sleepy" in report and "## thread busy" in report and "ignored" not in report


def test_one_thread_by_id() -> None:
    stop = threading.Event()
    t = threading.Thread(target=_sleeper, args=(stop,))
    t.start()
    assert t.ident is not None
    sampler = StackSampler(thread_id=t.ident, period_s=0.001)
    sampler.start()
    time.sleep(0.2)
    sampler.stop()
    stop.set()
    t.join()
    assert list(sampler.counts) == ["loop"] and sampler.counts["loop"].samples > 20


def test_needs_exactly_one_selector() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        StackSampler()
    with pytest.raises(ValueError, match="exactly one"):
        StackSampler(thread_id=1, want=lambda _: True)
