"""The speculative first unit on WS /v1/stream/text (real server, real CPU voice): first audio does not wait for
the next word; a wrong guess is aborted and changes no byte of the audio; cancel, disconnect, flush and end
leave no engine work behind; /metrics counts speculations, hits and misses. An in-process server whose CPU
voice is wrapped in a recorder shows the engine requests themselves (one per sentence on a hit) and the
estimated deadlines of later segments before first audio."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx
import numpy as np
import pytest
from live_server import InProcessServer, Server, assert_speech, metric, ws_exchange
from websockets.sync.client import connect

from realtime_tts.engine.base import AudioChunk, Capabilities, Engine, SegmentRequest, VoicePrompt
from realtime_tts.omnivoice_text import FRAME_RATE_HZ, target_frames
from realtime_tts.service import estimate_audio_s, playback_deadline
from realtime_tts.text import SentenceBuffer

FIRST = ["Sure", ",", " I", " can", " help", " with", " that", "."]  # LLM-style tokens: the space leads
REST = [" Your", " order", " ships", " today", " and", " arrives", " on", " Friday", "."]
SENTENCE = "Sure, I can help with that."


def counters(server_http: str) -> dict[str, float]:
    return {name: metric(server_http, name)
            for name in ("speculations_total", "speculation_hits_total", "speculation_misses_total")}


def delta(before: dict[str, float], after: dict[str, float]) -> tuple[float, float, float]:
    """(speculations, hits, misses) since `before`."""
    started, hits, misses = (after[k] - before[k] for k in before)
    return started, hits, misses


def read_to_end(ws: Any, timeout: float = 30) -> tuple[bytes, list[dict[str, Any]]]:
    pcm = bytearray()
    texts: list[dict[str, Any]] = []
    while True:
        msg = ws.recv(timeout=timeout)
        if isinstance(msg, bytes):
            pcm += msg
        else:
            texts.append(json.loads(msg))
            if texts[-1].get("done"):
                return bytes(pcm), texts


def engine_idle(http: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        cpu = httpx.get(f"{http}/health").json()["engines"]["cpu"]
        if cpu["queued_segments"] == 0 and cpu["in_flight_segments"] == 0 and cpu["idle"] == cpu["pool_size"]:
            return cpu  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, cpu
        time.sleep(0.05)


def test_first_audio_arrives_before_the_next_word(server: Server) -> None:
    before = counters(server.http)
    with connect(f"{server.ws}/v1/stream/text", max_size=None) as ws:
        ws.send(json.dumps({"voice": "base", "seed": 21, "events": True}))
        for token in FIRST:
            ws.send(json.dumps({"text": token}))
        # No more text: the sentence is spoken anyway, before the client sends another word.
        first = ws.recv(timeout=30)
        while isinstance(first, str) and json.loads(first).get("type") == "segment.start":
            assert json.loads(first)["text"] == SENTENCE
            first = ws.recv(timeout=30)
        assert isinstance(first, bytes) and len(first) > 0
        for token in REST:
            ws.send(json.dumps({"text": token}))
        ws.send(json.dumps({"end": True}))
        pcm, texts = read_to_end(ws)
    starts = [m["text"] for m in texts if m.get("type") == "segment.start"]
    assert starts == ["Your order ships today and arrives on Friday."]  # segment 0 was announced above
    whole_text = "".join(FIRST + REST)
    whole = ws_exchange(f"{server.ws}/v1/stream", [{"text": whole_text, "voice": "base", "seed": 21}])
    assert first + pcm == b"".join(whole.frames)  # the early cut is where the text cuts anyway: same audio
    assert delta(before, counters(server.http)) == (1, 1, 0)


@pytest.mark.parametrize("tokens", [
    ["The price went up by 3", ".", "5 percent", " this year", "."],  # "3." then a digit: a decimal point
    ["She asked", " \"why", "?\"", " and", " then she left", "."],  # "?" then a lowercase word: goes on
])
def test_a_wrong_guess_is_aborted_and_changes_no_audio(server: Server, tokens: list[str]) -> None:
    before = counters(server.http)
    msgs: list[Any] = [{"voice": "base", "seed": 5}]
    msgs += [{"text": t} for t in tokens] + [{"end": True}]
    r = ws_exchange(f"{server.ws}/v1/stream/text", msgs)
    assert r.close_code == 1000 and r.terminal["sentences"] == 1
    whole = ws_exchange(f"{server.ws}/v1/stream", [{"text": "".join(tokens), "voice": "base", "seed": 5}])
    assert b"".join(r.frames) == b"".join(whole.frames)
    assert_speech(r.pcm, min_s=1.5, max_s=6.0)
    # the wrong guess missed; the final "." offered the whole sentence again and end() adopted it
    assert delta(before, counters(server.http)) == (2, 1, 1)
    engine_idle(server.http)


def test_a_guess_after_a_number_waits_for_the_next_word(server: Server) -> None:
    """ "by 3." may go on as "3.5": its audio is made early but held until the text decides."""
    before = counters(server.http)
    with connect(f"{server.ws}/v1/stream/text", max_size=None) as ws:
        ws.send(json.dumps({"seed": 4}))
        for token in ["The price went up by 3", "."]:
            ws.send(json.dumps({"text": token}))
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.6)  # ~10x the time its audio takes here: held, not sent
        ws.send(json.dumps({"text": " Then it fell again."}))
        assert isinstance(ws.recv(timeout=30), bytes)
        ws.send(json.dumps({"end": True}))
        _, texts = read_to_end(ws)
    assert texts[-1]["sentences"] == 2
    assert delta(before, counters(server.http)) == (1, 1, 0)


def test_flush_and_end_adopt_the_speculation(server: Server) -> None:
    for closing in ({"flush": True}, {"end": True}):
        before = counters(server.http)
        with connect(f"{server.ws}/v1/stream/text", max_size=None) as ws:
            ws.send(json.dumps({"seed": 8}))
            ws.send(json.dumps({"text": SENTENCE}))
            ws.send(json.dumps(closing))
            assert isinstance(ws.recv(timeout=30), bytes)
            if "flush" in closing:
                ws.send(json.dumps({"end": True}))
            _, texts = read_to_end(ws)
        assert texts[-1]["sentences"] == 1
        assert delta(before, counters(server.http)) == (1, 1, 0), closing


def test_cancel_and_disconnect_while_speculating_leave_no_work(server: Server) -> None:
    before = counters(server.http)
    with connect(f"{server.ws}/v1/stream/text") as ws:  # cancelled while the guess runs
        ws.send(json.dumps({}))
        ws.send(json.dumps({"text": "Let me look that up for you right now."}))
        ws.send(json.dumps({"cancel": True}))
        _, texts = read_to_end(ws)
        assert texts[-1]["reason"] == "cancelled"
    for _ in range(3):  # gone while the guess runs
        with connect(f"{server.ws}/v1/stream/text") as ws:
            ws.send(json.dumps({}))
            ws.send(json.dumps({"text": "Let me look that up for you right now."}))
    engine_idle(server.http)
    started, _, misses = delta(before, counters(server.http))
    assert started == 4 and misses == 0  # a cancelled guess is no miss (and a quick one may have become a hit)
    metrics = httpx.get(f"{server.http}/metrics").text
    assert 'realtime_tts_cancellations_total{stage="client"}' in metrics
    assert 'realtime_tts_cancellations_total{stage="disconnect"}' in metrics


def test_estimated_audio_seconds() -> None:
    text = "The train leaves at nine in the morning."
    assert estimate_audio_s(text, engine="cpu") == pytest.approx(8 * 0.3)  # 8 words
    assert estimate_audio_s(text, engine="cpu", speed=2.0) == pytest.approx(8 * 0.3 / 2)
    assert estimate_audio_s(text, engine="omnivoice") == target_frames(text) / FRAME_RATE_HZ
    prompt = VoicePrompt(engine="omnivoice", ref_text="Slow and steady.", codes=b"", num_codebooks=8,
                         num_frames=100, ref_rms=0.1)
    assert estimate_audio_s(text, engine="omnivoice", prompt=prompt) == \
        target_frames(text, "Slow and steady.", 100) / FRAME_RATE_HZ
    assert estimate_audio_s(text, engine="cpu", duration_s=1.25) == 1.25
    assert estimate_audio_s("?!", engine="cpu") == 0.0


def test_playback_deadline_rule() -> None:
    """The service's deadline rule (also replayed by bench/omnivoice_sched_sim.py): nothing before a first
    segment starts; before first audio, the expected first audio + 0.9 x the estimate of the earlier segments;
    after it, the first audio + the longer of what was sent and that trimmed estimate."""
    assert playback_deadline(None, None, 0.0, 5.0) is None
    assert playback_deadline(None, 10.0, 0.0, 2.0) == pytest.approx(10.0 + 0.9 * 2.0)
    assert playback_deadline(3.0, 10.0, 4.0, 2.0) == pytest.approx(3.0 + 4.0)  # more sent than estimated
    assert playback_deadline(3.0, 10.0, 1.0, 2.0) == pytest.approx(3.0 + 0.9 * 2.0)  # later ones still generating


# -- the engine requests themselves: an in-process server whose CPU voice is wrapped in a recorder -------------

class Recorder:
    """The real CPU voice, recording every request and whether it ran to its last chunk. batched=True makes
    the service submit a reply's later segments at once (as on OmniVoice), before any audio."""

    def __init__(self, inner: Engine, *, batched: bool) -> None:
        self.inner = inner
        self.requests: list[SegmentRequest] = []
        self.finished: set[str] = set()
        self._caps = replace(inner.capabilities, batched=batched)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    async def start(self) -> None:
        await self.inner.start()

    async def stop(self) -> None:
        await self.inner.stop()

    def check(self, request: SegmentRequest) -> None:
        self.inner.check(request)  # type: ignore[attr-defined]

    async def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        self.requests.append(request)
        async for chunk in self.inner.synthesize(request):
            yield chunk
        self.finished.add(request.request_id)

    async def abort(self, request_id: str) -> None:
        await self.inner.abort(request_id)

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        return await self.inner.encode_voice(audio, sample_rate, ref_text)

    def health(self) -> Any:
        return self.inner.health()

    def load(self) -> Any:
        return self.inner.load()


class RecordingServer(InProcessServer):
    """The real app whose CPU voice is wrapped in a Recorder (what the service asked the engine for)."""

    def __init__(self, *, batched: bool) -> None:
        wrapped: list[Recorder] = []

        def wrap(pool: Any) -> None:
            wrapped.append(Recorder(pool.engines["cpu"], batched=batched))
            pool.engines["cpu"] = wrapped[0]

        super().__init__(wrap)
        self.engine = wrapped[0]


@pytest.fixture(scope="module")
def recording() -> Iterator[RecordingServer]:
    with RecordingServer(batched=True) as s:
        yield s


def requests_of(engine: Recorder, n: int) -> list[SegmentRequest]:
    """The requests of the last response (ids are '<synthesis id>-<segment>')."""
    synth_id = engine.requests[-1].request_id.split("-")[0]
    return [r for r in engine.requests[n:] if r.request_id.startswith(synth_id + "-")]


def test_a_hit_is_one_engine_request_and_a_miss_is_aborted(recording: RecordingServer) -> None:
    engine = recording.engine
    n = len(engine.requests)
    msgs: list[Any] = [{"seed": 1}] + [{"text": t} for t in FIRST + REST] + [{"end": True}]
    assert ws_exchange(f"{recording.ws}/v1/stream/text", msgs).close_code == 1000
    reqs = requests_of(engine, n)
    assert [(r.request_id.split("-")[1], r.text, r.priority) for r in reqs] == [
        ("0s1", SENTENCE, 0), ("1", "Your order ships today and arrives on Friday.", 1)]
    assert {r.request_id for r in reqs} <= engine.finished  # the guess ran once, to its end, as segment 0

    n = len(engine.requests)
    tokens = ["Visit us at example", ".", "com for the full list"]  # no final mark: end() cuts, nothing to guess
    msgs = [{"seed": 1}] + [{"text": t} for t in tokens] + [{"end": True}]
    assert ws_exchange(f"{recording.ws}/v1/stream/text", msgs).close_code == 1000
    reqs = requests_of(engine, n)
    assert [(r.request_id.split("-")[1], r.text) for r in reqs] == [
        ("0s1", "Visit us at example."), ("0", "Visit us at example.com for the full list")]
    assert reqs[0].request_id not in engine.finished and reqs[1].request_id in engine.finished
    assert reqs[0].priority == reqs[1].priority == 0
    engine_idle(recording.http)


def test_a_later_segment_gets_a_deadline_before_first_audio(recording: RecordingServer) -> None:
    """A reply's later segment gets the moment playback would run dry without it: the first audio's (expected)
    time plus the audio of every segment before it (sent, or estimated and trimmed by 10%)."""
    engine = recording.engine
    n = len(engine.requests)
    text = ("Okay. The train leaves at nine in the morning from platform four. "
            + "Bring a warm coat, because it gets cold on the platform while you wait. " * 4 + "See you there!")
    t0 = time.monotonic()
    r = ws_exchange(f"{recording.ws}/v1/stream/text", [{"seed": 2, "text": text, "events": True}, {"end": True}])
    t1 = time.monotonic()
    reqs = requests_of(engine, n)
    units = [m["text"] for m in r.texts if m.get("type") == "segment.start"]
    assert [q.text for q in reqs] == units and len(units) >= 3
    assert reqs[0].deadline_s is None  # the first segment goes by priority alone
    assert all(q.deadline_s is not None and t0 < q.deadline_s < t1 + 60 for q in reqs[1:])
    due = reqs[1].deadline_s - t0  # type: ignore[operator]
    # "Okay.": 0.3 s expected first audio + 0.9 × its estimated 0.3 s of audio
    expected = 0.3 + 0.9 * estimate_audio_s(units[0], engine="cpu")
    assert expected <= due <= expected + (t1 - t0), (due, expected)
    # each later segment is due after the audio of every segment before it, not with the one before it
    deadlines = [q.deadline_s for q in reqs[1:]]
    assert all(b > a for a, b in itertools.pairwise(deadlines)), deadlines  # type: ignore[operator]


def test_buffer_offers_what_the_tests_above_assume() -> None:
    """The token lists above guess where the text says they do (a failure here explains one there)."""
    for tokens, offered in ((FIRST, SENTENCE), (["Visit us at example", "."], "Visit us at example.")):
        buffer = SentenceBuffer()
        for t in tokens:
            assert buffer.feed(t) == []
        peeked = buffer.peek_first_unit()
        assert peeked is not None and peeked.text == offered
