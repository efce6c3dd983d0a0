"""Limits against a real server (small limits so the tests are short): WS frame size (error frame, then 1009, both
counted), text buffered in a streaming context, engine admission (requests a voice can serve at once), the total
connection limit; every refusal is a clear error and counted in /metrics; /health stays reachable."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import httpx
import pytest
from live_server import Server, start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

MAX_CONNECTIONS = 40


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"REALTIME_TTS_CPU_WORKERS": "1", "REALTIME_TTS_MAX_WS_MESSAGE_BYTES": "4096",
           "REALTIME_TTS_MAX_BUFFERED_CHARS": "300", "REALTIME_TTS_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
           "REALTIME_TTS_PUBLIC_METRICS": "true"}
    srv = start_server(tmp_path_factory.mktemp("limits"), env=env)
    yield srv
    stop_server(srv)
    assert "Traceback" not in srv.log(), srv.log()


def _metric(srv: Server, prefix: str) -> float:
    text = httpx.get(srv.http + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def _until_closed(ws: ClientConnection) -> tuple[list[dict[str, object]], int | None]:
    texts = []
    try:
        while True:
            msg = ws.recv(timeout=30)
            if isinstance(msg, str):
                texts.append(json.loads(msg))
    except ConnectionClosed as e:
        return texts, e.rcvd.code if e.rcvd is not None else None


def test_an_oversized_frame_gets_an_error_frame_then_1009_and_is_counted(small: Server) -> None:
    before = _metric(small, 'realtime_tts_ws_closes_total{code="1009"}')
    with connect(f"{small.ws}/v1/stream/text", max_size=None) as ws:
        ws.send(json.dumps({"text": "a" * 10_000}))
        texts, code = _until_closed(ws)
    assert code == 1009 and texts and texts[-1]["code"] == "too_large" and "4096" in str(texts[-1]["message"])
    # far past it (over 16x): the WebSocket layer cuts it (no frame possible), still counted
    with connect(f"{small.ws}/v1/stream", max_size=None) as ws:
        ws.send(b"x" * (16 * 4096 + 10))
        _, code = _until_closed(ws)
    assert code == 1009
    assert _metric(small, 'realtime_tts_ws_closes_total{code="1009"}') == before + 2
    assert _metric(small, 'realtime_tts_limit_refusals_total{limit="max_ws_message_bytes"}') == 1
    # an HTTP body over its limit (4 x the frame limit here): 413, counted as the limit it hit
    r = httpx.post(small.http + "/v1/audio/speech", json={"input": "a" * 20_000}, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"
    assert _metric(small, 'realtime_tts_limit_refusals_total{limit="max_body_bytes"}') == 1


def test_text_buffered_in_a_context_is_limited(small: Server) -> None:
    with connect(f"{small.ws}/v1/stream/text") as ws:
        ws.send(json.dumps({"seed": 1}))
        ws.send(json.dumps({"text": "word " * 50}))  # 250 characters: in
        ws.send(json.dumps({"text": "more " * 20}))  # 100 more while nothing was spoken yet: over 300
        texts, code = _until_closed(ws)
    err = texts[-1]
    assert code == 1009 and err["code"] == "too_large" and err["field"] == "text", texts
    assert "max_buffered_chars" in str(err["message"])
    assert _metric(small, 'realtime_tts_limit_refusals_total{limit="max_buffered_chars"}') == 1


def test_engine_admission_and_the_connection_limit_refuse_early_and_clearly(small: Server) -> None:
    with contextlib.ExitStack() as stack:
        # 32 open streaming contexts: all a CPU voice worker takes at once (MAX_REQUESTS_PER_WORKER)
        for _ in range(32):
            ws = stack.enter_context(connect(f"{small.ws}/v1/stream/text"))
            ws.send(json.dumps({"seed": 1}))
        assert _wait_metric(small, 'realtime_tts_active_requests{engine="cpu"}', 32)
        with connect(f"{small.ws}/v1/stream/text") as ws:
            ws.send(json.dumps({"seed": 1}))
            texts, code = _until_closed(ws)
        assert code == 1013 and texts[-1]["code"] == "overloaded" and texts[-1]["retryable"], texts
        r = httpx.post(small.http + "/v1/audio/speech", json={"input": "Hi."}, timeout=30)
        assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1 and r.json()["error"]["code"] == "overloaded"
        # fill the remaining connection slots with idle sockets: the next one is refused, /health still answers
        for _ in range(MAX_CONNECTIONS - 32):
            stack.enter_context(connect(f"{small.ws}/v1/stream"))
        assert _wait_metric(small, "realtime_tts_connections ", MAX_CONNECTIONS)
        with connect(f"{small.ws}/v1/stream") as ws:
            texts, code = _until_closed(ws)
        assert code == 1013 and texts[-1]["code"] == "too_many_connections", texts
        r = httpx.get(small.http + "/v1/models", timeout=10)
        assert r.status_code == 503 and r.json()["error"]["code"] == "too_many_connections"
        assert httpx.get(small.http + "/health", timeout=10).status_code == 200
    assert _metric(small, 'realtime_tts_limit_refusals_total{limit="cpu_active_requests"}') == 2
    assert _metric(small, 'realtime_tts_limit_refusals_total{limit="max_connections"}') == 2
    # everything is released: the server serves again
    assert _wait_metric(small, 'realtime_tts_active_requests{engine="cpu"}', 0)
    r = httpx.post(small.http + "/v1/audio/speech", json={"input": "Hi there.", "response_format": "pcm"}, timeout=60)
    assert r.status_code == 200 and len(r.content) > 10_000


def _wait_metric(srv: Server, prefix: str, value: float, limit_s: float = 10) -> bool:
    import time

    t0 = time.monotonic()
    while _metric(srv, prefix) != value:
        if time.monotonic() - t0 > limit_s:
            raise AssertionError(f"{prefix} = {_metric(srv, prefix)}, expected {value}")
        time.sleep(0.05)
    return True


def test_text_per_request_is_limited_and_counted(server: Server) -> None:
    before = _metric(server, 'realtime_tts_limit_refusals_total{limit="max_text_chars"}')
    r = httpx.post(server.http + "/v1/audio/speech", json={"input": "a" * 50_001}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["field"] == "input" and "50000" in r.json()["error"]["message"]
    with connect(f"{server.ws}/v1/stream", max_size=None) as ws:
        ws.send(json.dumps({"text": "a" * 50_001}))
        texts, code = _until_closed(ws)
    assert code == 1008 and texts[-1]["field"] == "text"
    assert _metric(server, 'realtime_tts_limit_refusals_total{limit="max_text_chars"}') == before + 2
