"""Property: whatever values a client puts in the request fields, the answer is audio or a 4xx naming a
field — never a 5xx — on both HTTP and WS."""

from __future__ import annotations

import json

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import Server, ws_exchange

FIELDS = ["voice", "voice_id", "speaker", "instruct", "language", "speed", "duration", "num_step",
          "guidance_scale", "temperature", "top_p", "seed", "chunk_mode", "sample_rate", "model", "events",
          "response_format", "stream_format", "stream", "instructions", "encoding", "unknown_thing"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["auto", "base", "alloy", "wav", "pcm", "sse", "en", "1.5", "", "clone",
                                           "design", "omnivoice", "tts-1", "none", "concurrent"]),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4),
                                                                                           inner, max_size=3),
                      max_leaves=5)
requests = st.dictionaries(st.sampled_from(FIELDS), values, max_size=5)
texts = st.one_of(st.sampled_from(["Hi there.", "", "  ", "Okay."]), values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=requests, text=texts)
def test_http_speech_never_5xx(server: Server, body: dict[str, object], text: object) -> None:
    body = {**body, "input": text}
    r = httpx.post(f"{server.http}/v1/audio/speech", content=json.dumps(body), timeout=60,
                   headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        assert r.json()["error"]["message"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=requests, text=texts)
def test_ws_stream_never_1011(server: Server, body: dict[str, object], text: object) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream", [{**body, "text": text}], timeout=60)
    assert r.close_code in (1000, 1003, 1008), (body, text, r.close_code, r.texts)
