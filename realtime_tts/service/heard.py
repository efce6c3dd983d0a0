"""What the listener heard: a response's segments as they were sent (text span, audio span), and, at a cancel,
the prefix of the text whose audio ended before the client's played_ms (PROTOCOL.md §2.3; simple mode too).
Segment granularity: no engine reports word times yet, and estimated word times are not good enough to tell a
language model which words were said. Imports this package's events only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from realtime_tts.service.events import AudioFrame, Event, SegmentEnded, SegmentStarted


@dataclass(frozen=True, slots=True)
class Heard:
    """What the listener heard of a cancelled response: text_spoken = raw[:unspoken_start]."""

    text_spoken: str
    unspoken_start: int  # code-point offset (into the raw text) of the first character not heard
    granularity: Literal["segment", "word"]  # "segment": whole segments only
    played_ms: float | None  # as the client said; None: everything sent counts as heard
    audio_sent_ms: float  # audio of the response that left the server before the cancel

    def fields(self) -> dict[str, object]:
        """The wire fields (context.done in session mode, the terminal frame in simple mode)."""
        return {"text_spoken": self.text_spoken, "unspoken_start": self.unspoken_start,
                "granularity": self.granularity, "played_ms": self.played_ms, "audio_sent_ms": self.audio_sent_ms}


@dataclass(slots=True)
class _Sent:
    text_start: int
    text_end: int
    audio_end: int | None = None  # engine-rate sample, once its SegmentEnded was sent


class SpokenLog:
    """Feed it every event as it is sent (note); ask heard() at a cancel."""

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate
        self.samples = 0  # audio sent, engine rate
        self._segments: list[_Sent] = []

    def note(self, ev: Event | object) -> None:
        if isinstance(ev, AudioFrame):
            self.samples += len(ev.pcm) // 2
        elif isinstance(ev, SegmentStarted):
            self._segments.append(_Sent(ev.text_start, ev.text_end))
        elif isinstance(ev, SegmentEnded) and self._segments:
            self._segments[-1].audio_end = ev.audio_end_sample

    def heard(self, raw_text: str, played_ms: float | None) -> Heard:
        """A segment counts as heard when all its audio was sent and ended before played_ms (without played_ms:
        when it was all sent). Segments are consecutive in the text, so what was heard is a prefix of it."""
        limit = self.samples
        if played_ms is not None:
            limit = min(limit, int(played_ms * self.sample_rate / 1000))
        end = 0
        for seg in self._segments:
            if seg.audio_end is None or seg.audio_end > limit:
                break
            end = seg.text_end
        return Heard(raw_text[:end], end, "segment", played_ms, round(self.samples / self.sample_rate * 1e3, 2))
