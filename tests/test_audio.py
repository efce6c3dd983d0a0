"""audio.py: pacing (silence trimming), framing and encoders, on real CPU-voice output and exact signals."""

from __future__ import annotations

import numpy as np
import pytest

from realtime_tts import audio

SR = 24_000
THRESH = 10 ** (-45 / 20)


def pacer(**kw: float) -> audio.Pacer:
    args = {"lead_in_ms": 80, "gap_ms": 240, "tail_ms": 120, "silence_db": -45.0, **kw}
    return audio.Pacer(SR, **args)  # type: ignore[arg-type]


def run(p: audio.Pacer, parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([p.push(x) for x in parts] + [p.finish()])


def tone(seconds: float, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SR)) / SR
    return (amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), np.float32)


def runs(x: np.ndarray) -> list[tuple[bool, float]]:
    """(is_silent, seconds) runs at 5 ms resolution."""
    win = SR // 200
    n = len(x) // win
    silent = np.abs(x[: n * win]).reshape(n, win).max(axis=1) < THRESH
    out: list[tuple[bool, float]] = []
    for s in silent:
        if out and out[-1][0] == s:
            out[-1] = (bool(s), out[-1][1] + win / SR)
        else:
            out.append((bool(s), win / SR))
    return out


@pytest.fixture(scope="module")
def voice() -> object:
    from hibari import Hibari

    return Hibari(threads=1)


def test_pacer_trims_lead_gap_and_tail_exactly() -> None:
    x = [silence(0.3), tone(0.5), silence(0.75), tone(0.4), silence(0.1), tone(0.2), silence(0.45)]
    out = run(pacer(), x)
    r = runs(out)
    assert r[0][0] and r[0][1] == pytest.approx(0.080, abs=0.006)  # lead-in cut to 80 ms
    assert not r[1][0] and r[1][1] == pytest.approx(0.5, abs=0.006)
    assert r[2][0] and r[2][1] == pytest.approx(0.240, abs=0.006)  # 750 ms join cut to the 240 ms gap
    assert r[4][0] and r[4][1] == pytest.approx(0.1, abs=0.006)  # a short pause inside speech is untouched
    assert r[-1][0] and r[-1][1] == pytest.approx(0.120, abs=0.006)  # tail cut to 120 ms
    speech = sum(s for q, s in r if not q)
    assert speech == pytest.approx(1.1, abs=0.02)  # no speech is lost


def test_pacer_is_independent_of_chunking(voice: object) -> None:
    speech = np.concatenate([voice("Hello there.", seed=1), voice("How are you today?", seed=1)])  # type: ignore[operator]
    whole = run(pacer(), [speech])
    rng = np.random.default_rng(0)
    cuts = np.sort(rng.choice(len(speech), 40, replace=False))
    pieces = np.split(speech, cuts)
    assert np.array_equal(run(pacer(), pieces), whole)


def test_pacer_on_real_voice_sentence_joins(voice: object) -> None:
    a = voice("The first sentence ends here.", seed=2)  # type: ignore[operator]
    b = voice("And the second one follows.", seed=2)  # type: ignore[operator]
    raw = np.concatenate([a, b])
    out = run(pacer(), [a, b])
    r = runs(out)
    assert r[0][0] and r[0][1] <= 0.085  # the voice's ~0.3 s lead-in is cut
    assert r[-1][0] and r[-1][1] <= 0.125
    longest_pause = max(s for q, s in r if q)
    assert longest_pause <= 0.245  # the ~0.75 s join is now at most one gap
    assert len(out) < len(raw) - 0.6 * SR


def test_framer_first_frame_small_then_regular() -> None:
    f = audio.Framer(SR, first_frame_ms=30, frame_ms=120)
    frames = f.push(b"\x01\x00" * SR)  # 1 s
    sizes = [len(x) // 2 for x in frames]
    assert sizes[0] == 720 and set(sizes[1:]) == {2880}
    rest = f.flush()
    assert sum(sizes) + sum(len(x) // 2 for x in rest) == SR


def test_to_pcm16_clips() -> None:
    pcm = np.frombuffer(audio.to_pcm16(np.array([2.0, -2.0, 0.5], np.float32)), "<i2")
    assert pcm.tolist() == [32767, -32767, 16383]


