"""Audio on the client side: the negotiated format, conversion of every wire encoding to int16 PCM, WAV files.

Owns: AudioFormat (encoding + rate, PROTOCOL.md §2 "audio"), to_s16 (pcm_s16le / pcm_f32le / G.711 mu-law and
A-law → int16 LE), write_wav. Standard library only (no numpy): a client must install in seconds.
"""

from __future__ import annotations

import array
import sys
import wave
from dataclasses import dataclass
from pathlib import Path

ENCODINGS = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")
BYTES_PER_SAMPLE = {"pcm_s16le": 2, "pcm_f32le": 4, "pcm_mulaw": 1, "pcm_alaw": 1}


@dataclass(frozen=True, slots=True)
class AudioFormat:
    encoding: str = "pcm_s16le"
    sample_rate: int = 24_000

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, not {self.encoding!r}")
        if not 8000 <= self.sample_rate <= 48_000:
            raise ValueError(f"sample_rate must be 8000..48000, not {self.sample_rate}")

    def samples(self, nbytes: int) -> int:
        return nbytes // BYTES_PER_SAMPLE[self.encoding]

    def ms(self, nbytes: int) -> float:
        return 1000.0 * self.samples(nbytes) / self.sample_rate

    def wire(self) -> dict[str, object]:
        return {"encoding": self.encoding, "sample_rate": self.sample_rate}


def _mulaw_table() -> list[int]:
    out = []
    for byte in range(256):  # ITU-T G.711 mu-law expansion
        u = ~byte & 0xFF
        t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
        out.append(0x84 - t if u & 0x80 else t - 0x84)
    return out


def _alaw_table() -> list[int]:
    out = []
    for byte in range(256):  # ITU-T G.711 A-law expansion
        a = byte ^ 0x55
        t = (a & 0x0F) << 4
        seg = (a & 0x70) >> 4
        t = t + 8 if seg == 0 else (t + 0x108) << (seg - 1)
        out.append(t if a & 0x80 else -t)
    return out


_G711 = {"pcm_mulaw": _mulaw_table(), "pcm_alaw": _alaw_table()}


def to_s16(data: bytes, encoding: str) -> bytes:
    """Audio in a wire encoding → int16 little-endian PCM (for players and WAV files)."""
    if encoding == "pcm_s16le":
        return data
    out = array.array("h")
    if encoding == "pcm_f32le":
        floats = array.array("f")
        floats.frombytes(data[: len(data) - len(data) % 4])
        if sys.byteorder == "big":
            floats.byteswap()
        out.extend(max(-32768, min(32767, round(x * 32767.0))) for x in floats)
    elif encoding in _G711:
        table = _G711[encoding]
        out.extend(table[b] for b in data)
    else:
        raise ValueError(f"unknown encoding {encoding!r}")
    if sys.byteorder == "big":
        out.byteswap()
    return out.tobytes()


def write_wav(path: str | Path, pcm_s16: bytes, sample_rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm_s16)
