"""The events a Synthesis yields, in order: SegmentStarted, its AudioFrames, SegmentEnded (the API layer turns
them into wire frames). Plain data; imports nothing of the package."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentStarted:
    segment_index: int
    text: str
    text_start: int
    text_end: int
    audio_start_sample: int


@dataclass(frozen=True, slots=True)
class AudioFrame:
    pcm: bytes  # int16 little-endian mono at the response's sample rate
    segment_index: int


@dataclass(frozen=True, slots=True)
class SegmentEnded:
    segment_index: int
    audio_end_sample: int
    queue_ms: float
    gen_ms: float
    num_steps: int | None = None  # diffusion steps it ran (OmniVoice: chosen under load); None: not diffusion


Event = SegmentStarted | AudioFrame | SegmentEnded
