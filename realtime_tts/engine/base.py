"""The Engine protocol and the plain data it exchanges with the service layer.

Every engine (CPU voice in threads, OmniVoice in worker processes) implements Engine; api/service never
know which one they drive. Imports only numpy and the package's leaves (no torch).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy as np

VoiceMode = Literal["auto", "design", "clone"]
Priority = Literal[0, 1, 2]
PRIORITY_FIRST: Priority = 0  # first segment of a new turn: time to first audio
PRIORITY_STREAM: Priority = 1  # a later segment of a live stream: must arrive before playback runs dry
PRIORITY_BULK: Priority = 2  # whole-text / HTTP work with no listener waiting on each segment


@dataclass(frozen=True, slots=True)
class VoicePrompt:
    """A reusable clone prompt (what a saved voice is): reference audio codes + their transcript.

    codes is the engine's own serialisation (OmniVoice: int16 little-endian [num_codebooks, num_frames]);
    the web process stores and forwards it without interpreting it.
    """

    engine: str
    ref_text: str
    codes: bytes
    num_codebooks: int
    num_frames: int
    ref_rms: float
    key: str | None = None  # a stable name for engines that cache decoded prompts (saved voice id, ...)
    generated: bool = False  # made from the engine's own output (one voice per conversation), not a recording


@dataclass(frozen=True, slots=True)
class Voice:
    """How a segment should sound. mode auto: the model picks; design: instruct text; clone: prompt."""

    mode: VoiceMode = "auto"
    instruct: str | None = None
    prompt: VoicePrompt | None = None
    preset: str | None = None  # engine preset / speaker name (CPU voice speaker, OpenAI voice name)


@dataclass(frozen=True, slots=True)
class SegmentRequest:
    """One unit of text to synthesise as one piece of audio (one sentence or chunk)."""

    request_id: str  # unique per segment; abort() takes it
    text: str
    voice: Voice = field(default_factory=Voice)
    language: str | None = None
    speed: float = 1.0
    duration_s: float | None = None  # fixes the target length (overrides the estimate)
    num_step: int | None = None  # diffusion steps (OmniVoice); None: the engine's default, fewer under load
    guidance_scale: float = 2.0
    temperature: float = 0.0  # token (class) temperature; 0 = argmax
    position_temperature: float = 5.0
    top_p: float | None = None
    seed: int | None = None
    denoise: bool = True
    priority: Priority = PRIORITY_BULK
    deadline_s: float | None = None  # time.monotonic() by which its first audio is needed, if known
    # One voice per conversation (engines with capabilities.continuity): the request_id of an earlier segment
    # whose generated codes + text become this segment's prompt (it waits for them), and whether this
    # segment's own codes come back (AudioChunk.prompt) to serve as such a prompt.
    prompt_from: str | None = None
    keep_codes: bool = False


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """Audio for (part of) one segment: float32 mono in [-1, 1] at the engine's sample rate."""

    samples: np.ndarray  # [num_samples] float32
    last: bool = True  # the last chunk of its segment
    queue_ms: float = 0.0  # waited before generation started (first chunk of a segment)
    gen_ms: float = 0.0  # engine time spent generating this segment
    batch_size: int = 1  # items in the batch that produced it (mean over steps where batched)
    num_steps: int = 0  # diffusion steps that produced it (0: not a diffusion engine)
    prompt: VoicePrompt | None = None  # SegmentRequest.keep_codes: this segment's output as a voice prompt


@dataclass(frozen=True, slots=True)
class Capabilities:
    engine: str  # "cpu" | "omnivoice"
    model: str  # model id reported by /v1/models
    sample_rate: int
    voice_modes: frozenset[str]
    languages: tuple[str, ...] | None  # None: many (see the engine's language table)
    presets: tuple[str, ...] = ()
    deterministic: bool = True  # same input + seed → same audio
    device: str = "cpu"
    # Concurrent segments share one model step (OmniVoice): a response's next segment may start at once. Engines
    # without it (the CPU voice) start it only once the current one has audio, so it never delays first audio.
    batched: bool = False
    # Can condition a segment on an earlier segment's generated audio (SegmentRequest.prompt_from/keep_codes):
    # the way "auto"/"design" voices stay one speaker across segments on engines that sample a voice per call.
    continuity: bool = False


@dataclass(frozen=True, slots=True)
class WorkerHealth:
    worker_id: int
    status: Literal["ok", "loading", "restarting", "error"]
    device: str
    in_flight: int = 0
    restarts: int = 0
    detail: str = ""


@dataclass(frozen=True, slots=True)
class EngineHealth:
    status: Literal["ok", "loading", "error"]
    detail: str = ""
    workers: tuple[WorkerHealth, ...] = ()


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """For routing and pong: how busy an engine is right now."""

    pool_size: int
    idle: int
    queued_segments: int
    in_flight_segments: int


@runtime_checkable
class Engine(Protocol):
    """What the service layer needs from an engine. All methods are called on the event loop and must not
    block it: long work runs in threads or worker processes."""

    @property
    def capabilities(self) -> Capabilities: ...

    async def start(self) -> None:
        """Load models / spawn workers. Returns once the engine can accept work (or raises)."""

    async def stop(self) -> None:
        """Abort everything in flight and release resources."""

    def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        """Generate one segment. Closing the iterator early (aclose / task cancel) aborts the work.

        Raises errors.TTSError subclasses: UnsupportedVoiceMode, BadRequest (e.g. invalid instruct),
        Overloaded, EngineDead.
        """

    async def abort(self, request_id: str) -> None:
        """Stop a segment at the next model step (no-op if unknown or done)."""

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        """Turn a reference recording (float32 mono) into a reusable clone prompt."""

    def health(self) -> EngineHealth: ...

    def load(self) -> EngineLoad: ...
