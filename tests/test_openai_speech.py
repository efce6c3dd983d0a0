"""POST /v1/audio/speech as OpenAI clients use it, against a real server: the official openai SDK (streaming
response, mp3 and pcm), the 13 voice names, resampled rates, SSE with encoded deltas, "instructions" on the
CPU voice; and WS simple mode's encoding / sample_rate fields. Audio is decoded with libsndfile (soundfile)."""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from live_server import SAMPLE_RATE, Server, assert_speech, decode_audio, pcm_to_float, ws_exchange

TEXT = "The first sentence is short. A second one follows it, so the answer has two parts."
VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage", "shimmer",
          "verse")


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key="not-checked", max_retries=0, timeout=60)


def resampled(samples: np.ndarray, rate: int) -> np.ndarray:
    """assert_speech judges 24 kHz audio: nearest-sample index mapping (coarse, enough for its duration and level
    checks)."""
    idx = (np.arange(int(len(samples) * SAMPLE_RATE / rate)) * rate / SAMPLE_RATE).astype(int)
    return samples[idx]


def test_sdk_streams_mp3_by_default_content_type(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(model="gpt-4o-mini-tts", voice="alloy", input=TEXT,
                                                            response_format="mp3") as r:
        assert r.headers["content-type"] == "audio/mpeg"
        assert r.headers["transfer-encoding"] == "chunked"
        head_stats = json.loads(r.headers["x-stats"])
        chunks = list(r.iter_bytes())
    samples, rate = decode_audio(b"".join(chunks))
    assert rate == SAMPLE_RATE
    assert_speech(samples, min_s=2.5, max_s=8.0)
    # Streamed as encoded: the headers left with the first encoded bytes, when only part of the audio existed.
    assert head_stats["partial"] and head_stats["audio_duration_ms"] < 0.8 * len(samples) / rate * 1e3


def test_sdk_pcm_is_raw_s16le_at_24k(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="marin", input=TEXT,
                                                            response_format="pcm") as r:
        assert r.headers["content-type"] == "audio/pcm"
        assert int(r.headers["x-audio-sample-rate"]) == SAMPLE_RATE
        pcm = b"".join(r.iter_bytes())
    assert_speech(pcm_to_float(pcm), min_s=2.5, max_s=8.0)


def test_client_leaving_mid_stream_leaves_the_server_serving(server: Server) -> None:
    long_text = " ".join([TEXT] * 6)
    with httpx.stream("POST", f"{server.http}/v1/audio/speech", json={"input": long_text, "response_format": "aac"},
                      timeout=60) as r:
        first = next(r.iter_raw())
    assert first  # then the connection closes with most of the audio unsent
    again = httpx.post(f"{server.http}/v1/audio/speech", json={"input": "Still here.", "response_format": "mp3"},
                       timeout=60)
    assert again.status_code == 200 and sf.info(io.BytesIO(again.content)).frames > 0


def test_default_response_format_is_mp3(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"model": "tts-1", "input": "Hello.", "voice": "nova"},
                   timeout=60)
    assert r.status_code == 200 and r.headers["content-type"] == "audio/mpeg"
    assert sf.info(io.BytesIO(r.content)).format == "MP3"


@pytest.mark.parametrize("voice", VOICES)
def test_every_openai_voice_is_accepted(client: openai.OpenAI, voice: str) -> None:
    audio = client.audio.speech.create(model="tts-1", voice=voice, input="Hi.", response_format="pcm")
    assert len(audio.content) > SAMPLE_RATE // 5  # > 0.1 s of int16 audio


def test_voice_object_is_a_voice_reference(client: openai.OpenAI, server: Server) -> None:
    audio = client.audio.speech.create(model="tts-1", voice={"id": "alloy"}, input="Hi.", response_format="pcm")
    assert len(audio.content) > SAMPLE_RATE // 5
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": "Hi.", "voice": {"name": "x"}})
    assert r.status_code == 400 and r.json()["error"]["field"] == "voice"


@pytest.mark.parametrize("fmt,rate", [("pcm", 8000), ("pcm", 44100), ("wav", 16000), ("mp3", 22050),
                                      ("flac", 48000), ("opus", 48000)])
def test_sample_rate_is_resampled(server: Server, fmt: str, rate: int) -> None:
    body = {"input": TEXT, "voice": "alloy", "seed": 3, "response_format": fmt}
    ref = httpx.post(f"{server.http}/v1/audio/speech", json={**body, "response_format": "pcm"}, timeout=60)
    buffered = {"stream": False} if fmt == "flac" else {}  # libsndfile reads only a FLAC that states its length
    r = httpx.post(f"{server.http}/v1/audio/speech", json={**body, "sample_rate": rate, **buffered}, timeout=60)
    assert r.status_code == 200 and int(r.headers["x-audio-sample-rate"]) == rate
    if fmt == "pcm":
        samples = pcm_to_float(r.content)
    else:
        samples, got = decode_audio(r.content)
        assert got == rate
    want_s = len(ref.content) / 2 / SAMPLE_RATE
    codec_slack_s = 0.15 if fmt == "mp3" else 0.0
    assert want_s - 0.01 <= len(samples) / rate <= want_s + codec_slack_s + 0.01
    assert_speech(resampled(samples, rate), min_s=2.5, max_s=8.5)


def test_sample_rate_a_codec_cannot_run_at_is_a_400(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"input": "Hi.", "response_format": "mp3",
                                                            "sample_rate": 37000})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["field"] == "sample_rate" and "44100" in err["message"]


def test_sse_deltas_carry_the_encoded_format(server: Server) -> None:
    r = httpx.post(f"{server.http}/v1/audio/speech", json={"model": "gpt-4o-mini-tts", "input": TEXT,
                                                            "voice": "coral", "response_format": "mp3",
                                                            "stream_format": "sse"}, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) > 3 and events[-1]["type"] == "speech.audio.done" and "usage" in events[-1]
    samples, rate = decode_audio(b"".join(base64.b64decode(e["audio"]) for e in deltas))
    assert rate == SAMPLE_RATE
    assert_speech(samples, min_s=2.5, max_s=8.0)


def test_instructions_on_the_cpu_voice_are_a_warning(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="sage", input=TEXT, instructions="Speak in a cheerful tone.",
            response_format="pcm") as r:
        warnings = json.loads(r.headers["x-warnings"])
        pcm = b"".join(r.iter_bytes())
    assert any("instructions ignored" in w and "omnivoice" in w for w in warnings), warnings
    assert_speech(pcm_to_float(pcm), min_s=2.5, max_s=8.0)


@pytest.mark.parametrize("encoding,subtype,rate", [("pcm_mulaw", "ULAW", 8000), ("pcm_alaw", "ALAW", 8000),
                                                   ("pcm_f32le", "FLOAT", 48000), ("pcm_s16le", "PCM_16", 16000)])
def test_ws_simple_mode_encoding_and_sample_rate(server: Server, encoding: str, subtype: str, rate: int) -> None:
    ref = ws_exchange(f"{server.ws}/v1/stream", [{"text": TEXT, "seed": 5}])
    res = ws_exchange(f"{server.ws}/v1/stream", [{"text": TEXT, "seed": 5, "encoding": encoding, "sample_rate": rate}])
    assert res.terminal["sample_rate"] == rate and res.close_code == 1000
    samples, _ = sf.read(io.BytesIO(b"".join(res.frames)), format="RAW", subtype=subtype, samplerate=rate,
                         channels=1, dtype="float32")
    assert abs(len(samples) - len(ref.pcm) * rate / SAMPLE_RATE) <= 2
    assert_speech(resampled(samples, rate), min_s=2.5, max_s=8.5)
