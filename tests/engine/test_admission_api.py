"""Admission control end to end (real server, real OmniVoice worker on CPU, tiny checkpoint): a busy worker
refuses a new request at once — HTTP 503 with Retry-After, WS an error frame with retry_after_ms then close
1013 — and /metrics counts the refusals and shows the worker's step-time model."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import metric, start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

LONG = ("This request keeps the only worker busy for a while, one diffusion step after another, "
        "so that the next one cannot start in time.")


@pytest.fixture(scope="module")
def busy_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # one step holds one segment (150 tokens), and a request must start within 1 ms: once the worker has timed
    # its steps, any first segment behind a running one is refused
    server = start_server(tmp_path_factory.mktemp("admission"), "--model", str(tiny_checkpoint), "--device", "cpu",
                          "--max-batch-tokens", "150", "--admission-wait-ms", "1", timeout_s=300)
    yield server
    stop_server(server)


def test_a_busy_worker_refuses_new_requests_at_once(busy_server: Any) -> None:
    long = {"input": LONG, "voice": "auto", "response_format": "pcm", "num_step": 64, "seed": 1}
    results: list[int] = []

    def keep_busy() -> None:  # admitted while the step clock is cold: a cold worker refuses nothing
        r = httpx.post(busy_server.http + "/v1/audio/speech", json=long, timeout=300)
        results.append(r.status_code)

    workers = [threading.Thread(target=keep_busy) for _ in range(2)]
    for t in workers:
        t.start()
    deadline = time.monotonic() + 120
    while metric(busy_server.http, "full_step_seconds") <= 0:  # the worker has measured its steps
        assert time.monotonic() < deadline and all(t.is_alive() for t in workers), "the step clock never warmed up"
        time.sleep(0.05)

    body = {"input": "Just a short one.", "voice": "auto", "response_format": "pcm", "num_step": 8}
    t0 = time.monotonic()
    r = httpx.post(busy_server.http + "/v1/audio/speech", json=body, timeout=60)
    answered_s = time.monotonic() - t0
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert error["code"] == "overloaded" and error["retryable"] and error["retry_after_ms"] >= 100
    assert "would start in about" in error["message"]
    assert int(r.headers["retry-after"]) == max(1, -(-error["retry_after_ms"] // 1000))  # whole seconds, rounded up
    assert answered_s < 5.0, answered_s  # one loop iteration of a shared CPU, not the seconds of queueing ahead

    frames: list[dict[str, Any]] = []
    code = None
    with connect(busy_server.ws + "/v1/stream", open_timeout=10, close_timeout=5) as ws:
        ws.send(json.dumps({"text": "A stream that cannot start in time.", "num_step": 8}))
        try:
            while True:
                msg = ws.recv(timeout=60)
                if isinstance(msg, str):
                    frames.append(json.loads(msg))
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
    assert code == 1013, frames
    (frame,) = frames  # the error frame, then the close
    assert frame["type"] == "error" and frame["code"] == "overloaded" and frame["retry_after_ms"] >= 100, frame

    while metric(busy_server.http, "admission_refusals_total") < 2:  # the worker reports every 0.25 s while busy
        assert time.monotonic() < deadline, "the refusals never reached /metrics"
        time.sleep(0.05)
    for t in workers:
        t.join(300)
    assert results == [200, 200]  # what was admitted is served
