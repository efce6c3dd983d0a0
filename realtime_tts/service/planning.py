"""Unit planning: text → units (the long-text chunker), the duration shares of a fixed duration, the estimated
audio of a unit, playback deadlines, and the SegmentRequest each unit (or the speculative first unit) becomes.
Bookkeeping only: no tasks, no engine calls. Imports engine.base (types), text, omnivoice_text, config,
protocol and this package's stats; never torch, never an engine.
"""

from __future__ import annotations

import time
from typing import Any

from realtime_tts.config import TextConfig
from realtime_tts.engine.base import (
    PRIORITY_BULK,
    PRIORITY_FIRST,
    PRIORITY_STREAM,
    Priority,
    SegmentRequest,
    Voice,
    VoicePrompt,
)
from realtime_tts.omnivoice_text import FRAME_RATE_HZ, target_frames
from realtime_tts.protocol import Params
from realtime_tts.service.continuity import Continuity
from realtime_tts.service.stats import Stats
from realtime_tts.text import Unit, normalize_space, split_text, text_length

# Texts longer than this are cut into units on a thread: split_text takes ~1 ms per 2,000 characters here but
# grows faster than linearly (~11 ms at 8,000, ~26 ms at 20,000), too long to hold the event loop.
SPLIT_INLINE_CHARS = 2_000
# Assumed time from a response's first segment starting to its first audio: issue 5's p95 first-audio target
# under load (an idle engine is faster; under load is when deadlines rank anything).
FIRST_AUDIO_S = 0.3
# Share of the estimated audio of earlier segments counted in a later segment's deadline: pacing trims their
# edge silence, so real playback is a little shorter than the estimate.
_ESTIMATE_TRIM = 0.9
# Speech per spoken token (text_length) for engines without a length rule. The CPU voice measured 0.32–0.46 s per
# word on 3–11 word English sentences; the low end keeps the estimated deadlines early rather than late.
_SECONDS_PER_TOKEN = 0.3


def speakable(text: str) -> bool:
    """Has something a voice can say: a letter or a digit (only punctuation, symbols or emoji: nothing)."""
    return any(ch.isalnum() for ch in text)


def estimate_audio_s(text: str, *, engine: str, speed: float = 1.0, prompt: VoicePrompt | None = None,
                     duration_s: float | None = None) -> float:
    """Seconds of audio a unit of text will become, from the text alone (pure Python, no model).

    OmniVoice: its own length rule (omnivoice_text.target_frames, at the clone reference's pace when there is
    one), which is the length it generates. Other engines: _SECONDS_PER_TOKEN per spoken token (words; CJK
    characters) over speed, a language-agnostic rough figure. A fixed duration_s wins. Text with nothing to
    say is 0 s. Pacing gaps between segments are not counted (they only add slack).
    """
    if duration_s is not None:
        return duration_s
    if not speakable(text):
        return 0.0
    if engine == "omnivoice":
        ref_text, ref_frames = (prompt.ref_text, prompt.num_frames) if prompt is not None else (None, None)
        return target_frames(text, ref_text, ref_frames, speed=speed) / FRAME_RATE_HZ
    return max(1, text_length(text)) * _SECONDS_PER_TOKEN / speed


def playback_deadline(first_audio_at: float | None, first_due: float | None, sent_s: float,
                      planned_s: float) -> float | None:
    """When playback of a stream runs dry without its next segment (on the clock of the times given): from the
    first audio (first_audio_at once it was sent, else first_due, when it is expected), the audio of every
    earlier segment: what was sent (sent_s), or the estimate of all of them (planned_s) trimmed for the silence
    pacing removes, whichever is longer. Not just what was sent: a reply's third sentence is due after the
    second one's audio, not with it. None while no first segment has started."""
    if first_audio_at is not None:
        return first_audio_at + max(sent_s, _ESTIMATE_TRIM * planned_s)
    if first_due is not None:
        return first_due + _ESTIMATE_TRIM * planned_s
    return None


def split_units(text: str, chunk_mode: str, cfg: TextConfig) -> list[Unit]:
    """A whole text's units: one unit of all of it for chunk_mode "none", else the long-text chunker's."""
    if chunk_mode == "none":
        stripped = text.strip()
        if not stripped:
            return []
        start = len(text) - len(text.lstrip())
        return [Unit(text=normalize_space(text), start=start, end=start + len(stripped), first=True)]
    return split_text(text, target_chars=cfg.target_chars, max_chars=cfg.max_chars,
                      first_chars=cfg.first_segment_min_chars)


def duration_shares(units: list[Unit], duration: float) -> dict[int, float]:
    """A fixed total duration shared among units by spoken length (units with nothing to say get none)."""
    lengths = [max(1, text_length(u.text)) if speakable(u.text) else 0 for u in units]
    total = max(1, sum(lengths))
    return {i: duration * n / total for i, n in enumerate(lengths)}


class Plan:
    """One response's plan: what each unit's SegmentRequest says (priority, deadline, sampling, duration share),
    and the estimates its deadlines read (when the first audio is due, the audio planned so far)."""

    def __init__(self, synth_id: str, params: Params, voice: Voice, *, engine: str, streaming: bool,
                 stats: Stats, continuity: Continuity | None = None):
        self._id = synth_id
        self._params = params
        self._voice = voice
        self._engine = engine
        self._streaming = streaming
        self._stats = stats
        self.continuity = continuity  # which segment is conditioned on which (None: the engine needs none)
        self.duration_share: dict[int, float] = {}
        self.first_due: float | None = None  # time.monotonic() the first audio is expected by
        self.planned_audio_s = 0.0  # estimated audio of the segments created so far (streaming only)

    def expect_first_audio(self) -> None:
        """The first segment's engine request starts now."""
        self.first_due = time.monotonic() + FIRST_AUDIO_S

    def add(self, index: int, unit: Unit) -> None:
        """A segment was created for unit: count its estimated audio."""
        if self._streaming:  # only stream deadlines read it (a long HTTP text would estimate every unit)
            self.planned_audio_s += estimate_audio_s(unit.text, engine=self._engine, speed=self._params.speed,
                                                     prompt=self._voice.prompt,
                                                     duration_s=self.duration_share.get(index))

    def request(self, index: int, unit: Unit, *, request_id: str | None = None, shaped: bool = True
                ) -> SegmentRequest:
        """Unit's SegmentRequest as segment index; shaped=False: without continuity's part (a request that is
        only checked, never sent)."""
        p = self._params
        priority: Priority = PRIORITY_FIRST if index == 0 else (PRIORITY_STREAM if self._streaming else PRIORITY_BULK)
        deadline = None
        if index > 0 and self._streaming:
            # the first audio's time on the engines' clock (time.monotonic); stats keep perf_counter
            deadline = playback_deadline(self._stats.first_audio_monotonic(), self.first_due,
                                         self._stats.samples_out / self._stats.sample_rate, self.planned_audio_s)
        kwargs: dict[str, Any] = {}
        if p.num_step is not None:
            kwargs["num_step"] = p.num_step
        if p.guidance_scale is not None:
            kwargs["guidance_scale"] = p.guidance_scale
        if p.temperature is not None:
            kwargs["temperature"] = p.temperature
        request = SegmentRequest(
            request_id=request_id or f"{self._id}-{index}", text=unit.text, voice=self._voice, language=p.language,
            speed=p.speed, duration_s=self.duration_share.get(index), top_p=p.top_p, seed=p.seed, priority=priority,
            deadline_s=deadline, **kwargs)
        return self.continuity.shape(index, request) if self.continuity is not None and shaped else request
