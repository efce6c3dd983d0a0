"""Routing and the Engine contract through the real API (in-process uvicorn on a free port): a small fake
engine that can design and clone sits beside the real CPU voice, standing in for OmniVoice, so clone/design
uploads, model routing, voice prompts and engine errors are checked end to end."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import numpy as np
import pytest
import soundfile as sf
from live_server import SAMPLE_RATE, InProcessServer, pcm_to_float, ws_exchange
from websockets.sync.client import connect

from realtime_tts.engine.base import (
    AudioChunk,
    Capabilities,
    EngineHealth,
    EngineLoad,
    SegmentRequest,
    VoicePrompt,
)
from realtime_tts.errors import BadRequest, EngineDead


class ToneEngine:
    """Speaks a tone per segment (0.05 s per character; pitch by voice mode) and records what it was asked."""

    def __init__(self, batched: bool = False) -> None:
        self.requests: list[SegmentRequest] = []
        self.gate = threading.Event()  # a segment whose text holds "HOLD" waits for it before any audio
        self.gate.set()
        self.encoded: list[tuple[int, int, str]] = []  # (num_samples, sample_rate, ref_text)
        self.aborted: list[str] = []
        self._caps = Capabilities(engine="omnivoice", model="tone-omnivoice", sample_rate=SAMPLE_RATE,
                                  voice_modes=frozenset({"auto", "design", "clone"}), languages=None,
                                  device="cpu", batched=batched)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        self.requests.append(request)
        if "HOLD" in request.text:
            await asyncio.to_thread(self.gate.wait, 30)
        if "REFUSE" in request.text:
            raise BadRequest("instruct contains an unknown attribute", field="instruct")
        pitch = {"auto": 200.0, "design": 300.0, "clone": 400.0}[request.voice.mode]
        n = int(0.05 * len(request.text) * SAMPLE_RATE)
        t = np.arange(n) / SAMPLE_RATE
        tone = (0.2 * np.sin(2 * np.pi * pitch * t)).astype(np.float32)  # [n]
        half = n // 2
        yield AudioChunk(samples=tone[:half], last=False, gen_ms=1.0, batch_size=3)
        if "DIE" in request.text:
            raise EngineDead("worker 0 died")
        yield AudioChunk(samples=tone[half:], last=True, gen_ms=1.0, batch_size=3)

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        self.encoded.append((len(audio), sample_rate, ref_text))
        return VoicePrompt(engine="omnivoice", ref_text=ref_text, codes=b"\x00\x00" * 8, num_codebooks=8,
                           num_frames=1, ref_rms=float(np.sqrt(np.mean(audio**2))))

    def health(self) -> EngineHealth:
        return EngineHealth(status="ok")

    def load(self) -> EngineLoad:
        return EngineLoad(pool_size=1, idle=1, queued_segments=0, in_flight_segments=0)


def serving(engine: ToneEngine) -> InProcessServer:
    """The real app with the tone engine as "omnivoice", beside the real CPU voice (the default engine)."""
    return InProcessServer(lambda pool: pool.engines.__setitem__("omnivoice", engine))


@pytest.fixture(scope="module")
def tone() -> ToneEngine:
    return ToneEngine()


@pytest.fixture(scope="module")
def srv(tone: ToneEngine) -> Iterator[InProcessServer]:
    with serving(tone) as s:
        yield s


def pitch_of(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.argmax(spectrum) * SAMPLE_RATE / len(samples))


def wav_bytes(seconds: float = 2.0) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), 16000, format="WAV")
    return buf.getvalue()


def test_design_upload_reaches_the_engine(srv: InProcessServer, tone: ToneEngine) -> None:
    r = httpx.post(f"{srv.http}/v1/audio/design", timeout=30,
                   data={"text": "Designed voice here.", "instruct": "female, low pitch", "response_format": "wav",
                         "speed": "1.5", "stream": "false"})
    assert r.status_code == 200, r.text
    samples, rate = sf.read(io.BytesIO(r.content), dtype="float32")
    assert rate == SAMPLE_RATE and abs(pitch_of(samples) - 300) < 5
    req = tone.requests[-1]
    assert req.voice.mode == "design" and req.voice.instruct == "female, low pitch" and req.speed == 1.5
    assert json.loads(r.headers["x-stats"])["engine"] == "omnivoice"
    assert json.loads(r.headers["x-stats"])["batch_size_mean"] == 3


@pytest.mark.parametrize("how", ["file", "base64"])
def test_clone_upload_encodes_the_reference(srv: InProcessServer, tone: ToneEngine, how: str) -> None:
    data = {"text": "Cloned voice speaking.", "ref_text": "The reference transcript.", "response_format": "pcm"}
    files = None
    if how == "file":
        files = {"ref_audio": ("ref.wav", wav_bytes(), "audio/wav")}
    else:
        data["ref_audio_base64"] = base64.b64encode(wav_bytes()).decode()
    r = httpx.post(f"{srv.http}/v1/audio/clone", data=data, files=files, timeout=30)
    assert r.status_code == 200, r.text
    assert abs(pitch_of(pcm_to_float(r.content)) - 400) < 5
    assert tone.encoded[-1] == (32000, 16000, "The reference transcript.")
    req = tone.requests[-1]
    assert req.voice.mode == "clone" and req.voice.prompt is not None
    assert req.voice.prompt.ref_text == "The reference transcript."


def test_clone_with_unreadable_audio_names_the_field(srv: InProcessServer) -> None:
    r = httpx.post(f"{srv.http}/v1/audio/clone", data={"text": "Hi."},
                   files={"ref_audio": ("x.wav", b"definitely not audio", "audio/wav")})
    assert r.status_code == 400 and r.json()["error"]["field"] == "ref_audio"
    r = httpx.post(f"{srv.http}/v1/audio/clone", data={"text": "Hi.", "ref_audio_base64": "%%%"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "ref_audio_base64"


def test_routing_by_voice_mode_and_model(srv: InProcessServer, tone: ToneEngine) -> None:
    # design through the OpenAI endpoint goes to the engine that can do it
    r = httpx.post(f"{srv.http}/v1/audio/speech", timeout=30,
                   json={"input": "Hello.", "instructions": "a calm voice", "response_format": "pcm"})
    assert r.status_code == 200 and tone.requests[-1].voice.mode == "design"
    # auto mode stays on the default engine (the CPU voice): real speech, not a tone
    n = len(tone.requests)
    r = httpx.post(f"{srv.http}/v1/audio/speech", json={"input": "Hello there.", "response_format": "pcm"},
                   timeout=30)
    assert r.status_code == 200 and len(tone.requests) == n
    # the model field picks the engine
    r = httpx.post(f"{srv.http}/v1/audio/speech", timeout=30,
                   json={"model": "omnivoice", "input": "Hello there.", "response_format": "pcm", "voice": "nova"})
    assert r.status_code == 200 and tone.requests[-1].voice.preset == "nova"
    # OpenAI's "instructions" (a speaking style) on an engine without voice design: spoken, with a warning
    # (issue 14); an explicit design voice on that engine is still refused, naming the engine that can
    r = httpx.post(f"{srv.http}/v1/audio/speech", timeout=30,
                   json={"model": "cpu", "input": "Hello.", "instructions": "a calm voice", "response_format": "pcm"})
    assert r.status_code == 200 and len(r.content) > 0
    assert "instructions ignored" in r.headers["X-Warnings"]
    r = httpx.post(f"{srv.http}/v1/audio/speech",
                   json={"model": "cpu", "input": "Hello.", "voice": "design", "instruct": "a calm voice"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_voice_mode"
    assert "omnivoice" in r.json()["error"]["message"]
    models = httpx.get(f"{srv.http}/v1/models").json()["data"]
    assert {m["id"] for m in models} == {"hibari-heart", "tone-omnivoice"}
    assert httpx.get(f"{srv.http}/health").json()["engines"]["omnivoice"]["status"] == "ok"


def test_ws_design_segments_and_request_fields(srv: InProcessServer, tone: ToneEngine) -> None:
    text = "First sentence for the tone. Second sentence for the tone! Third one?"
    r = ws_exchange(f"{srv.ws}/v1/stream", [{"text": text, "instruct": "robot", "seed": 5, "num_step": 16,
                                              "guidance_scale": 3.0, "language": "en", "duration": 6.0,
                                              "chunk_mode": "sequential"}])
    assert r.close_code == 1000, r.texts
    reqs = [q for q in tone.requests if q.request_id.startswith(tone.requests[-1].request_id.rsplit("-", 1)[0])]
    assert all(q.num_step == 16 and q.guidance_scale == 3.0 and q.seed == 5 and q.language == "en" for q in reqs)
    assert sum(q.duration_s or 0 for q in reqs) == pytest.approx(6.0)
    assert reqs[0].priority == 0 and all(q.priority == 1 for q in reqs[1:])
    assert abs(pitch_of(r.pcm) - 300) < 5


def test_engine_refusal_before_audio_is_a_clean_400_and_1008(srv: InProcessServer) -> None:
    r = httpx.post(f"{srv.http}/v1/audio/speech", json={"input": "REFUSE this.", "instructions": "x"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "instruct"
    w = ws_exchange(f"{srv.ws}/v1/stream", [{"text": "REFUSE this.", "instruct": "x"}])
    assert w.close_code == 1008 and w.texts[-1]["field"] == "instruct"


def test_engine_death_mid_stream_closes_1011_and_aborts(srv: InProcessServer, tone: ToneEngine) -> None:
    w = ws_exchange(f"{srv.ws}/v1/stream", [{"text": "This one will DIE halfway.", "instruct": "x"}])
    assert w.close_code == 1011 and w.texts[-1]["code"] == "engine_dead" and w.texts[-1]["retryable"] is True
    assert w.frames  # the first half was already sent
    assert tone.requests[-1].request_id in tone.aborted  # every engine request is aborted in a finally
    ok = ws_exchange(f"{srv.ws}/v1/stream", [{"text": "Still fine.", "instruct": "x"}])
    assert ok.close_code == 1000


@pytest.mark.parametrize("batched", [False, True])
def test_next_segment_starts_early_only_on_a_batching_engine(batched: bool) -> None:
    """A batching engine gets a response's next sentence while the first is still generating (its scheduler
    ranks first segments first); a non-batching one only once the first has audio (no competition for first
    audio). Either way the audio comes out in sentence order."""
    engine = ToneEngine(batched=batched)
    engine.gate.clear()
    with serving(engine) as s, connect(f"{s.ws}/v1/stream") as ws:
        text = "HOLD the first sentence. " + "Then comes a much longer part of the reply that goes on. " * 4
        ws.send(json.dumps({"text": text, "model": "omnivoice", "voice": "auto"}))
        deadline = time.monotonic() + 3
        while len(engine.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        started_while_held = len(engine.requests)
        engine.gate.set()
        pcm = bytearray()
        while True:
            msg = ws.recv(timeout=30)
            if isinstance(msg, bytes):
                pcm += msg
            else:
                assert json.loads(msg)["done"] is True
                break
    assert started_while_held == (2 if batched else 1)
    indices = [int(r.request_id.rsplit("-", 1)[1]) for r in engine.requests]
    assert len(indices) >= 2 and indices == list(range(len(indices)))
    assert len(pcm) > 0
