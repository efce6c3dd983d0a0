"""The worker's step loop in-process over the real tiny model (no process plumbing): admission, duplicate and
bad requests, abort before and during generation, stats, shutdown; and the GPU warm-up path on CPU."""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

from realtime_tts.engine import ipc
from realtime_tts.gpu_worker.backend import ModelBackend
from realtime_tts.gpu_worker.loop import WorkerLoop, device_is_broken


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


gpu = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs CUDA")]


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda:0", marks=gpu)])
def backend(request: pytest.FixtureRequest, tiny_checkpoint: Path) -> ModelBackend:
    """The worker's backend on CPU (eager) and, where there is one, on CUDA (fused kernels + graphs, the codec's
    batched graphs up to 64 frames)."""
    options = ipc.WorkerOptions(worker_id=0, model_dir=str(tiny_checkpoint), device=request.param,
                                dtype="fp32", max_batch_tokens=4096, num_threads=1, policy="deadline",
                                codec_graph_frames=64)
    return ModelBackend(options)


class Harness:
    def __init__(self, backend: ModelBackend, policy: str = "class", num_step: int = 32,
                 min_num_step: int = 16) -> None:
        options = ipc.WorkerOptions(worker_id=3, model_dir="", device="cpu", dtype="fp32", max_batch_tokens=4096,
                                    stats_interval_s=0.05, policy=policy, num_step=num_step,
                                    min_num_step=min_num_step)
        self.inbox: queue.Queue[ipc.ToWorker] = queue.Queue()
        self.out: queue.Queue[ipc.FromWorker] = queue.Queue()
        self.loop = WorkerLoop(options, backend, self.inbox, self.out.put)
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()

    def until(self, pred: object, timeout: float = 60) -> list[ipc.FromWorker]:
        """Collect replies until one satisfies pred; → everything collected."""
        got: list[ipc.FromWorker] = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.out.get(timeout=max(0.01, deadline - time.monotonic()))
            got.append(message)
            if pred(message):  # type: ignore[operator]
                return got

    def close(self) -> None:
        self.inbox.put(ipc.Shutdown())
        self.thread.join(30)
        assert not self.thread.is_alive()


@pytest.fixture
def harness(backend: ModelBackend) -> Iterator[Harness]:
    h = Harness(backend)
    yield h
    h.close()


def test_loop_serves_refuses_and_aborts(harness: Harness) -> None:
    bad_prompt = ipc.Prompt("ref", b"\x00\x00" * 8 * 3, 8, 2, 0.1)  # 3 frames of bytes declared as 2
    for message in (
        ipc.Submit("a", "First request.", duration_s=0.8, num_step=6, seed=1),
        ipc.Submit("a", "Same id again.", duration_s=0.8, num_step=6),
        ipc.Submit("b", "Bad prompt.", mode="clone", prompt=bad_prompt),
        ipc.Abort("never-submitted"),
        ipc.Submit("c", "Aborted before it runs.", duration_s=4.0, num_step=32),
        ipc.Abort("c"),
        # The longest a segment may be: on an H200 a 64-step, 8 s one finished before the abort arrived (a's
        # audio waits for the codec, d's steps do not).
        ipc.Submit("d", "Aborted while it runs.", duration_s=20.0, num_step=256),
    ):
        harness.inbox.put(message)
    got = harness.until(lambda m: isinstance(m, ipc.Audio) and m.request_id == "a")
    harness.inbox.put(ipc.Abort("d"))
    got += harness.until(lambda m: isinstance(m, ipc.Failed) and m.request_id == "d")
    failed = {m.request_id: m for m in got if isinstance(m, ipc.Failed)}
    assert failed["a"].code == "bad_request" and failed["a"].field == "request_id"
    assert failed["b"].code == "bad_request" and failed["b"].field == "voice"
    assert failed["c"].code == "cancelled" and failed["d"].code == "cancelled"
    assert "never-submitted" not in failed
    (audio,) = [m for m in got if isinstance(m, ipc.Audio)]
    samples = np.frombuffer(audio.samples, "<f4")
    assert audio.encoding == "f32le" and audio.sample_rate == 24000 and audio.last
    assert samples.size == 20 * 960 and np.isfinite(samples).all()
    assert audio.gen_ms > 0 and audio.batch_size >= 1
    # the aborted segments left the scheduler; nothing is running any more
    got = harness.until(lambda m: isinstance(m, ipc.Stats) and m.num_running + m.num_waiting == 0)
    stats = [m for m in got if isinstance(m, ipc.Stats)][-1]
    assert stats.worker_id == 3 and stats.num_finished == 1 and stats.num_cancelled == 2


def test_an_aborted_id_can_be_reused_at_once(harness: Harness) -> None:
    for message in (ipc.Submit("e", "Long.", duration_s=8.0, num_step=32), ipc.Abort("e"),
                    ipc.Submit("e", "Short.", duration_s=0.4, num_step=2, seed=0)):
        harness.inbox.put(message)
    got = harness.until(lambda m: isinstance(m, ipc.Audio))
    replies = [(type(m).__name__, getattr(m, "code", None)) for m in got if not isinstance(m, ipc.Stats)]
    assert replies == [("Failed", "cancelled"), ("Audio", None)]
    assert len(got[-1].samples) == 10 * 960 * 4  # type: ignore[union-attr]


def test_a_segment_larger_than_a_step_is_a_bad_request(backend: ModelBackend) -> None:
    limit = backend.max_batch_tokens
    backend.max_batch_tokens = 200
    h = Harness(backend)
    try:
        h.inbox.put(ipc.Submit("huge", "Far too long for one step.", duration_s=20.0, num_step=4))
        h.inbox.put(ipc.Submit("fits", "Fine.", duration_s=0.4, num_step=2))
        got = h.until(lambda m: isinstance(m, ipc.Audio))
        (failed,) = [m for m in got if isinstance(m, ipc.Failed)]
        assert failed.request_id == "huge" and failed.code == "bad_request" and failed.field == "text"
        assert "200" in failed.message
    finally:
        h.close()
        backend.max_batch_tokens = limit


def test_stats_stop_while_idle(harness: Harness) -> None:
    def settled(m: object) -> bool:
        return isinstance(m, ipc.Stats) and m.num_finished == 1 and not m.num_running

    harness.inbox.put(ipc.Submit("x", "Quick one.", duration_s=0.4, num_step=2, seed=0))
    # The audio comes from the decode thread, so the loop's settled report may come before or after it.
    if not any(settled(m) for m in harness.until(lambda m: isinstance(m, ipc.Audio))):
        harness.until(settled)
    time.sleep(0.3)  # six report intervals of idleness
    assert harness.out.qsize() == 0, "an idle, unchanged worker keeps quiet"


def test_warm_up_path_runs(backend: ModelBackend) -> None:
    hits, misses = backend.counters()
    backend._warm_up()
    steps = sum(backend.counters()) - hits - misses
    if backend.device.startswith("cuda"):
        assert steps > 2  # two warm-up steps, then the step-time measurements (graphed)
    else:
        assert steps == 2  # two warm-up steps, eager


def test_random_arrivals_and_cancels_keep_the_invariants(backend: ModelBackend) -> None:
    """Every request gets exactly one terminal reply; audio has exactly 960 samples per frame; a seeded
    request gives the same audio whether it ran amid random traffic or alone."""
    rng = random.Random(1234)
    h = Harness(backend)
    try:
        sent: dict[str, ipc.Submit] = {}
        cancelled: set[str] = set()
        for i in range(24):
            submit = ipc.Submit(f"r{i}", f"Random request number {i}.", duration_s=rng.choice([0.4, 0.8, 1.6, 3.2]),
                                num_step=rng.choice([4, 8, 16]), seed=i, priority=rng.choice([0, 1, 2]))
            sent[submit.request_id] = submit
            h.inbox.put(submit)
            if rng.random() < 0.3:
                victim = rng.choice(sorted(sent))
                h.inbox.put(ipc.Abort(victim))
                cancelled.add(victim)
            time.sleep(rng.uniform(0.0, 0.05))

        def terminal(m: ipc.FromWorker) -> str | None:
            return m.request_id if isinstance(m, ipc.Audio | ipc.Failed) else None

        done: dict[str, list[ipc.FromWorker]] = {}
        deadline = time.monotonic() + 300
        while set(done) != set(sent):
            m = h.out.get(timeout=max(0.01, deadline - time.monotonic()))
            if (rid := terminal(m)) is not None:
                done.setdefault(rid, []).append(m)
        time.sleep(0.2)
        while not h.out.empty():
            m = h.out.get()
            if (rid := terminal(m)) is not None:
                done[rid].append(m)
        assert all(len(v) == 1 for v in done.values()), {k: v for k, v in done.items() if len(v) != 1}
        for rid, (m,) in done.items():
            if isinstance(m, ipc.Failed):
                assert m.code == "cancelled" and rid in cancelled, m
            else:
                assert np.frombuffer(m.samples, "<f4").size == round(sent[rid].duration_s * 25) * 960
        audios = {rid: m for rid, (m,) in done.items() if isinstance(m, ipc.Audio)}
        assert audios, "everything was cancelled: the test proves nothing"
        # the request that shared the most steps, again alone
        rid = max(audios, key=lambda r: audios[r].batch_size)
        assert audios[rid].batch_size > 1
        h.inbox.put(msgspec.structs.replace(sent[rid], request_id="alone"))
        (alone,) = [x for x in h.until(lambda x: isinstance(x, ipc.Audio)) if isinstance(x, ipc.Audio)]
        mixed, single = np.frombuffer(audios[rid].samples, "<f4"), np.frombuffer(alone.samples, "<f4")
        if backend.device == "cpu":
            np.testing.assert_array_equal(mixed, single)
        else:  # CUDA kernels may pick other reduction orders for other batch shapes: near, not bit-equal
            assert float(np.corrcoef(mixed, single)[0, 1]) > 0.99
    finally:
        h.close()


def test_device_faults_are_told_from_recoverable_errors() -> None:
    import torch

    class AcceleratorError(RuntimeError):  # torch's name for CUDA runtime faults
        pass

    assert device_is_broken(AcceleratorError("an illegal memory access was encountered"))
    assert device_is_broken(RuntimeError("CUDA error: device-side assert triggered"))
    assert not device_is_broken(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not device_is_broken(ValueError("bad shape"))


def test_busy_loop_logs_where_its_time_goes(backend: ModelBackend, caplog: pytest.LogCaptureFixture) -> None:
    h = Harness(backend)
    h.loop.activity_interval_s = 0.0  # a report at every idle check
    try:
        with caplog.at_level(logging.INFO, logger="realtime_tts.worker"):
            h.inbox.put(ipc.Submit("x", "Quick one.", duration_s=0.4, num_step=4, seed=0))
            h.until(lambda m: isinstance(m, ipc.Audio))
            time.sleep(0.2)
    finally:
        h.close()
    lines = [r.getMessage() for r in caplog.records if "steps/s" in r.getMessage()]
    assert lines, "no activity report"
    assert any(" 1.0 items" in line for line in lines) and any("decodes of 1 segments" in line for line in lines)
    assert any("1 codec calls of 1.0 items" in line for line in lines)


def test_deadline_policy_plans_with_measured_step_times(backend: ModelBackend) -> None:
    """On CUDA the warm-up times one step per token bucket and the loop's scheduler plans with them; on the
    CPU there is no measurement and the class policy runs."""
    assert Harness(backend).loop.scheduler.step_model is None  # the class policy never plans with them
    h = Harness(backend, policy="deadline")
    try:
        if backend.device.startswith("cuda"):
            points = backend.step_points
            assert points and [n for n, _ in points] == sorted(n for n, _ in points)
            assert all(s > 0 for _, s in points) and points[-1][1] > points[0][1]
            assert h.loop.scheduler.step_model is not None
        else:
            assert backend.step_points is None and h.loop.scheduler.step_model is None
    finally:
        h.close()


def test_step_time_model_tolerates_timing_noise() -> None:
    """Measured on the H200: a bucket timed faster than the one below it must not stop the worker."""
    from realtime_tts.gpu_worker.loop import step_time_model

    measured = [(1536, 0.00395), (1792, 0.00507), (2048, 0.00487), (2560, 0.0056)]
    model = step_time_model(measured)
    assert model is not None and model(2048) >= model(1792) and model(2560) > model(1536)
    assert step_time_model([(256, 0.002), (512, 0.002)]) is None  # flat: no model, the class policy runs


def test_segments_finished_while_the_codec_is_busy_decode_together(backend: ModelBackend) -> None:
    """The decode thread takes every finished segment queued behind a running decode in one codec call."""
    h = Harness(backend)
    h.loop.activity_interval_s = 1e9  # keep counting
    try:
        before = backend.device_times()
        with backend._cuda_lock:  # the decode thread blocks inside its first decode
            for i in range(4):
                h.inbox.put(ipc.Submit(f"d{i}", "Decode me together.", duration_s=0.4, num_step=2, seed=i))
                h.until(lambda m, n=i + 1: isinstance(m, ipc.Stats) and m.num_finished == n)
        got = h.until(lambda m: isinstance(m, ipc.Audio) and m.request_id == "d3")
        got += [] if sum(isinstance(m, ipc.Audio) for m in got) == 4 else h.until(
            lambda m: isinstance(m, ipc.Audio) and m.request_id != "d3")
        assert {m.request_id for m in got if isinstance(m, ipc.Audio)} == {"d0", "d1", "d2", "d3"}
        assert h.loop._activity.decoded == 4 and h.loop._activity.decodes == 2  # d0 alone, then d1-d3 at once
        # and one codec call each: d1-d3 (equal lengths here) in one batch, on CUDA one graph replay of 4 rows
        after = backend.device_times()
        assert (after.codec_calls - before.codec_calls, after.codec_items - before.codec_items) == (2, 4)
    finally:
        h.close()


def test_a_named_num_step_is_exact_and_an_unnamed_one_is_chosen_and_reported(backend: ModelBackend) -> None:
    """Audio.num_steps says what each segment ran: the request's own count, else the worker's default while
    the card has room (here: nothing measured yet), else fewer down to the floor once the step clock says the
    card is far too slow for what arrives."""
    h = Harness(backend, num_step=6, min_num_step=3)
    try:
        h.inbox.put(ipc.Submit("named", "Named steps.", duration_s=0.6, num_step=4, seed=1))
        h.inbox.put(ipc.Submit("default", "Default steps.", duration_s=0.6, seed=1))
        got = h.until(lambda m: isinstance(m, ipc.Audio) and m.request_id == "default")
        got += [] if any(isinstance(m, ipc.Audio) and m.request_id == "named" for m in got) else \
            h.until(lambda m: isinstance(m, ipc.Audio) and m.request_id == "named")
        steps = {m.request_id: m.num_steps for m in got if isinstance(m, ipc.Audio)}
        assert steps == {"named": 4, "default": 6}
        # A card measured at one second per full step carries ~4096 token-steps per second: a dozen first
        # segments (due in 0.3 s) at 6 steps each is far past that, so the later ones get the floor; a named
        # count still gets its own.
        for _ in range(30):
            h.loop.step_clock.observe(4096, 1.0)
        for i in range(12):
            h.inbox.put(ipc.Submit(f"load{i}", "Many segments at once.", duration_s=0.6, seed=i, priority=0))
        h.inbox.put(ipc.Submit("named2", "Named steps.", duration_s=0.6, num_step=5, seed=1))
        audio: dict[str, int] = {}
        while len(audio) < 13:
            m = h.until(lambda m: isinstance(m, ipc.Audio))[-1]
            assert isinstance(m, ipc.Audio)
            audio[m.request_id] = m.num_steps
        assert audio.pop("named2") == 5
        assert all(3 <= n <= 6 for n in audio.values()) and audio["load11"] == 3, audio
    finally:
        h.close()
