"""Reference recordings for cloning: an upload's bytes → float32 mono samples ready to encode.

Decoded by libsndfile (soundfile: wav, flac, ogg/vorbis/opus, mp3), channels mixed down, length checked
(MIN_S..MAX_S), leading and trailing silence trimmed by the reference implementation's rule (see trim_edges).
The sample rate is kept: the engine resamples when it encodes (one resampler for every path). Runs on a
thread (decoding is CPU work). Imports numpy, soundfile and errors only.
"""

from __future__ import annotations

import io

import numpy as np

from realtime_tts.errors import BadRequest

MIN_S = 0.5
MAX_S = 30.0
# The reference implementation's prompt rule (omnivoice.utils.audio.remove_silence_edges as called by
# create_voice_clone_prompt): 10 ms chunks whose RMS is under -50 dBFS are silence; 100 ms of the leading
# silence and 200 ms of the trailing silence are kept. It judges the audio after lifting a quiet reference
# to RMS 0.1, so the threshold here is moved by the same gain.
_CHUNK_S = 0.010
_SILENCE_DBFS = -50.0
_KEEP_LEAD_S = 0.100
_KEEP_TRAIL_S = 0.200
_QUIET_RMS = 0.1


def decode(data: bytes, *, field: str = "ref_audio") -> tuple[np.ndarray, int]:
    """Upload bytes → (float32 mono [num_samples], sample rate), trimmed and length-checked. Every
    refusal is a BadRequest naming `field`."""
    import soundfile as sf

    if not data:
        raise BadRequest(f"{field} is empty", field=field)
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)  # [num_samples, channels]
    except (RuntimeError, ValueError, TypeError, EOFError) as e:  # soundfile.LibsndfileError is a RuntimeError
        raise BadRequest(f"{field} could not be decoded as audio (wav, flac, ogg or mp3): {e}",
                         field=field) from None
    rate = int(rate)
    if samples.size == 0 or rate <= 0:
        raise BadRequest(f"{field} holds no audio samples", field=field)
    if not 8000 <= rate <= 192_000:
        raise BadRequest(f"{field} sample rate must be 8000..192000 Hz, got {rate}", field=field)
    mono = samples.mean(axis=1).astype(np.float32)  # [num_samples]
    if not np.isfinite(mono).all():
        raise BadRequest(f"{field} contains NaN or infinite samples", field=field)
    duration_s = len(mono) / rate
    if duration_s > MAX_S:
        raise BadRequest(f"{field} is {duration_s:.1f} s long; at most {MAX_S:.0f} s is accepted (3-10 s of "
                         "clear speech clones best)", field=field)
    trimmed = trim_edges(mono, rate)
    if trimmed.size == 0:
        raise BadRequest(f"{field} is silence only (nothing above {_SILENCE_DBFS:g} dBFS)", field=field)
    if len(trimmed) / rate < MIN_S:
        raise BadRequest(f"{field} has {len(trimmed) / rate:.2f} s of audio once leading/trailing silence is "
                         f"trimmed; at least {MIN_S} s is needed", field=field)
    return trimmed, rate


def trim_edges(wave: np.ndarray, rate: int) -> np.ndarray:
    """Drop leading/trailing silence, keeping 100 ms before the first and 200 ms after the last non-silent
    10 ms chunk. All silence: nothing is left (the reference implementation refuses such a prompt too)."""
    chunk = max(1, round(rate * _CHUNK_S))
    num_chunks = -(-len(wave) // chunk)
    if num_chunks == 0:
        return wave
    rms = float(np.sqrt(np.mean(np.square(wave, dtype=np.float64))))
    gain = _QUIET_RMS / rms if 0.0 < rms < _QUIET_RMS else 1.0
    padded = np.zeros(num_chunks * chunk, np.float64)
    padded[: len(wave)] = wave
    chunk_rms = np.sqrt(np.mean(np.square(padded.reshape(num_chunks, chunk)), axis=1)) * gain  # [num_chunks]
    # The last chunk is partial: judge it on its own samples, as slicing a segment does.
    tail = len(wave) - (num_chunks - 1) * chunk
    chunk_rms[-1] = float(np.sqrt(np.mean(np.square(wave[-tail:], dtype=np.float64)))) * gain
    loud = np.flatnonzero(chunk_rms >= 10.0 ** (_SILENCE_DBFS / 20.0))
    if loud.size == 0:
        return wave[:0]
    start = max(0, int(loud[0]) * chunk - round(rate * _KEEP_LEAD_S))
    end = min(len(wave), (int(loud[-1]) + 1) * chunk + round(rate * _KEEP_TRAIL_S))
    return wave[start:end]
