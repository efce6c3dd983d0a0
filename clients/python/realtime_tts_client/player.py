"""Real-time playback of int16 PCM on this machine, when it can play at all.

Owns Player: sounddevice when installed (the `play` extra), else a system player reading raw PCM on stdin
(aplay, paplay, pw-cat, ffplay), else None (the caller writes a file instead). played_ms() is what the
listener has heard so far (wall clock since the first write, never more than was written): a cancel sends it.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import Any


def _commands(rate: int) -> list[list[str]]:
    return [
        ["aplay", "-q", "-t", "raw", "-f", "S16_LE", "-c", "1", "-r", str(rate), "-"],
        ["paplay", "--raw", "--format=s16le", "--channels=1", f"--rate={rate}"],
        ["pw-cat", "--playback", "--format=s16", "--channels=1", f"--rate={rate}", "-"],
        ["ffplay", "-loglevel", "quiet", "-nodisp", "-autoexit", "-f", "s16le", "-ar", str(rate), "-i", "-"],
    ]


class Player:
    def __init__(self, rate: int, sink: Any, proc: subprocess.Popen[bytes] | None) -> None:
        self.rate = rate
        self.sink = sink
        self.proc = proc
        self.written = 0  # samples
        self.started: float | None = None

    @classmethod
    def open(cls, rate: int) -> Player | None:
        """A player at `rate`, or None when this machine has no way to play audio."""
        try:
            import sounddevice

            stream = sounddevice.RawOutputStream(samplerate=rate, channels=1, dtype="int16")
            stream.start()
            return cls(rate, stream, None)
        except Exception:  # noqa: BLE001, S110 — not installed, no PortAudio or no device: a system player
            pass
        for cmd in _commands(rate):
            if shutil.which(cmd[0]):
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                assert proc.stdin is not None
                return cls(rate, proc.stdin, proc)
        return None

    def write(self, pcm_s16: bytes) -> None:
        if self.started is None:
            self.started = time.monotonic()
        self.written += len(pcm_s16) // 2
        self.sink.write(pcm_s16)

    def played_ms(self) -> float:
        if self.started is None:
            return 0.0
        return min(1000.0 * (time.monotonic() - self.started), 1000.0 * self.written / self.rate)

    def close(self, *, drain: bool = True) -> None:
        """Stop; with drain, first wait until everything written has been heard."""
        if drain and self.started is not None:
            left = self.written / self.rate - (time.monotonic() - self.started)
            if left > 0:
                time.sleep(left)
        if self.proc is not None:
            self.sink.close()
            if not drain:
                self.proc.terminate()
            self.proc.wait(timeout=10)
        else:
            self.sink.stop()
            self.sink.close()
