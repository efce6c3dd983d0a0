"""What the listener heard: a response's segments as they were sent (text span, audio span), and, at a cancel,
the prefix of the text whose audio ended before the client's played_ms (PROTOCOL.md §2.3; simple mode too).
Word granularity where the segment being played has word timings (its segment.end was sent: the same estimated
timings as its "words" message, words.estimate_words), else whole segments. The one implementation for session
and simple mode. Imports this package's events and words only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from realtime_tts.service.events import AudioFrame, Event, SegmentEnded, SegmentStarted
from realtime_tts.service.words import estimate_words


@dataclass(frozen=True, slots=True)
class Heard:
    """What the listener heard of a cancelled response: text_spoken = raw[:unspoken_start]."""

    text_spoken: str
    unspoken_start: int  # code-point offset (into the raw text) of the first character not heard
    granularity: Literal["segment", "word"]  # "word": cut by the word timings of the segment being played
    estimated: bool  # the word timings behind a "word" cut are estimated (no engine reports word times yet)
    played_ms: float | None  # as the client said; None: everything sent counts as heard
    audio_sent_ms: float  # audio of the response that left the server before the cancel

    def fields(self) -> dict[str, object]:
        """The wire fields (context.done in session mode, the terminal frame in simple mode)."""
        return {"text_spoken": self.text_spoken, "unspoken_start": self.unspoken_start,
                "granularity": self.granularity, "estimated": self.estimated, "played_ms": self.played_ms,
                "audio_sent_ms": self.audio_sent_ms}


@dataclass(slots=True)
class _Sent:
    text_start: int
    text_end: int
    audio_start: int  # engine-rate sample from the response's first sample
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
            self._segments.append(_Sent(ev.text_start, ev.text_end, ev.audio_start_sample))
        elif isinstance(ev, SegmentEnded) and self._segments:
            self._segments[-1].audio_end = ev.audio_end_sample

    def sent_until(self, seconds: float) -> None:
        """The transport's own count of the audio that left (it may drop queued frames at a cancel): audio
        noted here but never sent is not counted as heard."""
        self.samples = min(self.samples, round(seconds * self.sample_rate))

    def heard(self, raw_text: str, played_ms: float | None) -> Heard:
        """Audio counts as heard when it was sent and ended before played_ms (without played_ms: when it was all
        sent). Whole segments first (they are consecutive in the text, so what was heard is a prefix of it); then,
        in the first segment not wholly heard, the words whose audio ENDED by then if it has word timings: the cut
        is the start of its first word not wholly heard (a word cut mid-way is unspoken). A segment whose
        segment.end was not sent has no timings: the cut stays at the segment boundary ("segment")."""
        limit = self.samples
        if played_ms is not None:
            limit = min(limit, int(played_ms * self.sample_rate / 1000))
        end = 0
        granularity: Literal["segment", "word"] = "word" if self._segments else "segment"
        for seg in self._segments:
            if seg.audio_end is not None and seg.audio_end <= limit:
                end = seg.text_end
                continue
            words = [] if seg.audio_end is None else estimate_words(
                raw_text[seg.text_start:seg.text_end], seg.text_start, seg.audio_start, seg.audio_end)
            if not words:
                granularity = "segment"
            elif words[0].end_sample <= limit:  # some word of it was heard: cut before the first one that was not
                end = next(w.text_start for w in words if w.end_sample > limit)
            break
        return Heard(raw_text[:end], end, granularity, granularity == "word", played_ms,
                     round(self.samples / self.sample_rate * 1e3, 2))
