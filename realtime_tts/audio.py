"""Engine audio inside the service: float32 → int16 PCM, pacing (silence trimming at segment joins) and
framing. Wire formats (resampling, encodings, containers) are audio_out.py's; reference uploads are
voices/reference.py's.

Leaf module: numpy only; imports nothing from the package.
"""

from __future__ import annotations

import numpy as np


def to_int16(samples: np.ndarray) -> np.ndarray:
    """float32 in [-1, 1] → int16 little-endian samples (clipped, so overshoot cannot wrap around)."""
    pcm: np.ndarray = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    return pcm


def to_pcm16(samples: np.ndarray) -> bytes:
    """float32 in [-1, 1] → int16 little-endian bytes."""
    return to_int16(samples).tobytes()


def from_pcm16(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0


class Pacer:
    """Streaming silence trimmer over one response's concatenated engine audio.

    Audio is judged in fixed windows aligned to the response's sample index, so the result does not depend
    on how the engine chunked it. A run of silent windows is held back until we know what follows it:
    before the first speech at most `lead_in` of it is kept (its end), between speech runs a pause longer
    than `gap` is cut to `gap` (half from each side of the join), and after the last speech at most `tail`
    (its start). Pauses shorter than `gap` inside speech are left alone.
    """

    def __init__(self, sample_rate: int, *, lead_in_ms: int, gap_ms: int, tail_ms: int, silence_db: float,
                 window_ms: float = 5.0):
        self.sample_rate = sample_rate
        self._win = max(1, int(sample_rate * window_ms / 1000))
        self._lead_in = int(sample_rate * lead_in_ms / 1000)
        self._gap = int(sample_rate * gap_ms / 1000)
        self._tail = int(sample_rate * tail_ms / 1000)
        self._threshold = float(10.0 ** (silence_db / 20.0))
        self._rest = np.zeros(0, np.float32)  # [< window] samples not yet judged
        self._held: list[np.ndarray] = []  # the current silent run, not yet emitted
        self._held_len = 0
        self._started = False  # some speech has been emitted

    def push(self, samples: np.ndarray) -> np.ndarray:
        """Feed engine audio; returns what can be emitted now (speech plus the pauses kept before it)."""
        buf = np.concatenate([self._rest, samples.astype(np.float32, copy=False)])
        num_windows = len(buf) // self._win
        self._rest = buf[num_windows * self._win:]
        if num_windows == 0:
            return np.zeros(0, np.float32)
        body = buf[: num_windows * self._win]
        silent = np.abs(body).reshape(num_windows, self._win).max(axis=1) < self._threshold  # [num_windows]
        # Run boundaries: indices where silent flips.
        edges = np.flatnonzero(np.diff(silent.astype(np.int8))) + 1
        starts = np.concatenate([[0], edges])
        ends = np.concatenate([edges, [num_windows]])
        out: list[np.ndarray] = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            run = body[s * self._win: e * self._win]
            if silent[s]:
                self._held.append(run)
                self._held_len += len(run)
            else:
                out.append(self._release_pause())
                out.append(run)
                self._started = True
        return np.concatenate(out) if out else np.zeros(0, np.float32)

    def finish(self) -> np.ndarray:
        """End of the response: judge the last partial window, keep at most `tail` of the final pause."""
        out = [self.push(np.zeros(0, np.float32))]
        if len(self._rest):
            if np.abs(self._rest).max() < self._threshold:
                self._held.append(self._rest)
                self._held_len += len(self._rest)
            else:
                out.append(self._release_pause())
                out.append(self._rest)
                self._started = True
            self._rest = np.zeros(0, np.float32)
        if self._held and self._started:
            held = np.concatenate(self._held)
            out.append(held[: self._tail])
        self._held, self._held_len = [], 0
        return np.concatenate(out)

    def _release_pause(self) -> np.ndarray:
        if not self._held:
            return np.zeros(0, np.float32)
        held = np.concatenate(self._held)
        self._held, self._held_len = [], 0
        if not self._started:
            return held[len(held) - min(len(held), self._lead_in):]
        if len(held) <= self._gap:
            return held
        half = self._gap // 2
        return np.concatenate([held[:half], held[len(held) - (self._gap - half):]])


class Framer:
    """Cuts the PCM stream into wire frames: a small first frame (players start at once), then larger ones."""

    def __init__(self, sample_rate: int, *, first_frame_ms: int, frame_ms: int):
        self._first = max(1, sample_rate * first_frame_ms // 1000) * 2  # bytes
        self._size = max(1, sample_rate * frame_ms // 1000) * 2
        self._buf = bytearray()
        self._sent_first = False

    def push(self, pcm: bytes) -> list[bytes]:
        self._buf += pcm
        frames: list[bytes] = []
        while True:
            size = self._size if self._sent_first else self._first
            if len(self._buf) < size:
                return frames
            frames.append(bytes(self._buf[:size]))
            del self._buf[:size]
            self._sent_first = True

    def flush(self) -> list[bytes]:
        """Whatever is buffered, as one (short) frame: used at segment ends so audio never waits on the
        next segment's generation."""
        if not self._buf:
            return []
        frame = bytes(self._buf)
        self._buf.clear()
        self._sent_first = True
        return [frame]
