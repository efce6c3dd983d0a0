"""`realtime-tts serve --model DIR` end to end on CPU with the tiny random checkpoint: every entry point
speaks through the OmniVoice worker; a killed worker fails only its requests, restarts, and /health tells.

The tiny model's audio is noise: assert shapes, lengths, sample rate and determinism, not intelligibility.
"""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile as sf
from live_server import pcm_to_float, ws_exchange
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

SR = 24_000


def wav(body: bytes) -> tuple[np.ndarray, int]:
    samples, rate = sf.read(io.BytesIO(body), dtype="float32")
    assert samples.ndim == 1
    return samples, rate


def test_health_and_models_show_the_omnivoice_worker(omnivoice_server: Any) -> None:
    health = httpx.get(omnivoice_server.http + "/health").json()
    assert health["status"] == "ok" and health["default_engine"] == "omnivoice"
    omni = health["engines"]["omnivoice"]
    assert omni["status"] == "ok" and omni["device"] == "cpu"
    assert [(w["status"], w["device"]) for w in omni["workers"]] == [("ok", "cpu")]
    models = httpx.get(omnivoice_server.http + "/v1/models").json()["data"]
    (m,) = [m for m in models if m["engine"] == "omnivoice"]
    assert m["default"] and m["loaded"]
    assert m["capabilities"]["voice_modes"] == ["auto", "clone", "design"]
    assert m["capabilities"]["sample_rates"] == [SR]


def test_the_web_process_never_loads_torch(omnivoice_server: Any) -> None:
    """Serving OmniVoice, the server process maps no torch library; its worker does."""
    ws_exchange(omnivoice_server.ws + "/v1/stream", [{"text": "Load check.", "num_step": 2, "duration": 0.4}],
                timeout=120)
    server_maps = Path(f"/proc/{omnivoice_server.proc.pid}/maps").read_text()
    assert "libtorch" not in server_maps
    (worker_pid,) = omnivoice_server.worker_pids()
    assert "libtorch" in Path(f"/proc/{worker_pid}/maps").read_text()


def test_ws_stream_length_rate_and_determinism(omnivoice_server: Any) -> None:
    request = {"text": "Hello from the tiny model.", "seed": 5, "num_step": 4, "duration": 1.0}
    r = ws_exchange(omnivoice_server.ws + "/v1/stream", [request], timeout=120)
    assert r.close_code == 1000, r.texts
    done = r.terminal
    assert done["done"] is True and done["sample_rate"] == SR
    assert done["stats"]["engine"] == "omnivoice"
    samples = r.pcm
    # 1.0 s generated (25 frames × 960); pacing may trim silent edges and add ≤ lead-in + tail
    assert 0.7 <= samples.size / SR <= 1.3, samples.size / SR
    assert float(np.abs(samples).max()) > 0.1
    again = ws_exchange(omnivoice_server.ws + "/v1/stream", [request], timeout=120)
    assert b"".join(again.frames) == b"".join(r.frames), "same text + seed must give the same audio"
    other = ws_exchange(omnivoice_server.ws + "/v1/stream", [{**request, "seed": 6}], timeout=120)
    assert b"".join(other.frames) != b"".join(r.frames)


def test_ws_stream_text_sentence_by_sentence(omnivoice_server: Any) -> None:
    messages = [{"seed": 1, "num_step": 4},
                {"text": "First sentence is here. "}, {"text": "And a second one follows it."}, {"end": True}]
    r = ws_exchange(omnivoice_server.ws + "/v1/stream/text", messages, timeout=120)
    assert r.close_code == 1000, r.texts
    assert r.terminal["sentences"] == 2 and r.terminal["sample_rate"] == SR
    assert r.pcm.size > SR // 2


def test_speech_wav_and_pcm(omnivoice_server: Any) -> None:
    body = {"input": "OpenAI style request.", "voice": "alloy", "response_format": "wav", "seed": 2,
            "num_step": 4, "duration": 0.8}
    r = httpx.post(omnivoice_server.http + "/v1/audio/speech", json=body, timeout=120)
    assert r.status_code == 200, r.text
    samples, rate = wav(r.content)
    assert rate == SR and 0.5 <= samples.size / SR <= 1.1
    r2 = httpx.post(omnivoice_server.http + "/v1/audio/speech", json={**body, "response_format": "pcm"},
                    timeout=120)
    assert r2.status_code == 200 and r2.headers["x-audio-sample-rate"] == str(SR)
    np.testing.assert_allclose(pcm_to_float(r2.content), samples, atol=2 / 32767)


def test_design_endpoint_and_its_bad_instruct(omnivoice_server: Any) -> None:
    form = {"text": "A designed voice speaks.", "instruct": "female, low pitch", "seed": "3", "num_step": "4",
            "duration": "0.8", "response_format": "wav"}
    r = httpx.post(omnivoice_server.http + "/v1/audio/design", data=form, timeout=120)
    assert r.status_code == 200, r.text
    samples, rate = wav(r.content)
    assert rate == SR and 0.5 <= samples.size / SR <= 1.1
    bad = httpx.post(omnivoice_server.http + "/v1/audio/design", data={**form, "instruct": "purple, loud"},
                     timeout=60)
    assert bad.status_code == 400
    assert bad.json()["error"]["field"] == "instruct"
    assert "allowed" in bad.json()["error"]["message"]


def test_clone_endpoint(omnivoice_server: Any) -> None:
    rng = np.random.default_rng(1)
    ref = io.BytesIO()
    sf.write(ref, (0.1 * rng.standard_normal(16000 * 2)).astype(np.float32), 16000, format="WAV")
    form = {"text": "Cloned from an upload.", "ref_text": "This is the reference.", "seed": "4",
            "num_step": "4", "duration": "0.8", "response_format": "wav"}
    r = httpx.post(omnivoice_server.http + "/v1/audio/clone", data=form,
                   files={"ref_audio": ("ref.wav", ref.getvalue(), "audio/wav")}, timeout=120)
    assert r.status_code == 200, r.text
    samples, rate = wav(r.content)
    assert rate == SR and 0.5 <= samples.size / SR <= 1.1
    missing = httpx.post(omnivoice_server.http + "/v1/audio/clone", data={k: v for k, v in form.items()
                                                                           if k != "ref_text"},
                         files={"ref_audio": ("ref.wav", ref.getvalue(), "audio/wav")}, timeout=60)
    assert missing.status_code == 400 and missing.json()["error"]["field"] == "ref_text"


def test_killed_worker_fails_its_stream_restarts_and_health_tells(omnivoice_server: Any) -> None:
    (pid,) = omnivoice_server.worker_pids()
    with connect(omnivoice_server.ws + "/v1/stream", open_timeout=10, max_size=None) as ws:
        ws.send(json.dumps({"text": "This long one will not finish.", "duration": 30.0, "num_step": 64}))
        time.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        error = None
        try:
            while True:
                msg = ws.recv(timeout=60)
                if isinstance(msg, str):
                    error = json.loads(msg)
        except ConnectionClosed as e:
            assert e.rcvd is not None and e.rcvd.code == 1011
    assert error is not None and error["code"] == "engine_dead", error
    assert "exited" in error["message"]
    health = httpx.get(omnivoice_server.http + "/health").json()
    (worker,) = health["engines"]["omnivoice"]["workers"]
    assert worker["restarts"] == 1
    deadline = time.monotonic() + 120
    while worker["status"] != "ok":
        assert time.monotonic() < deadline, health
        time.sleep(0.2)
        health = httpx.get(omnivoice_server.http + "/health").json()
        (worker,) = health["engines"]["omnivoice"]["workers"]
    assert omnivoice_server.worker_pids() != [pid]
    r = ws_exchange(omnivoice_server.ws + "/v1/stream",
                    [{"text": "Back again.", "num_step": 4, "duration": 0.4, "seed": 1}], timeout=120)
    assert r.close_code == 1000 and r.terminal["done"] is True
    assert r.pcm.size > 0
    assert "Traceback" not in omnivoice_server.log(), omnivoice_server.log()


def test_workers_exit_when_the_server_is_killed(omnivoice_server: Any) -> None:
    """Runs last in this module (it kills the module's server): a SIGKILLed web process must not leave its
    worker holding the device."""
    (worker_pid,) = omnivoice_server.worker_pids()
    os.kill(omnivoice_server.proc.pid, signal.SIGKILL)
    omnivoice_server.proc.wait(10)
    deadline = time.monotonic() + 30
    while running(worker_pid):
        assert time.monotonic() < deadline, "the orphaned worker is still running"
        time.sleep(0.1)


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"  # a zombie has exited; only its reaping is pending
