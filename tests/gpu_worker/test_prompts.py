"""Segments conditioned on an earlier segment's generated codes (Submit.prompt_from / keep_codes) in the
worker's step loop over the real tiny model: the dependent waits, then runs on exactly the prompt the source's
codes make; a failed or cancelled source lets it run on its own; a waiting segment can be aborted; a saved
voice's decoded prompt is kept in the worker's LRU."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realtime_tts.engine import ipc
from realtime_tts.gpu_worker.backend import ModelBackend
from realtime_tts.gpu_worker.loop import WorkerLoop
from realtime_tts.gpu_worker.prompts import GENERATED_RMS


@pytest.fixture(scope="module")
def backend(tiny_checkpoint: Path) -> ModelBackend:
    return ModelBackend(ipc.WorkerOptions(worker_id=0, model_dir=str(tiny_checkpoint), device="cpu", dtype="fp32",
                                          max_batch_tokens=4096, num_threads=1))


class Loop:
    def __init__(self, backend: ModelBackend) -> None:
        options = ipc.WorkerOptions(worker_id=1, model_dir="", device="cpu", dtype="fp32", max_batch_tokens=4096)
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.out: queue.Queue[ipc.FromWorker] = queue.Queue()
        self.loop = WorkerLoop(options, backend, self.inbox, self.out.put)
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()

    def results(self, ids: set[str], timeout: float = 60) -> dict[str, ipc.Audio | ipc.Failed]:
        got: dict[str, ipc.Audio | ipc.Failed] = {}
        deadline = time.monotonic() + timeout
        while not ids <= set(got):
            m = self.out.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(m, ipc.Audio | ipc.Failed):
                got[m.request_id] = m
        return got

    def close(self) -> None:
        self.inbox.put(ipc.Shutdown())
        self.thread.join(30)


@pytest.fixture
def loop(backend: ModelBackend) -> Iterator[Loop]:
    lp = Loop(backend)
    yield lp
    lp.close()


def _seg(rid: str, text: str, **kw: Any) -> ipc.Submit:
    return ipc.Submit(rid, text, num_step=4, seed=7, duration_s=0.6, **kw)


def test_dependents_wait_for_the_source_and_run_on_its_codes(loop: Loop) -> None:
    loop.inbox.put(_seg("s0", "Hello there.", mode="design", instruct="female, low pitch", keep_codes=True))
    loop.inbox.put(_seg("s1", "Second sentence.", mode="design", instruct="female, low pitch", prompt_from="s0"))
    loop.inbox.put(_seg("s2", "Third one.", mode="design", instruct="female, low pitch", prompt_from="s0"))
    got = loop.results({"s0", "s1", "s2"})
    s0 = got["s0"]
    assert isinstance(s0, ipc.Audio) and s0.num_codebooks == 8
    frames = len(s0.codes) // 16
    assert frames == 15 and len(s0.codes) == 2 * 8 * frames  # 0.6 s at 25 Hz
    codes = np.frombuffer(s0.codes, "<i2")
    assert codes.min() >= 0 and codes.max() < 1024
    # the same segments with the prompt given outright: the same audio, so s1/s2 ran on s0's codes + text
    prompt = ipc.Prompt("Hello there.", s0.codes, 8, frames, GENERATED_RMS, key="gen:s0", generated=True)
    loop.inbox.put(_seg("r1", "Second sentence.", mode="clone", prompt=prompt))
    loop.inbox.put(_seg("u1", "Second sentence.", mode="design", instruct="female, low pitch"))
    ref = loop.results({"r1", "u1"})
    for dep in ("s1", "s2"):
        assert isinstance(got[dep], ipc.Audio) and not got[dep].codes  # type: ignore[union-attr]
    a1, r1, u1 = (np.frombuffer(m.samples, "<f4") for m in (got["s1"], ref["r1"], ref["u1"]))  # type: ignore[union-attr]
    np.testing.assert_array_equal(a1, r1)
    assert not np.array_equal(a1, u1)  # conditioning changed the audio
    # peak-normalised like auto/design output, not left at a recording's level; edges faded in and out
    recorded = ipc.Prompt("Hello there.", s0.codes, 8, frames, 0.2)
    loop.inbox.put(_seg("n1", "Second sentence.", mode="clone", prompt=recorded))
    n1 = np.frombuffer(loop.results({"n1"})["n1"].samples, "<f4")  # type: ignore[union-attr]
    gain = float(np.abs(a1).max() / np.abs(n1).max())
    assert abs(gain - 1.0) > 1e-3
    np.testing.assert_allclose(a1, n1 * gain, atol=1e-5)
    assert a1[0] == 0.0 and a1[-1] == 0.0


def test_a_cancelled_source_lets_its_dependents_run_unconditioned(loop: Loop) -> None:
    loop.inbox.put(ipc.Submit("big", "A long source.", num_step=64, duration_s=20.0, keep_codes=True))
    loop.inbox.put(_seg("dep", "Still spoken.", prompt_from="big"))
    loop.inbox.put(_seg("gone", "Aborted while waiting.", prompt_from="big"))
    loop.inbox.put(ipc.Abort("gone"))
    loop.inbox.put(ipc.Abort("big"))
    got = loop.results({"big", "dep", "gone"})
    assert isinstance(got["big"], ipc.Failed) and got["big"].code == "cancelled"
    assert isinstance(got["gone"], ipc.Failed) and got["gone"].code == "cancelled"
    loop.inbox.put(_seg("alone", "Still spoken."))
    alone = loop.results({"alone"})["alone"]
    assert isinstance(got["dep"], ipc.Audio) and isinstance(alone, ipc.Audio)
    np.testing.assert_array_equal(np.frombuffer(got["dep"].samples, "<f4"), np.frombuffer(alone.samples, "<f4"))
    assert len(loop.loop.prompts) == 0


def test_an_unknown_source_is_not_waited_for(loop: Loop) -> None:
    loop.inbox.put(_seg("x", "No such source.", prompt_from="never-sent"))
    assert isinstance(loop.results({"x"})["x"], ipc.Audio)


def test_keyed_prompts_are_decoded_once_per_worker(backend: ModelBackend) -> None:
    codes = np.arange(8 * 10, dtype="<i2").reshape(8, 10).tobytes()
    prompt = ipc.Prompt("A saved voice.", codes, 8, 10, 0.2, key="voice_0123456789abcdef")
    backend.prepare(ipc.Submit("k1", "One.", mode="clone", prompt=prompt, num_step=2))
    first = backend._prompts["voice_0123456789abcdef"]
    backend.prepare(ipc.Submit("k2", "Two.", mode="clone", prompt=prompt, num_step=2))
    assert backend._prompts["voice_0123456789abcdef"] is first  # the same tensors, not decoded again
