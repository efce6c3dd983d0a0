"""HTTP endpoints against a real server: OpenAI speech (wav/pcm/encoded, chunked, SSE), LunaVox /v1/synth,
clone/design refusals on the CPU voice, health, models, metrics."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf
from live_server import SAMPLE_RATE, Server, assert_speech, decode_audio, pcm_to_float

TEXT = "Streaming speech over plain HTTP works too."


def test_speech_wav_is_chunked_and_plays(server: Server) -> None:
    with httpx.stream("POST", f"{server.http}/v1/audio/speech",
                      json={"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "wav"},
                      timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "audio/wav"
        assert r.headers.get("transfer-encoding") == "chunked"
        assert int(r.headers["x-audio-sample-rate"]) == SAMPLE_RATE
        stats = json.loads(r.headers["x-stats"])
        assert stats["engine"] == "cpu" and stats["partial"] is True
        chunks = list(r.iter_bytes())
    body = b"".join(chunks)
    assert sf.info(io.BytesIO(body)).samplerate == SAMPLE_RATE
    assert_speech(pcm_to_float(body[44:]), min_s=1.5, max_s=5.0)


def test_speech_pcm_equals_wav_payload_and_ws(server: Server) -> None:
    body = {"input": TEXT, "voice": "nova", "seed": 9}
    pcm = httpx.post(f"{server.http}/v1/audio/speech", json={**body, "response_format": "pcm"}, timeout=60)
    wav = httpx.post(f"{server.http}/v1/audio/speech", json={**body, "response_format": "wav", "stream": False},
                     timeout=60)
    assert pcm.status_code == wav.status_code == 200
    assert pcm.headers["content-type"] == "audio/pcm"
    data, rate = sf.read(io.BytesIO(wav.content), dtype="int16")
    assert rate == SAMPLE_RATE
    assert data.astype("<i2").tobytes() == pcm.content
    full = json.loads(wav.headers["x-stats"])  # a buffered body carries the complete stats
    assert "partial" not in full and full["audio_duration_ms"] == pytest.approx(len(data) / SAMPLE_RATE * 1e3, abs=1)


@pytest.mark.parametrize("fmt,ctype", [("flac", "audio/flac"), ("mp3", "audio/mpeg"), ("opus", "audio/ogg"),
                                       ("aac", "audio/aac")])
def test_speech_encoded_formats_stream(server: Server, fmt: str, ctype: str) -> None:
    with httpx.stream("POST", f"{server.http}/v1/audio/speech", json={"input": TEXT, "response_format": fmt},
                      timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(ctype)
        assert r.headers.get("transfer-encoding") == "chunked"
        body = b"".join(r.iter_bytes())
    if fmt == "opus":  # libsndfile decodes Ogg/Opus at the stream's own 24 kHz (FFmpeg's at 48 kHz)
        samples = sf.read(io.BytesIO(body), dtype="float32", always_2d=True)[0][:, 0]
    else:
        samples, _ = decode_audio(body)
    assert_speech(samples, min_s=1.5, max_s=5.5)


def test_speech_buffered_flac_states_its_length(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": TEXT, "response_format": "flac", "stream": False},
                   timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/flac"
    samples, rate = sf.read(io.BytesIO(r.content), dtype="float32")
    assert rate == SAMPLE_RATE
    assert_speech(samples, min_s=1.5, max_s=5.5)


def test_speech_unsupported_format_names_the_supported_ones(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": TEXT, "response_format": "m4a"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["field"] == "response_format" and "wav" in err["message"] and "aac" in err["message"]


@pytest.mark.parametrize("body", [{"stream_format": "sse"}, {"stream": True}])
def test_speech_sse(server: Server, body: dict[str, object]) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech",
                   json={"input": TEXT, "response_format": "pcm", "seed": 4, **body}, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and "usage" in events[-1] and "stats" in events[-1]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert len(deltas) > 3
    assert_speech(pcm_to_float(pcm), min_s=1.5, max_s=5.0)
    plain = httpx.post(f"{server.http}/v1/audio/speech", json={"input": TEXT, "response_format": "pcm", "seed": 4},
                       timeout=60)
    assert plain.content == pcm


def test_synth_lunavox_shape(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/synth", json={"text": TEXT, "voice": "base", "temperature": 0.7,
                                                     "top_p": 0.9, "top_k": 50}, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    stats = json.loads(r.headers["x-stats"])
    assert {"ttfa_ms", "t_total_ms", "rtf", "mem"} <= set(stats)
    assert "top_k" in r.headers["x-warnings"]  # unknown field reported, not fatal
    samples, rate = sf.read(io.BytesIO(r.content), dtype="float32")
    assert rate == SAMPLE_RATE
    assert_speech(samples, min_s=1.5, max_s=5.0)
    assert stats["audio_duration_ms"] == pytest.approx(len(samples) / rate * 1e3, abs=1)


@pytest.mark.parametrize("path,data,files", [
    ("/v1/audio/clone", {"text": "Hello.", "ref_text": "Reference words."},
     {"ref_audio": ("ref.wav", b"RIFF0000WAVE", "audio/wav")}),
    ("/v1/audio/design", {"text": "Hello.", "instruct": "female, low pitch, british accent"}, None),
])
def test_clone_and_design_refused_by_the_cpu_voice(server: Server, path: str, data: dict[str, str],
                                                   files: dict[str, object] | None) -> None:
    r = httpx.post(f"{server.http}{path}", data=data, files=files, timeout=30)  # type: ignore[arg-type]
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "unsupported_voice_mode" and "omnivoice" in err["message"]


@pytest.mark.parametrize("body", [
    {"input": "Hi there.", "voice": "design", "instructions": "a calm old man"},
    {"input": "Hi there.", "voice": "clone", "voice_id": "v123"},
])
def test_speech_voice_modes_refused_by_the_cpu_voice(server: Server, body: dict[str, str]) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unsupported_voice_mode" and "omnivoice" in r.json()["error"]["message"]


def test_health_models_metrics(server: Server) -> None:
    h = httpx.get(f"{server.http}/health")
    assert h.status_code == 200 and h.json()["status"] == "ok"
    assert h.json()["engines"]["cpu"]["pool_size"] >= 1
    m = httpx.get(f"{server.http}/v1/models").json()
    cpu = next(d for d in m["data"] if d["engine"] == "cpu")
    assert cpu["installed"] and cpu["loaded"] and cpu["capabilities"]["sample_rates"] == [SAMPLE_RATE]
    assert "clone" not in cpu["capabilities"]["voice_modes"]
    httpx.post(f"{server.http}/v1/synth", json={"text": "Count me."}, timeout=60)
    text = httpx.get(f"{server.http}/metrics").text
    for name in ("realtime_tts_requests_total", "realtime_tts_ttfa_seconds_bucket", "realtime_tts_pool_size",
                 "realtime_tts_pool_idle", "realtime_tts_audio_seconds_total", "realtime_tts_ws_connections",
                 "realtime_tts_errors_total", "realtime_tts_input_chars_total", "realtime_tts_rtf_bucket"):
        assert name in text, name
    assert 'realtime_tts_requests_total{endpoint="synth",status="ok",voice_mode="auto"}' in text


def test_rms_is_stable_across_requests(server: Server) -> None:
    r = [httpx.post(f"{server.http}/v1/audio/speech", json={"input": TEXT, "response_format": "pcm"}, timeout=60)
         for _ in range(2)]
    levels = [float(np.sqrt(np.mean(pcm_to_float(x.content) ** 2))) for x in r]
    assert abs(levels[0] - levels[1]) / levels[0] < 0.25
