"""A finished synthesis as the client saw it: the audio, its format, the last event, first-audio time, segments.

Owns Result and the collecting of an event stream into one. Imports the client's own events/audio modules only.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from realtime_tts_client.audio import AudioFormat, to_s16, write_wav
from realtime_tts_client.events import Audio, Done, Event, SegmentStart, ServerError, Words


@dataclass
class Result:
    audio: bytes
    format: AudioFormat
    done: Done
    first_audio_s: float | None = None  # from the stream's start (its first text) to the first audio bytes
    segments: list[SegmentStart] = field(default_factory=list)
    errors: list[ServerError] = field(default_factory=list)
    words: list[Words] = field(default_factory=list)  # session mode: word timings per segment

    @property
    def duration_s(self) -> float:
        return self.format.samples(len(self.audio)) / self.format.sample_rate

    def pcm_s16(self) -> bytes:
        return to_s16(self.audio, self.format.encoding)

    def save_wav(self, path: str | Path) -> None:
        write_wav(path, self.pcm_s16(), self.format.sample_rate)


async def collect(events: AsyncIterator[Event], fmt: AudioFormat, t0: float) -> Result:
    """Read a stream to its Done event. `t0` is the perf_counter() time its first text was sent."""
    audio = bytearray()
    first: float | None = None
    segments: list[SegmentStart] = []
    errors: list[ServerError] = []
    words: list[Words] = []
    async for ev in events:
        if isinstance(ev, Audio):
            if first is None and ev.data:
                first = time.perf_counter() - t0
            audio += ev.data
        elif isinstance(ev, SegmentStart):
            segments.append(ev)
        elif isinstance(ev, ServerError):
            errors.append(ev)
        elif isinstance(ev, Words):
            words.append(ev)
        elif isinstance(ev, Done):
            if ev.sample_rate and ev.sample_rate != fmt.sample_rate:
                fmt = AudioFormat(fmt.encoding, ev.sample_rate)
            return Result(bytes(audio), fmt, ev, first, segments, errors, words)
    raise ConnectionError("the stream ended without its terminal frame")
