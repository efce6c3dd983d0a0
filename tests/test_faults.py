"""Engine faults against a real server and the real CPU voice (2 worker processes, job timeout 3 s, idle checks
every 0.5 s): a frozen (SIGSTOP) or killed worker fails only the requests it held, with a retryable error on
every transport (WS error frame + 1011, SSE error event) within a bounded time; /health and /metrics notice a
dead or frozen idle worker on their own and it is back before a request needs it; a client that leaves frees its
engine work and the abort is counted."""

from __future__ import annotations

import base64
import json
import signal
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest
from live_server import Server, start_server, stop_server
from session_client import SessionClient
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

JOB_TIMEOUT_S = 3.0
LONG = " ".join(f"Sentence number {i} of this reply keeps the voice busy for a while." for i in range(40))


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"REALTIME_TTS_CPU_WORKERS": "2", "REALTIME_TTS_ENGINE_JOB_TIMEOUT_S": str(JOB_TIMEOUT_S),
           "REALTIME_TTS_WORKER_CHECK_INTERVAL_S": "0.5", "REALTIME_TTS_PUBLIC_METRICS": "true"}
    server = start_server(tmp_path_factory.mktemp("faults"), env=env)
    yield server
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()


def _workers(server: Server) -> list[psutil.Process]:
    kids = psutil.Process(server.proc.pid).children()
    return [p for p in kids if "realtime_tts.engine.cpu" in " ".join(p.cmdline())]


def _metric(server: Server, prefix: str) -> float:
    text = httpx.get(server.http + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def _restarts(server: Server) -> int:
    return sum(w["restarts"] for w in httpx.get(server.http + "/health", timeout=10).json()["engines"]["cpu"]["workers"])


def _wait_all_ok(server: Server, restarts_at_least: int, limit_s: float = 30) -> float:
    t0 = time.monotonic()
    while True:
        h = httpx.get(server.http + "/health", timeout=10).json()
        workers = h["engines"]["cpu"]["workers"]
        if h["status"] == "ok" and all(w["status"] == "ok" for w in workers) and \
                sum(w["restarts"] for w in workers) >= restarts_at_least and len(_workers(server)) == 2:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < limit_s, h
        time.sleep(0.05)


def _say(server: Server, text: str = "Back again.") -> dict[str, object]:
    with connect(f"{server.ws}/v1/stream") as ws:
        ws.send(json.dumps({"text": text}))
        while True:
            msg = ws.recv(timeout=30)
            if isinstance(msg, str):
                return json.loads(msg)


def test_a_frozen_worker_fails_its_stream_with_a_retryable_error_in_bounded_time(srv: Server) -> None:
    before = _restarts(srv)
    with connect(f"{srv.ws}/v1/stream", max_size=None) as ws:
        ws.send(json.dumps({"text": LONG}))
        assert isinstance(ws.recv(timeout=30), bytes)
        frozen = _workers(srv)
        for p in frozen:
            p.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        err = None
        try:
            while True:
                msg = ws.recv(timeout=JOB_TIMEOUT_S + 15)
                if isinstance(msg, str):
                    err = json.loads(msg)
        except ConnectionClosed as e:
            closed = e.rcvd
        waited = time.monotonic() - t0
    assert err is not None and err["type"] == "error" and err["code"] == "engine_dead" and err["retryable"], err
    assert "engine_job_timeout_s" in err["message"]
    assert closed is not None and closed.code == 1011
    assert waited < JOB_TIMEOUT_S + 5, waited
    back = _wait_all_ok(srv, before + 2)  # the stuck one (job timeout) and the idle one (no pong) restart
    assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in frozen)
    assert _metric(srv, 'realtime_tts_worker_restarts_total{cause="stuck"') >= 1
    assert _say(srv)["reason"] == "end"
    print(f"frozen worker: error frame after {waited:.2f} s; both workers back {back:.2f} s later")


def test_a_session_turn_whose_engine_fails_before_any_audio_announces_no_segment(srv: Server) -> None:
    """Session mode: a turn whose worker freezes before its first audio gets context.started, the error (engine_dead,
    retryable, not fatal) and context.done "error" — no segment.start for a segment that never had audio — and
    the session speaks its next turn."""
    before = _restarts(srv)
    _wait_all_ok(srv, before)
    c = SessionClient(f"{srv.ws}/v1/stream/text")
    frozen = _workers(srv)
    for p in frozen:
        p.send_signal(signal.SIGSTOP)
    c.send({"type": "speak", "context_id": "t1", "text": "A turn that never gets its voice."})
    assert c.until_done("t1", timeout=JOB_TIMEOUT_S + 15)["reason"] == "error", c.log
    messages = c.contexts["t1"].messages
    assert [m["type"] for m in messages] == ["context.started", "error", "context.done"], messages
    assert messages[1]["code"] == "engine_dead" and messages[1]["retryable"] and not messages[1]["fatal"]
    assert c.contexts["t1"].frames == 0
    _wait_all_ok(srv, before + 2)  # the stuck one (job timeout) and the idle one (no pong) restart
    c.send({"type": "speak", "context_id": "t2", "text": "Back again."})
    assert c.until_done("t2", timeout=60)["reason"] == "end", c.log
    assert c.contexts["t2"].segments and c.contexts["t2"].samples > 0
    c.close()


def test_a_worker_killed_during_sse_ends_the_stream_with_an_error_event(srv: Server) -> None:
    _wait_all_ok(srv, 0)
    body = {"input": LONG, "response_format": "pcm", "stream_format": "sse"}
    events = []
    with httpx.stream("POST", srv.http + "/v1/audio/speech", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            events.append(ev)
            if len(events) == 1:
                for p in _workers(srv):
                    p.kill()
    assert events[0]["type"] == "speech.audio.delta" and base64.b64decode(events[0]["audio"])
    last = events[-1]
    assert last["type"] == "error" and last["error"]["code"] == "engine_dead" and last["error"]["retryable"], last
    _wait_all_ok(srv, 1)


def test_dead_or_frozen_idle_workers_are_restarted_before_a_request_needs_them(srv: Server) -> None:
    before = _restarts(srv)
    _wait_all_ok(srv, before)
    for p in _workers(srv):
        p.kill()
    t0 = time.monotonic()
    # /health sees it on its own, without any request
    while _restarts(srv) < before + 2:
        assert time.monotonic() - t0 < 5
        time.sleep(0.02)
    noticed = time.monotonic() - t0
    back = _wait_all_ok(srv, before + 2)
    stats = _say(srv)["stats"]
    assert isinstance(stats, dict) and stats["ttfa_ms"] < 1000, stats  # no restart paid by this request
    # frozen while idle: found by the ping
    before = _restarts(srv)
    frozen = _workers(srv)[0]
    frozen.send_signal(signal.SIGSTOP)
    t1 = time.monotonic()
    _wait_all_ok(srv, before + 1, limit_s=20)
    frozen_back = time.monotonic() - t1
    assert _metric(srv, 'realtime_tts_worker_restarts_total{cause="stuck_idle"') >= 1
    assert _metric(srv, 'realtime_tts_worker_restarts_total{cause="died_idle"') >= 2
    print(f"killed idle workers: noticed after {noticed:.2f} s, back after {noticed + back:.2f} s; first audio of "
          f"the next request {stats['ttfa_ms']} ms; a frozen idle worker back after {frozen_back:.2f} s")


def test_client_disconnects_free_engine_work_and_are_counted(srv: Server) -> None:
    _wait_all_ok(srv, 0)
    ws_before = _metric(srv, 'realtime_tts_cancellations_total{stage="disconnect"}')
    http_before = _metric(srv, 'realtime_tts_http_stream_aborts_total{endpoint="speech"}')
    with connect(f"{srv.ws}/v1/stream") as ws:
        ws.send(json.dumps({"text": LONG}))
        assert isinstance(ws.recv(timeout=30), bytes)
    with httpx.stream("POST", srv.http + "/v1/audio/speech", json={"input": LONG, "response_format": "pcm"},
                      timeout=60) as r:
        next(r.iter_bytes())
    t0 = time.monotonic()
    while _metric(srv, 'realtime_tts_pool_idle{engine="cpu"}') < 2 or \
            _metric(srv, 'realtime_tts_active_requests{engine="cpu"}') > 0:
        assert time.monotonic() - t0 < 3, "engine work went on after its clients left"
        time.sleep(0.02)
    freed = time.monotonic() - t0
    assert _metric(srv, 'realtime_tts_cancellations_total{stage="disconnect"}') == ws_before + 2
    assert _metric(srv, 'realtime_tts_http_stream_aborts_total{endpoint="speech"}') == http_before + 1
    print(f"two clients left mid-stream: engine idle {freed * 1e3:.0f} ms after the second left")


def test_a_client_that_leaves_before_its_body_arrived_is_no_server_error(srv: Server) -> None:
    # The body is announced (Content-Length) but only partly sent before the client closes: Starlette raises
    # ClientDisconnect while the handler reads it. That is the client leaving, not a server error: no traceback,
    # and the server serves the next request. (Seen in CI: a plugin client that gave up on a slow box.)
    import socket

    for path in ("/v1/audio/speech", "/v1/synth", "/v1/auth/token"):
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: 200\r\n\r\n{\"input\": \"Hel".encode())
            time.sleep(0.2)  # the handler is waiting for the rest of the body
    time.sleep(0.5)
    r = httpx.post(srv.http + "/v1/audio/speech", json={"input": "Still here.", "voice": "alloy",
                                                         "response_format": "pcm"}, timeout=60)
    assert r.status_code == 200 and len(r.content) > 0
    assert "Traceback" not in srv.log() and "ClientDisconnect" not in srv.log(), srv.log()[-3000:]
