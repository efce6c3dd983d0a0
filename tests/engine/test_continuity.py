"""One voice per conversation and chunk modes on the OmniVoice engine (tiny checkpoint, two CPU workers) through
the real Service: segments 2..N are conditioned on segment 1's generated codes, a VoiceThread (a socket or
session) carries the voice into later contexts, two threads stay independent, naming another voice starts
over, sequential chains each segment on the one before, a clone voice stays its own prompt, a seed keeps the
whole reply reproducible, and the joins between segments are click-free."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from realtime_tts.config import load_config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.metrics import Metrics
from realtime_tts.protocol import parse_ws_stream
from realtime_tts.service import AudioFrame, SegmentStarted, Service, Synthesis
from realtime_tts.service.continuity import VoiceThread
from realtime_tts.voices.store import VoiceStore

TEXT = ("Good morning, and welcome to the show. Today we talk about the rivers of the north. "
        "They carry cold water from the mountains to the sea. Some of them freeze in the winter months. "
        "Then the ice breaks and the spring floods come. And after that, we all go home.")


@pytest.fixture(scope="module")
def service(tiny_checkpoint: Path, loop_thread: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    config = load_config({"model": str(tiny_checkpoint), "device": "cpu", "gpus": 2, "cpu_workers": 1}, env={})
    pool = EnginePool(config)

    async def start() -> None:
        await pool.start()
        await pool.wait_started()

    loop_thread.run(start(), timeout=300)
    assert [w.status for w in pool.engines["omnivoice"].health().workers] == ["ok", "ok"]
    yield Service(config, pool, Metrics(), VoiceStore(tmp_path_factory.mktemp("voices")))
    loop_thread.run(pool.stop(), timeout=60)


def speak(service: Service, loop_thread: Any, fields: dict[str, Any], thread: VoiceThread | None = None,
          *, incremental: bool = False) -> tuple[Synthesis, np.ndarray, list[int]]:
    """One /v1/stream-like response (or /v1/stream/text-like: the text word by word) → (synthesis, int16
    samples, each segment's first sample)."""
    req = parse_ws_stream({"text": TEXT, "num_step": 4, "events": True, **fields}, max_chars=10_000)

    async def run() -> tuple[Synthesis, np.ndarray, list[int]]:
        synth = service.open(req, endpoint="test", streaming=True, voice_thread=thread, incremental=incremental)
        pcm, starts = bytearray(), []
        async with synth:
            if incremental:
                for word in req.text.split(" "):
                    synth.feed(word + " ")
                    await asyncio.sleep(0.01)
                synth.end()
            else:
                synth.speak(req.text)
            async for ev in synth.events():
                if isinstance(ev, AudioFrame):
                    pcm += ev.pcm
                elif isinstance(ev, SegmentStarted):
                    starts.append(ev.audio_start_sample)
        return synth, np.frombuffer(bytes(pcm), "<i2"), starts

    return loop_thread.run(run(), timeout=120)


def sources(synth: Synthesis) -> dict[str, str]:
    """segment request_id → the request_id of the segment it was conditioned on (its codes' key or its name)."""
    return {rid: src.removeprefix("gen:") for rid, src in synth.voice_thread.history if rid.startswith(synth.id)}


def test_segments_after_the_first_carry_its_prompt(service: Service, loop_thread: Any) -> None:
    synth, _, starts = speak(service, loop_thread, {"seed": 3})
    first = f"{synth.id}-0"
    assert len(starts) >= 3 and synth.error is None
    assert sources(synth) == {f"{synth.id}-{i}": first for i in range(1, len(starts))}
    prompt = synth.voice_thread.prompt
    assert prompt is not None and prompt.generated and prompt.key == f"gen:{first}"
    assert prompt.ref_text == "Good morning, and welcome to the show." and prompt.num_frames > 0


def test_streamed_text_follows_its_first_segment_too(service: Service, loop_thread: Any) -> None:
    """/v1/stream/text: the first unit may start speculatively (request id "<id>-0s1"); the rest follow it."""
    synth, _, starts = speak(service, loop_thread, {"seed": 4}, incremental=True)
    assert len(starts) >= 3 and synth.error is None
    (source,) = set(sources(synth).values())
    assert source.startswith(f"{synth.id}-0") and len(sources(synth)) == len(starts) - 1
    assert synth.voice_thread is not None and synth.voice_thread.prompt is not None


def test_the_voice_persists_across_contexts_until_another_is_named(service: Service, loop_thread: Any) -> None:
    thread = VoiceThread()
    one, _, _ = speak(service, loop_thread, {}, thread)
    key = thread.prompt.key if thread.prompt else None
    two, _, _ = speak(service, loop_thread, {}, thread)
    assert key == f"gen:{one.id}-0" and thread.prompt is not None and thread.prompt.key == key
    # every segment of the second context, its first too, is on the first context's voice
    assert sources(two) == {f"{two.id}-{i}": f"{one.id}-0" for i in range(two.num_segments)}
    three, _, _ = speak(service, loop_thread, {"voice": "alloy"}, thread)  # another voice: a new thread
    assert thread.prompt is not None and thread.prompt.key == f"gen:{three.id}-0"
    assert set(sources(three).values()) == {f"{three.id}-0"}


def test_two_sockets_get_independent_voices(service: Service, loop_thread: Any) -> None:
    a, b = VoiceThread(), VoiceThread()
    sa, _, _ = speak(service, loop_thread, {}, a)
    sb, _, _ = speak(service, loop_thread, {}, b)
    assert set(sources(sa).values()) == {f"{sa.id}-0"} and set(sources(sb).values()) == {f"{sb.id}-0"}
    assert a.prompt is not None and b.prompt is not None and a.prompt.codes != b.prompt.codes


def test_sequential_chains_each_segment_on_the_previous(service: Service, loop_thread: Any) -> None:
    synth, _, starts = speak(service, loop_thread, {"chunk_mode": "sequential", "seed": 1})
    assert len(starts) >= 3
    assert sources(synth) == {f"{synth.id}-{i}": f"{synth.id}-{i - 1}" for i in range(1, len(starts))}


def test_a_clone_voice_stays_its_own_prompt(service: Service, loop_thread: Any) -> None:
    engine = service.pool.engines["omnivoice"]
    rng = np.random.default_rng(0)
    prompt = loop_thread.run(engine.encode_voice(0.1 * rng.standard_normal(24_000).astype(np.float32), 24_000,
                                                 "A reference."))
    saved = service.voices.save(prompt, name="ref")  # type: ignore[union-attr]
    synth, _, starts = speak(service, loop_thread, {"voice": saved.voice_id})
    assert len(starts) >= 3 and synth.params.voice_mode == "clone" and sources(synth) == {}


def test_a_seed_keeps_the_whole_reply_reproducible(service: Service, loop_thread: Any) -> None:
    _, one, _ = speak(service, loop_thread, {"seed": 11})
    _, two, _ = speak(service, loop_thread, {"seed": 11})
    np.testing.assert_array_equal(one, two)


def join_jumps(audio: np.ndarray, starts: list[int], window: int = 240) -> tuple[float, float]:
    """(largest |sample step| within ±window samples of each join, 99.9th percentile of |sample step| elsewhere)."""
    steps = np.abs(np.diff(audio.astype(np.float64)))
    near = np.zeros(steps.size, bool)
    for s in starts[1:]:
        near[max(0, s - window): s + window] = True
    return float(steps[near].max()), float(np.percentile(steps[~near], 99.9))


def test_joins_are_click_free(service: Service, loop_thread: Any) -> None:
    _, audio, starts = speak(service, loop_thread, {"seed": 5})
    at_joins, inside = join_jumps(audio, starts)
    print(f"largest step at a join {at_joins:.0f}, in-segment p99.9 {inside:.0f} (int16)")
    assert at_joins <= inside



def test_two_workers_share_a_saved_voice(service: Service, loop_thread: Any) -> None:
    """One saved voice, requests spread over both workers (least in flight first): each worker serves some,
    from the same prompt (its own decoded copy), and the same seed gives the same audio on either."""
    engine = service.pool.engines["omnivoice"]
    rng = np.random.default_rng(1)
    prompt = loop_thread.run(engine.encode_voice(0.1 * rng.standard_normal(24_000).astype(np.float32), 24_000,
                                                 "Shared reference."))
    saved = service.voices.save(prompt, name="shared")  # type: ignore[union-attr]
    before = {s.worker_id: s.num_finished for s in engine.worker_stats()}
    req = parse_ws_stream({"text": "One voice on two workers.", "voice": saved.voice_id, "num_step": 4, "seed": 6},
                          max_chars=1000)

    async def one() -> bytes:
        synth = service.open(req, endpoint="test", streaming=False)
        async with synth:
            synth.speak(req.text)
            return b"".join([ev.pcm async for ev in synth.events() if isinstance(ev, AudioFrame)])

    async def four() -> list[bytes]:
        return list(await asyncio.gather(*(one() for _ in range(4))))

    bodies = loop_thread.run(four())
    assert len(set(bodies)) == 1 and bodies[0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # worker reports come every 0.25 s
        served = {s.worker_id: s.num_finished - before.get(s.worker_id, 0) for s in engine.worker_stats()}
        if len(served) == 2 and all(n >= 1 for n in served.values()):
            break
        time.sleep(0.1)
    assert len(served) == 2 and all(n >= 1 for n in served.values()), served


def test_a_session_keeps_one_voice_across_its_contexts(service: Service, loop_thread: Any) -> None:
    """Session mode (service/session.py): every context of a session is on the session's VoiceThread, so the
    second context (opened after the first ended) is spoken on the first context's first segment; another
    session has a voice of its own."""
    from realtime_tts.service.session import ContextDone, Session

    params = parse_ws_stream({"text": ".", "num_step": 4}, max_chars=100).params

    async def run() -> tuple[Session, Session, dict[str, int]]:
        one, two = Session(service, params), Session(service, params)
        segments: dict[str, int] = {}

        async def reply(session: Session, cid: str, text: str) -> None:
            session.speak(cid, text)
            while True:
                got, ev = await session.next()
                if isinstance(ev, SegmentStarted):
                    segments[got] = segments.get(got, 0) + 1
                if got == cid and isinstance(ev, ContextDone):
                    assert ev.reason == "end", ev
                    return

        await reply(one, "a", TEXT)
        await reply(one, "b", "They carry cold water to the sea. Some of them freeze in winter.")
        await reply(two, "c", "Good morning, and welcome to the show. Today we talk about rivers.")
        await one.aclose()
        await two.aclose()
        return one, two, segments

    one, two, segments = loop_thread.run(run(), timeout=180)
    t1, t2 = one.voice_thread, two.voice_thread
    assert t1.prompt is not None and t2.prompt is not None and t1.prompt.codes != t2.prompt.codes
    first = (t1.prompt.key or "").removeprefix("gen:")
    assert first.endswith("-0")
    # every segment of the session but the first is conditioned on the first one: a's later ones and all of b's
    assert [src.removeprefix("gen:") for _, src in t1.history] == [first] * (segments["a"] + segments["b"] - 1)
    assert segments["a"] >= 3 and segments["b"] >= 1  # so b's first segment is among the conditioned ones
