"""Authentication and the per-key limits against a real server (uvicorn subprocess with API keys): every route in
the app's route table refuses a request without a key, including routes added after create_app; keys in headers
(Bearer and the vendor dialects' headers), short-lived tokens for browser WebSockets, no long-lived key in a URL,
keys never in the log; requests per key per second (429 + Retry-After) and connections per key (close 1013)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_server import Server, free_port, start_server, stop_server, ws_exchange
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from realtime_tts.api import create_app
from realtime_tts.auth import Authenticator, parse_keys
from realtime_tts.config import ConfigError, load_config

ALICE, BOB, CAROL = "sk-alice-0123456789", "sk-bob-0123456789", "sk-carol-0123456789"
KEYS = f"alice:{ALICE},bob:{BOB},carol:{CAROL}"
ENV = {"REALTIME_TTS_API_KEYS": KEYS, "REALTIME_TTS_CPU_WORKERS": "1", "REALTIME_TTS_MAX_CONNECTIONS_PER_KEY": "3",
       "REALTIME_TTS_REQUESTS_PER_KEY_PER_S": "40"}
PUBLIC = {"/health"}  # the default: /health public, /metrics not


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # debug logging: the strictest check that no key ever reaches the log
    srv = start_server(tmp_path_factory.mktemp("auth"), "--log-level", "debug", env=ENV)
    yield srv
    stop_server(srv)
    log = srv.log()
    for key in (ALICE, BOB, CAROL):
        assert key not in log, "an API key reached the log"
    assert "Traceback" not in log, log


def _app_routes() -> list[Route | WebSocketRoute]:
    app = create_app(load_config(env={}))
    return [r for r in app.routes if isinstance(r, (Route, WebSocketRoute))]


def _refusal(url: str) -> tuple[dict[str, object], int, str]:
    """Connect, send nothing, read the refusal: (error frame, close code, close reason)."""
    with connect(url, open_timeout=10) as ws:
        frame = json.loads(ws.recv(timeout=20))
        try:
            ws.recv(timeout=20)
        except ConnectionClosed as e:
            assert e.rcvd is not None
            return frame, e.rcvd.code, e.rcvd.reason
    raise AssertionError("not closed")


def _assert_ws_refused(url: str, code: int = 1008, err_code: str = "unauthorized") -> str:
    frame, close, reason = _refusal(url)
    assert close == code and frame["type"] == "error" and frame["code"] == err_code, (url, close, frame)
    assert reason
    return str(frame["message"])


def test_every_route_in_the_route_table_needs_a_key(keyed: Server) -> None:
    routes = _app_routes()
    assert len(routes) >= 10
    seen = 0
    for route in routes:
        if route.path in PUBLIC:
            assert httpx.get(keyed.http + route.path, timeout=10).status_code == 200
            continue
        if isinstance(route, WebSocketRoute):
            _assert_ws_refused(f"{keyed.ws}{route.path}")
            _assert_ws_refused(f"{keyed.ws}{route.path}?token=rtt_forged.c2ln")
            seen += 1
            continue
        for method in sorted(route.methods or {"GET"}):
            if method == "HEAD":
                continue
            for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": f"Basic {ALICE}"},
                            {"X-API-Key": "nope"}):
                r = httpx.request(method, keyed.http + route.path, headers=headers, timeout=10)
                assert r.status_code == 401, (method, route.path, headers, r.status_code)
                body = r.json()["error"]
                assert body["code"] == "unauthorized" and body["message"] and r.headers["WWW-Authenticate"]
            ok = httpx.request(method, keyed.http + route.path, headers={"Authorization": f"Bearer {ALICE}"},
                               timeout=60)
            assert ok.status_code != 401, (method, route.path)
            seen += 1
    assert seen >= len(routes) - len(PUBLIC)
    # unknown paths are behind the gate too (no probing of what exists without a key)
    assert httpx.get(keyed.http + "/no/such/route", timeout=10).status_code == 401
    _assert_ws_refused(f"{keyed.ws}/no/such/ws")
    metrics = httpx.get(keyed.http + "/metrics", headers={"Authorization": f"Bearer {ALICE}"}).text
    assert 'realtime_tts_auth_failures_total{reason="authorization"}' in metrics
    assert 'realtime_tts_key_requests_total{key="alice"}' in metrics


def test_a_route_added_after_create_app_is_covered_too() -> None:
    import uvicorn

    app = create_app(load_config(env={"REALTIME_TTS_API_KEYS": KEYS, "REALTIME_TTS_CPU_WORKERS": "1"}))

    async def late(request: Request) -> JSONResponse:
        return JSONResponse({"late": True})

    app.add_route("/late", late)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert httpx.get(f"http://127.0.0.1:{port}/late").status_code == 401
        assert httpx.get(f"http://127.0.0.1:{port}/late", headers={"Authorization": f"Bearer {BOB}"}).json() == \
            {"late": True}
    finally:
        server.should_exit = True
        thread.join(20)


@pytest.mark.parametrize("headers", [{"Authorization": f"Bearer {ALICE}"}, {"authorization": f"bearer {ALICE}"},
                                     {"Authorization": f"Token {ALICE}"}, {"X-API-Key": ALICE},
                                     {"xi-api-key": ALICE}])
def test_keys_in_every_dialects_header_work(keyed: Server, headers: dict[str, str]) -> None:
    assert httpx.get(keyed.http + "/v1/models", headers=headers, timeout=10).status_code == 200


def test_speech_over_http_and_ws_with_a_key(keyed: Server) -> None:
    r = httpx.post(keyed.http + "/v1/audio/speech", json={"input": "Hello there.", "response_format": "pcm"},
                   headers={"Authorization": f"Bearer {BOB}"}, timeout=60)
    assert r.status_code == 200 and len(r.content) > 24_000
    with connect(f"{keyed.ws}/v1/stream", additional_headers={"Authorization": f"Bearer {BOB}"}) as ws:
        ws.send(json.dumps({"text": "Hello there."}))
        audio = 0
        while True:
            msg = ws.recv(timeout=60)
            if isinstance(msg, bytes):
                audio += len(msg)
            elif json.loads(msg).get("done"):
                break
        assert audio > 24_000


def test_browser_websockets_use_a_short_lived_token(keyed: Server) -> None:
    # a long-lived key in the URL is refused (it would end up in proxy logs)
    _assert_ws_refused(f"{keyed.ws}/v1/stream?api_key={ALICE}")
    r = httpx.post(keyed.http + "/v1/auth/token", json={"ttl_s": 1.5}, headers={"Authorization": f"Bearer {ALICE}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["token"].startswith("rtt_") and 0 < body["expires_in"] <= 1.5 and ALICE not in body["token"]
    ok = ws_exchange(f"{keyed.ws}/v1/stream?token={body['token']}", [{"text": "Hi."}])
    assert ok.close_code == 1000 and ok.frames
    # the token works as a bearer credential too, and minting needs a key
    assert httpx.get(keyed.http + "/v1/models", headers={"Authorization": f"Bearer {body['token']}"}).status_code == 200
    assert httpx.post(keyed.http + "/v1/auth/token").status_code == 401
    # tampered and expired tokens are refused
    head, sig = body["token"].split(".")
    _assert_ws_refused(f"{keyed.ws}/v1/stream?token={head}.{sig[::-1]}")
    time.sleep(1.6)
    assert "expired" in _assert_ws_refused(f"{keyed.ws}/v1/stream?token={body['token']}")


def test_requests_per_key_per_second_get_429_with_retry_after(keyed: Server) -> None:
    with httpx.Client(headers={"Authorization": f"Bearer {CAROL}"}, timeout=10) as c:
        codes = [c.get(keyed.http + "/v1/models") for _ in range(150)]
    refused = [r for r in codes if r.status_code == 429]
    assert refused, [r.status_code for r in codes]
    assert int(refused[0].headers["Retry-After"]) >= 1
    assert refused[0].json()["error"]["code"] == "rate_limited" and refused[0].json()["error"]["retryable"]
    time.sleep(1.0)  # the bucket refills: the key works again
    assert httpx.get(keyed.http + "/v1/models", headers={"Authorization": f"Bearer {CAROL}"}).status_code == 200
    # another key is not affected
    assert httpx.get(keyed.http + "/v1/models", headers={"Authorization": f"Bearer {ALICE}"}).status_code == 200


def test_connections_per_key_are_limited(keyed: Server) -> None:
    hdr = {"Authorization": f"Bearer {BOB}"}
    with contextlib.ExitStack() as stack:
        for _ in range(3):
            stack.enter_context(connect(f"{keyed.ws}/v1/stream/text", additional_headers=hdr))
        time.sleep(0.2)
        with connect(f"{keyed.ws}/v1/stream/text", additional_headers=hdr) as ws:
            err = json.loads(ws.recv(timeout=10))
            assert err["code"] == "too_many_connections" and err["retryable"], err
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        # other keys still get in
        assert ws_exchange(f"{keyed.ws}/v1/stream?token=" + httpx.post(
            keyed.http + "/v1/auth/token", headers={"Authorization": f"Bearer {ALICE}"}).json()["token"],
            [{"text": "Hi."}]).close_code == 1000
    time.sleep(0.3)
    assert httpx.get(keyed.http + "/v1/models", headers=hdr).status_code == 200
    metrics = httpx.get(keyed.http + "/metrics", headers=hdr).text
    assert 'realtime_tts_limit_refusals_total{limit="max_connections_per_key"}' in metrics


def test_key_parsing_and_constant_time_checks(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_text("# ops keys\nops:sk-ops-1\n\n")
    assert parse_keys("a:k1, b:k2", str(f)) == {"a": "k1", "b": "k2", "ops": "sk-ops-1"}
    assert parse_keys("k1") == {"key1": "k1"}
    for bad in ("a:k1,a:k2", "a:k1,b:k1", "a:", ":k"):
        with pytest.raises(ConfigError) as e:
            parse_keys(bad)
        assert "k1" not in str(e.value) and "k2" not in str(e.value)
    auth = Authenticator({"a": "k1"})
    assert auth.authenticate({"authorization": "Bearer k1"}, {}).name == "a"
    assert auth.authenticate_value("k1", header="xi-api-key").name == "a"
    assert not Authenticator({}).enabled
