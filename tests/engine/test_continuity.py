"""One voice per conversation and chunk modes on the OmniVoice engine (tiny checkpoint, two CPU workers) through
the real Service: segments 2..N are conditioned on segment 1's generated codes, a VoiceThread (a socket or
session) carries the voice into later contexts, two threads stay independent, naming another voice starts
over, sequential chains each segment on the one before, a clone voice stays its own prompt, a seed keeps the
whole reply reproducible, and the joins between segments are click-free."""

from __future__ import annotations

import asyncio
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

