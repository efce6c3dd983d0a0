"""Reference uploads: every container libsndfile reads decodes to mono at its own rate, the edges are trimmed by
the reference implementation's rule (−50 dBFS per 10 ms, 100 ms kept before, 200 ms after, judged after a
quiet reference is lifted to RMS 0.1), and bad recordings are refused naming the field."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from realtime_tts.errors import BadRequest
from realtime_tts.voices.reference import decode, trim_edges

SR = 16_000


def noise(seconds: float, level: float = 0.2, rate: int = SR) -> np.ndarray:
    return (level * np.random.default_rng(0).standard_normal(int(seconds * rate))).astype(np.float32)


def encoded(x: np.ndarray, rate: int = SR, fmt: str = "WAV", subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize("fmt,subtype", [("FLAC", "PCM_16"), ("MP3", "MPEG_LAYER_III"), ("OGG", "VORBIS"),
                                         ("OGG", "OPUS"), ("WAV", "PCM_16"), ("WAV", "FLOAT")])
def test_containers_decode_to_mono_at_their_rate(fmt: str, subtype: str) -> None:
    rate = 48_000 if subtype == "OPUS" else 44_100
    x = noise(1.0, rate=rate)
    y, got_rate = decode(encoded(np.stack([x, x], axis=1), rate, fmt, subtype))  # a stereo upload
    assert got_rate == rate and y.ndim == 1 and y.dtype == np.float32
    assert abs(len(y) / rate - 1.0) < 0.1


def test_edges_are_trimmed_to_100_ms_before_and_200_ms_after() -> None:
    x = np.concatenate([np.zeros(SR), noise(1.0), np.zeros(2 * SR)])
    y = trim_edges(x, SR)
    assert len(y) == int(0.1 * SR) + SR + int(0.2 * SR)
    np.testing.assert_array_equal(y[int(0.1 * SR): int(0.1 * SR) + SR], x[SR: 2 * SR])
    short_pad = np.concatenate([np.zeros(int(0.05 * SR)), noise(1.0)])  # less silence than is kept: all stays
    assert len(trim_edges(short_pad, SR)) == len(short_pad)


def test_a_quiet_reference_is_judged_as_lifted_to_rms_0_1() -> None:
    """A soft recording (RMS 0.001) with a hiss at −70 dBFS: lifted by 40 dB the hiss is −30 dBFS, speech
    for the rule, so it stays — as the reference implementation keeps it."""
    hiss = noise(0.5, level=10 ** (-70 / 20))
    x = np.concatenate([hiss, noise(1.0, level=0.001)])
    assert len(trim_edges(x, SR)) == len(x)
    assert len(trim_edges(np.concatenate([hiss, noise(1.0, level=0.2)]), SR)) < len(x)  # loud speech: hiss is cut


def test_bad_recordings_name_the_field() -> None:
    cases = {
        "not audio": b"definitely not a sound file" * 100,
        "empty": b"",
        "too long": encoded(noise(31.0, rate=8000), 8000),
        "too short": encoded(noise(0.2)),
        "silence only": encoded(np.zeros(2 * SR, np.float32)),
        "nan": encoded(np.full(SR, np.nan, np.float32), subtype="FLOAT"),
    }
    for case, data in cases.items():
        with pytest.raises(BadRequest) as info:
            decode(data, field="audio")
        assert info.value.field == "audio", case
