"""Admission control end to end (real server, real OmniVoice worker on CPU, tiny checkpoint): a busy worker
refuses a new request at once — HTTP 503 with Retry-After, WS an error frame with retry_after_ms then close
1013 — and /metrics counts the refusals and shows the worker's step-time model."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from live_server import metric, start_server, stop_server
from session_client import SessionClient
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

    # session mode: the turn is refused as its context opens, an error naming it (not fatal); a context that never
    # started gets no context.done (PROTOCOL §2), and the socket goes on
    c = SessionClient(f"{busy_server.ws}/v1/stream/text", num_step=8)
    c.send({"type": "speak", "context_id": "t", "text": "A turn that cannot start in time."})
    assert c.until_done("t", timeout=60)["reason"] == "refused", c.log
    (refusal,) = c.contexts["t"].messages
    assert refusal["type"] == "error" and refusal["code"] == "overloaded" and refusal["retryable"], refusal
    assert not refusal["fatal"] and refusal["retry_after_ms"] >= 100, refusal
    c.send({"type": "ping", "id": 7})
    assert c.until(lambda m: isinstance(m, dict) and m.get("type") == "pong", timeout=30)["id"] == 7
    c.close()

    while metric(busy_server.http, "admission_refusals_total") < 2:  # the worker reports every 0.25 s while busy
        assert time.monotonic() < deadline, "the refusals never reached /metrics"
        time.sleep(0.05)
    for t in workers:
        t.join(300)
    assert results == [200, 200]  # what was admitted is served


@pytest.fixture(scope="module")
def small_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # one step holds about three short requests; a new one must start within 300 ms
    server = start_server(tmp_path_factory.mktemp("web-admission"), "--model", str(tiny_checkpoint), "--device",
                          "cpu", "--max-batch-tokens", "1000", "--admission-wait-ms", "300", timeout_s=300)
    yield server
    stop_server(server)


def test_a_flood_is_refused_on_arrival_by_the_web_process_and_a_normal_load_is_not(small_server: Any) -> None:
    url = small_server.http + "/v1/audio/speech"

    def body(i: int) -> dict[str, Any]:
        return {"input": "Your table is ready now.", "voice": "auto", "response_format": "pcm", "stream": False,
                "num_step": 8, "seed": i}

    # a normal load: one request after another, each served (these also warm the worker's step clock up)
    for i in range(5):
        r = httpx.post(url, json=body(i), timeout=120)
        assert r.status_code == 200, r.text
    assert metric(small_server.http, "full_step_seconds") > 0

    async def one(client: aiohttp.ClientSession, i: int) -> tuple[int, float, dict[str, Any] | None, str | None]:
        # each request a connection of its own through aiohttp (as bench/load.py): an httpx pool's own
        # bookkeeping added up to ~400 ms per request here under a flood, more than the server took
        t0 = time.perf_counter()
        async with client.post(url, json=body(100 + i)) as r:
            payload = await r.read()
            status, retry = r.status, r.headers.get("retry-after")
        took = time.perf_counter() - t0
        error = json.loads(payload)["error"] if status != 200 else None
        if status == 503:
            refusing.set()
        return status, took, error, retry

    def session_probe(c: SessionClient) -> list[dict[str, Any]]:
        """Session-mode turns opened while the flood is being refused, one after another until one is refused
        (as it opens, or at its first segment): the messages of every turn. A turn that no refusal reached within
        2 s was admitted (the flood let up for a moment, or the worker refuses later than that): it is cancelled
        and the next one opened, so no turn waits on the work queued ahead of it."""
        turns: list[dict[str, Any]] = []
        for i in itertools.count():
            if not flooding.is_set():
                return turns  # the flood is over: nothing more is refused
            cid = f"s{i}"
            c.send({"type": "speak", "context_id": cid, "text": "Your table is ready now."})
            ctx = c.contexts[cid]
            until = time.monotonic() + 2.0
            while ctx.done is None:  # a refusal ends it at once (after context.started: error, context.done)
                try:
                    c.recv(timeout=max(0.0, until - time.monotonic()))
                except TimeoutError:
                    c.send({"type": "cancel", "context_id": cid})
                    break
            c.until_done(cid, timeout=30)
            turns.extend(ctx.messages)
            if ctx.done is not None and ctx.done["reason"] in ("error", "refused"):
                refused_turn.set()
                return turns

    async def flood(rate: float, least: int, most: int) -> list[tuple[int, float, dict[str, Any] | None, str | None]]:
        """Requests at `rate`: at least `least`, and on until a session turn was refused (at most `most`)."""
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as client:
            sent: list[asyncio.Task[tuple[int, float, dict[str, Any] | None, str | None]]] = []
            while len(sent) < most and (len(sent) < least or not refused_turn.is_set()):
                sent.append(asyncio.create_task(one(client, len(sent))))
                await asyncio.sleep(1.0 / rate)
            flooding.clear()
            refusing.set()  # a probe still waiting for the first refusal starts, sees the flood over and returns
            return list(await asyncio.gather(*sent))

    async def flood_and_probe(c: SessionClient) -> tuple[list[tuple[int, float, dict[str, Any] | None, str | None]],
                                                         list[dict[str, Any]]]:
        async def probe() -> list[dict[str, Any]]:
            await refusing.wait()
            return await asyncio.to_thread(session_probe, c)

        return await asyncio.gather(flood(100.0, 40, 1000), probe())

    refusing = asyncio.Event()
    flooding = threading.Event()  # cleared by the flood when it stops sending
    flooding.set()
    refused_turn = threading.Event()  # set by the probe's thread once a session turn was refused
    probe = SessionClient(f"{small_server.ws}/v1/stream/text", num_step=8)  # connected before the flood
    results, session = asyncio.run(flood_and_probe(probe))
    statuses = sorted({status for status, _, _, _ in results})
    assert statuses == [200, 503], results  # some served, some refused, nothing else (no 500)
    refused = [(took, error, retry) for status, took, error, retry in results if status == 503]
    web = [took for took, error, _ in refused if error is not None and "web process" in error["message"]]
    assert web, refused  # refused on arrival, without asking the worker
    for took, error, retry in refused:
        assert error is not None and error["code"] == "overloaded" and error["retry_after_ms"] >= 100
        assert retry is not None and int(retry) == max(1, -(-error["retry_after_ms"] // 1000))
    assert max(web) < 0.2, sorted(web)  # on arrival: no queueing behind the work ahead
    refusals = [m for m in session if m["type"] == "error"]
    assert refusals, probe.log  # a session turn was refused while the flood was
    session_web = sum("web process" in m["message"] for m in refusals)
    assert metric(small_server.http, "admission_refusals_total", side="web") == len(web) + session_web
    # session mode: a refused turn is an error naming its context (retryable, not fatal); refused as it opened
    # (engine.check) it never started, refused at its first segment its context.done "error" follows
    assert all(m["code"] == "overloaded" and m["retryable"] and not m["fatal"] for m in refusals), session
    last = [m["type"] for m in session if m["context_id"] == session[-1]["context_id"]]
    # (no segment.start either: a segment is announced with its first audio)
    assert last in (["error"], ["context.started", "error", "context.done"]), session
    assert session[-1]["type"] == "error" or session[-1]["reason"] == "error", session
    served = [took for status, took, _, _ in results if status == 200]
    assert len(served) >= 3  # the worker kept serving what it admitted

    time.sleep(1.0)  # the worker drained: a request arriving now is admitted again
    r = httpx.post(url, json=body(1000), timeout=120)
    assert r.status_code == 200, r.text
    probe.send({"type": "speak", "context_id": "after", "text": "Your table is ready now."})  # the session lived on
    assert probe.until_done("after", timeout=120)["reason"] == "end", probe.log
    assert probe.contexts["after"].samples > 0
    probe.close()
