"""WS /v1/stream against a real server: the LunaVox example unmodified, real speech, framing, stats,
stream == one-shot for the same input and seed, cancel."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import numpy as np
import soundfile as sf
import websockets
from live_server import SAMPLE_RATE, Server, assert_speech, pcm_to_float, ws_exchange

STATS_KEYS = {"t_total_ms", "ttfa_ms", "queue_ms", "audio_duration_ms", "rtf", "segments", "batch_size_mean",
              "engine", "device", "mem"}
MEM_KEYS = {"rss_start_bytes", "rss_end_bytes", "rss_peak_bytes", "vram_start_bytes", "vram_end_bytes",
            "vram_peak_bytes", "vram_measured"}


def test_lunavox_example_unmodified(server: Server) -> None:
    pcm: list[bytes] = []
    printed: list[object] = []

    async def main() -> None:
        # The LunaVox serve docs example, verbatim apart from the port and print → list.
        async with websockets.connect(f"{server.ws}/v1/stream") as ws:
            await ws.send(json.dumps({"text": "Hello from the server.", "voice": "base"}))
            while True:
                msg = await ws.recv()
                if isinstance(msg, bytes): pcm.append(msg)
                else: printed.append(json.loads(msg)["stats"]); break

    asyncio.run(main())
    assert len(printed) == 1 and isinstance(printed[0], dict)
    assert_speech(pcm_to_float(b"".join(pcm)), min_s=0.8, max_s=3.0)


def test_real_speech_frames_and_stats(server: Server) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": "The quick brown fox jumps over the lazy dog.", "seed": 7}])
    assert r.close_code == 1000
    assert len(r.texts) == 1  # simple mode: no JSON frame but the terminal one
    t = r.terminal
    assert t["sample_rate"] == SAMPLE_RATE and t["reason"] == "end"
    stats = t["stats"]
    assert STATS_KEYS <= set(stats) and MEM_KEYS <= set(stats["mem"])
    assert stats["mem"]["vram_measured"] is False and stats["engine"] == "cpu" and stats["device"] == "cpu"
    mem = stats["mem"]
    assert mem["rss_peak_bytes"] >= mem["rss_end_bytes"] > 0 and mem["rss_start_bytes"] > 0
    assert 0 < stats["ttfa_ms"] <= stats["t_total_ms"]
    # announced rate == actual: the stats' duration is the PCM we got at the announced rate
    assert abs(stats["audio_duration_ms"] - len(r.pcm) / t["sample_rate"] * 1e3) < 1.0
    sizes = [len(f) // 2 for f in r.frames]
    assert sizes[0] == SAMPLE_RATE * 30 // 1000  # small first frame
    assert max(sizes) <= SAMPLE_RATE * 120 // 1000
    assert all(len(f) % 2 == 0 for f in r.frames)
    assert_speech(r.pcm, min_s=1.5, max_s=4.5)
    # pacing: the voice's ~0.3 s lead-in is cut to <= 80 ms
    lead = int(np.argmax(np.abs(r.pcm) > 10 ** (-45 / 20)))
    assert lead <= SAMPLE_RATE * 0.085


def test_duration_proportional_to_text(server: Server) -> None:
    short = "I like green apples."
    long = ("I like green apples. My brother prefers the red ones from the market. "
            "We usually buy a whole bag every Saturday morning and share them with our neighbours.")
    a = ws_exchange(f"{server.ws}/v1/stream", [{"text": short, "seed": 1}]).pcm
    b = ws_exchange(f"{server.ws}/v1/stream", [{"text": long, "seed": 1}]).pcm
    words_ratio = len(long.split()) / len(short.split())
    ratio = len(b) / len(a)
    assert 0.6 * words_ratio < ratio < 1.4 * words_ratio, (ratio, words_ratio)


def test_stream_equals_one_shot_for_same_seed(server: Server) -> None:
    text = ("Good morning. The weather today is sunny, with a light breeze from the west. Enjoy your day! "
            "Later this afternoon clouds will gather over the hills, and by the evening a little rain may fall, "
            "so keep an umbrella close. Tomorrow looks bright again.")  # longer than one segment
    streamed = ws_exchange(f"{server.ws}/v1/stream", [{"text": text, "seed": 42}])
    again = ws_exchange(f"{server.ws}/v1/stream", [{"text": text, "seed": 42}])
    resp = httpx.post(f"{server.http}/v1/synth", json={"text": text, "seed": 42, "voice": "base"}, timeout=60)
    assert resp.status_code == 200 and resp.headers["content-type"] == "audio/wav"
    samples, rate = sf.read(io.BytesIO(resp.content), dtype="int16")
    assert rate == SAMPLE_RATE == int(resp.headers["x-audio-sample-rate"])
    ws_pcm = b"".join(streamed.frames)
    assert ws_pcm == b"".join(again.frames)  # deterministic with a seed
    assert samples.astype("<i2").tobytes() == ws_pcm  # frames in order: same bytes as the one-shot body
    assert streamed.terminal["stats"]["segments"] >= 2


def test_openai_voice_names_map_to_the_cpu_voice(server: Server) -> None:
    base = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Testing one two three.", "seed": 5, "voice": "auto"}])
    for name in ("alloy", "nova", "base", "heart"):
        r = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Testing one two three.", "seed": 5, "voice": name}])
        assert r.close_code == 1000, (name, r.texts)
        assert b"".join(r.frames) == b"".join(base.frames)


def test_cancel_stops_early_with_reason(server: Server) -> None:
    text = " ".join(f"This is sentence number {i}, and it is here to make the reply long." for i in range(40))
    from websockets.sync.client import connect

    frames: list[bytes] = []
    with connect(f"{server.ws}/v1/stream") as ws:
        ws.send(json.dumps({"text": text}))
        frames.append(ws.recv(timeout=30))  # type: ignore[arg-type]
        ws.send(json.dumps({"cancel": True}))
        while True:
            msg = ws.recv(timeout=30)
            if isinstance(msg, str):
                terminal = json.loads(msg)
                break
            frames.append(msg)
    assert terminal["done"] is True and terminal["reason"] == "cancelled"
    audio_s = sum(len(f) for f in frames) / 2 / SAMPLE_RATE
    assert audio_s < 60  # 40 long sentences would be ~3 minutes
    assert httpx.get(f"{server.http}/health").status_code == 200


def test_unknown_fields_are_reported_not_fatal(server: Server) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Hello there.", "voice": "base", "shiny_new_option": 3}])
    assert r.close_code == 1000
    assert any("shiny_new_option" in w for w in r.terminal["warnings"])
    assert_speech(r.pcm, min_s=0.5, max_s=3.0)


def test_pacing_between_sentences_and_at_the_end(server: Server) -> None:
    """The voice pads each sentence with ~0.3 s before and ~0.45 s after; the joins must come out as one
    natural pause (<= gap_ms, 240) and the tail as <= tail_ms (120)."""
    text = "One sentence here. Another one follows it. And a third closes the reply."
    pcm = ws_exchange(f"{server.ws}/v1/stream", [{"text": text, "seed": 8}]).pcm
    win = SAMPLE_RATE // 200  # 5 ms
    n = len(pcm) // win
    silent = np.abs(pcm[: n * win]).reshape(n, win).max(axis=1) < 10 ** (-45 / 20)
    runs: list[tuple[bool, int]] = []
    for s in silent:
        if runs and runs[-1][0] == s:
            runs[-1] = (bool(s), runs[-1][1] + 1)
        else:
            runs.append((bool(s), 1))
    pauses_ms = [k * 5 for s, k in runs if s]
    assert runs[0][0] and pauses_ms[0] <= 85  # lead-in
    assert runs[-1][0] and pauses_ms[-1] <= 125  # tail
    assert max(pauses_ms) <= 245  # sentence joins
    assert sum(1 for p in pauses_ms if p >= 150) >= 2  # ...but the two joins are still audible pauses
