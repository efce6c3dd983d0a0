"""Hypothesis fuzzing of EVERY route in the app's route table (a route added later is fuzzed without touching this
file), against the real server and the real CPU voice: random and malformed JSON bodies, wrong types, huge /
empty / control-character / invalid-UTF-8 text, random multipart uploads (corrupt audio included) to every HTTP
route and method; random JSON, text and binary frames to every WebSocket route. Seed corpus:
tests/fuzz_seeds/seeds.json (the hostile inputs of issue 17's probes), always run first.

Must hold: no 5xx and no WS close 1011 (internal) ever; every error has the documented JSON shape (HTTP
{"error": {code, message, retryable}}, WS {"type": "error", code, message, retryable, fatal}); the server is
healthy afterwards and its log has no traceback (the session fixture checks that at the end)."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import urllib.parse
import wave
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_server import Server
from starlette.routing import Route, WebSocketRoute
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from realtime_tts.api import create_app
from realtime_tts.config import load_config

SCALE = int(os.environ.get("REALTIME_TTS_FUZZ_SCALE", "1"))  # more cases per route for a long run (CI: 1)
SEEDS = json.loads((Path(__file__).parent / "fuzz_seeds" / "seeds.json").read_text())
CASES = {"http": 0, "ws": 0}  # counted for the closing note (printed by the last test)
WS_CLOSE_OK = {1000, 1001, 1003, 1007, 1008, 1009, 1013, 4008}


def _routes() -> list[Route | WebSocketRoute]:
    app = create_app(load_config(env={}))
    return [r for r in app.routes if isinstance(r, (Route, WebSocketRoute))]


ROUTES = _routes()
HTTP = [(r.path, m) for r in ROUTES if isinstance(r, Route) for m in sorted(r.methods or {"GET"}) if m != "HEAD"]
WS = [r.path for r in ROUTES if isinstance(r, WebSocketRoute)]

FIELDS = ["input", "text", "voice", "model", "speed", "seed", "response_format", "stream_format", "stream", "instruct",
          "instructions", "language", "duration", "num_step", "ref_text", "ref_audio", "ref_audio_base64", "voice_id",
          "events", "chunk_mode", "sample_rate", "cancel", "flush", "end", "type", "ttl_s", "name"]
hostile_text = st.one_of(
    st.text(max_size=40), st.sampled_from(["", " ", "Hi.", "Hello there.", "\x00\x07\x1b[31m", "\ud7ff\ue000",
                                           "你好", "…", "🙂" * 5, "a" * 60_000, "word " * 600]),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=30))
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), hostile_text)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
objects = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), values, max_size=6)


def _wav(seconds: float = 0.6, rate: int = 8000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\x00\x10\x00\xf0" * int(seconds * rate / 2))
    return buf.getvalue()


audio_files = st.one_of(st.binary(max_size=600), st.sampled_from([base64.b64decode(b) for b in
                                                                   SEEDS["multipart_files_b64"]] + [_wav()]),
                        st.builds(lambda b, n: _wav()[:n] + b, st.binary(max_size=50), st.integers(0, 200)))
json_bodies = st.one_of(objects.map(lambda o: json.dumps(o, allow_nan=True).encode()),
                        st.sampled_from([b.encode() for b in SEEDS["http_bodies"]]), st.binary(max_size=300))
multipart = st.tuples(st.dictionaries(st.sampled_from(FIELDS), st.text(max_size=30).filter(lambda t: "\x00" not in t),
                                      max_size=5),
                      st.dictionaries(st.sampled_from(["ref_audio", "file", "audio", "input"]), audio_files, max_size=2))
content_types = st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded",
                                 "multipart/form-data", "multipart/form-data; boundary=", "application/octet-stream",
                                 "application/json; charset=latin-1"])
path_params = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF, exclude_characters="/?#%"),
                      min_size=1, max_size=20)


def _fill(path: str, value: str) -> str:
    # percent-encoded by us: httpx refuses some characters (DEL, controls) in a URL it is given raw, and the
    # server must see them as the fuzzed path parameter, decoded
    return re.sub(r"\{[^}]+\}", lambda _: urllib.parse.quote(value, safe=""), path)


def _check_http(r: httpx.Response, what: object) -> None:
    CASES["http"] += 1
    assert r.status_code < 500, (what, r.status_code, r.text[:300])
    if r.status_code >= 400:
        err = r.json()["error"]
        assert isinstance(err["code"], str) and isinstance(err["message"], str) and err["message"], (what, err)
        assert isinstance(err["retryable"], bool)


@pytest.mark.parametrize("path,method", HTTP, ids=[f"{m} {p}" for p, m in HTTP])
@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(body=json_bodies, ctype=content_types, param=path_params)
@example(body=b'{"input": "' + b"x" * 70_000 + b'"}', ctype="application/json", param="x")
@example(body=b"{" * 5000, ctype="application/json", param="x")
def test_http_route_bodies(server: Server, path: str, method: str, body: bytes, ctype: str, param: str) -> None:
    url = server.http + _fill(path, param)
    r = httpx.request(method, url, content=body, headers={"content-type": ctype}, timeout=60)
    _check_http(r, (method, path, body[:200], ctype))


@pytest.mark.parametrize("path,method", [(p, m) for p, m in HTTP if m in ("POST", "PUT", "PATCH")],
                         ids=[f"{m} {p}" for p, m in HTTP if m in ("POST", "PUT", "PATCH")])
@settings(max_examples=6 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(form=multipart, param=path_params)
def test_http_route_multipart(server: Server, path: str, method: str, form: tuple[dict[str, str], dict[str, bytes]],
                              param: str) -> None:
    fields, files = form
    r = httpx.request(method, server.http + _fill(path, param), data=fields,
                      files={k: (f"{k}.wav", v, "audio/wav") for k, v in files.items()} or None, timeout=60)
    _check_http(r, (method, path, fields, {k: v[:40] for k, v in files.items()}))
    # a body cut in the middle of a part
    raw = b'--b\r\nContent-Disposition: form-data; name="ref_audio"; filename="a.wav"\r\n\r\n' + _wav()[:64]
    r = httpx.request(method, server.http + _fill(path, param), content=raw,
                      headers={"content-type": "multipart/form-data; boundary=b"}, timeout=60)
    _check_http(r, (method, path, "truncated multipart"))


frames = st.one_of(objects.map(lambda o: json.dumps(o, allow_nan=True)), st.sampled_from(SEEDS["ws_raw"]),
                   st.sampled_from([json.dumps(f) for f in SEEDS["ws_frames"]]), hostile_text,
                   st.binary(max_size=200), st.sampled_from([base64.b64decode(b) for b in SEEDS["ws_binary_b64"]]))


def _ws_session(url: str, msgs: list[str | bytes]) -> None:
    CASES["ws"] += 1
    texts: list[dict[str, Any]] = []
    code = None
    with connect(url, open_timeout=10, close_timeout=5, max_size=None) as ws:
        try:
            for m in msgs:
                ws.send(m)
            for _ in range(60):  # a long reply: after 60 frames the client leaves (a disconnect, fuzzed too)
                msg = ws.recv(timeout=5)
                if isinstance(msg, str):
                    texts.append(json.loads(msg))
            ws.close()
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
        except TimeoutError:
            ws.close()  # the server waits for more text (stream/text): the client ends it
            code = 1000
    assert code is None or code in WS_CLOSE_OK, (url, msgs[:3], code, texts[-1:])
    if "/v1/" not in url:
        return  # a vendor dialect's route: its errors keep the vendor's own shape (tests/dialects check those)
    for t in texts:
        if t.get("type") == "error":
            assert isinstance(t["code"], str) and t["message"] and isinstance(t["retryable"], bool), t
            assert t["code"] != "internal", t


@pytest.mark.parametrize("path", WS)
@settings(max_examples=15 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(msgs=st.lists(frames, min_size=1, max_size=4), end=st.booleans())
@example(msgs=[json.dumps({"text": "a" * 60_000})], end=True)
@example(msgs=[b"\xff\xfe invalid utf-8", "{\"text\": \"ok\"}"], end=True)
def test_ws_route_frames(server: Server, path: str, msgs: list[str | bytes], end: bool) -> None:
    if end:
        msgs = [*msgs, json.dumps({"end": True})]
    _ws_session(f"{server.ws}{path}", msgs)


def test_server_is_healthy_after_the_fuzzing(server: Server) -> None:
    h = httpx.get(server.http + "/health", timeout=10).json()
    assert h["status"] == "ok", h
    r = httpx.post(server.http + "/v1/audio/speech", json={"input": "Still speaking.", "response_format": "pcm"},
                   timeout=60)
    assert r.status_code == 200 and len(r.content) > 10_000
    print(f"fuzz cases: {CASES['http']} HTTP requests, {CASES['ws']} WebSocket sessions over {len(HTTP)} HTTP "
          f"route/methods and {len(WS)} WebSocket routes")
