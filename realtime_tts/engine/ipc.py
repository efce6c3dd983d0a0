"""Every message between the web process and the OmniVoice worker processes (msgspec, msgpack on pipes).

Audio and codes travel as raw little-endian bytes, never pickled tensors. Imports msgspec, numpy-free; must
not import torch (the web process imports this module).
"""

from __future__ import annotations

from typing import Literal

import msgspec

SampleEncoding = Literal["f32le", "s16le"]


class Prompt(msgspec.Struct, frozen=True):
    """A clone prompt as the engine serialises it (engine.base.VoicePrompt without the engine name)."""

    ref_text: str
    codes: bytes  # int16 little-endian [num_codebooks, num_frames]
    num_codebooks: int
    num_frames: int
    ref_rms: float
    # Workers keep decoded prompts in an LRU under this key (a saved voice id, "gen:<request_id>"), so a hot
    # voice is turned into tensors once per worker; None: decoded for this segment only.
    key: str | None = None
    # Made from generated codes (one voice per conversation): the output keeps the peak normalisation of
    # auto/design audio instead of a clone's reference loudness.
    generated: bool = False


class WorkerOptions(msgspec.Struct, frozen=True):
    """What a worker process needs to start (passed as a spawn argument)."""

    worker_id: int
    model_dir: str
    device: str  # "cpu" or "cuda:N"
    dtype: str  # bf16 | fp16 | fp32
    max_batch_tokens: int
    latency_batch_tokens: int = 0  # 0 = no smaller budget for first segments
    # Diffusion steps of a segment whose request names none: num_step while the card carries it, fewer (down
    # to min_num_step; = num_step: off) only when it could not (gpu_worker/steps.py), demand held to
    # step_headroom of the measured capacity.
    num_step: int = 32
    min_num_step: int = 16
    step_headroom: float = 0.9
    admit_interval_s: float = 0.0  # new segments join a running batch at most this often (0 = every step)
    admission_wait_s: float = 0.0  # refuse a request's first segment predicted to start later than this; 0 = never
    num_threads: int = 0  # torch intra-op threads on CPU; 0 = torch's default
    max_active: int = 1024  # segments started and unfinished at once (each holds a device slot)
    codec_graph_frames: int = 0  # longest segment decoded through a per-length codec CUDA graph; 0 = off
    policy: str = "class"  # scheduler policy: class | deadline (needs a measured step-time model)
    precision: str = "fp32"  # StepRunner(precision=...): fp32 | reference
    swiglu_gemm_min_tokens: int = 0  # StepRunner(swiglu_gemm_min_tokens=...); 0 = never
    fp8_matmuls: bool = False  # StepRunner(fp8_matmuls=...)
    stats_interval_s: float = 0.25
    profile_path: str = ""  # config omnivoice.profile_worker: thread stack samples to PATH.worker<N>.txt at exit


# --- web process → worker -------------------------------------------------------------------------------


class Submit(msgspec.Struct, tag="submit", frozen=True):
    """Generate one segment; the worker answers with Audio (last=True) or Failed for this request_id."""

    request_id: str
    text: str
    mode: str = "auto"  # auto | design | clone
    instruct: str | None = None
    prompt: Prompt | None = None
    language: str | None = None
    speed: float = 1.0
    duration_s: float | None = None
    num_step: int | None = None  # None: the worker chooses (WorkerOptions.num_step, fewer under load)
    guidance_scale: float = 2.0
    temperature: float = 0.0
    position_temperature: float = 5.0
    top_p: float | None = None
    seed: int | None = None
    denoise: bool = True
    priority: int = 2
    deadline_s: float | None = None  # time.monotonic() (system-wide on Linux, so valid across processes)
    # The request_id of an earlier segment sent to this worker whose generated codes and text become this
    # segment's prompt; the worker holds this segment back until they exist (gpu_worker/prompts.py). When
    # that segment is gone (failed, cancelled, forgotten) this one runs on `prompt` (None: unconditioned).
    prompt_from: str | None = None
    # Send this segment's generated codes back with its audio (Audio.codes) and keep them for prompt_from.
    keep_codes: bool = False


class Abort(msgspec.Struct, tag="abort", frozen=True):
    """Drop the request at the next diffusion step; the worker answers Failed(code="cancelled")."""

    request_id: str


class EncodeVoice(msgspec.Struct, tag="encode_voice", frozen=True):
    request_id: str
    audio: bytes  # float32 little-endian mono
    sample_rate: int
    ref_text: str


class Shutdown(msgspec.Struct, tag="shutdown", frozen=True):
    pass


class Ping(msgspec.Struct, tag="ping", frozen=True):
    """Liveness check: the worker answers Pong between two steps (the web process's watchdog sends it when a
    worker has been silent for a while)."""

    seq: int


ToWorker = Submit | Abort | EncodeVoice | Shutdown | Ping


# --- worker → web process -------------------------------------------------------------------------------


class Ready(msgspec.Struct, tag="ready", frozen=True):
    """Sent once the model is loaded and the scheduler loop runs."""

    worker_id: int
    device: str
    sample_rate: int
    model: str
    pid: int


class Audio(msgspec.Struct, tag="audio", frozen=True):
    request_id: str
    samples: bytes  # mono PCM in `encoding`
    encoding: SampleEncoding
    sample_rate: int
    last: bool = True
    queue_ms: float = 0.0
    gen_ms: float = 0.0
    batch_size: float = 1.0  # mean items per step over this segment's steps
    codes: bytes = b""  # Submit.keep_codes: the generated codes, int16 little-endian [num_codebooks, frames]
    num_codebooks: int = 0
    num_steps: int = 0  # diffusion steps the segment ran (0: not a diffusion engine)


class VoiceEncoded(msgspec.Struct, tag="voice_encoded", frozen=True):
    request_id: str
    prompt: Prompt


class Failed(msgspec.Struct, tag="failed", frozen=True):
    """A request ended without audio. code is an errors.TTSError code ("bad_request", "cancelled", ...)."""

    request_id: str
    code: str
    message: str
    field: str | None = None
    retry_after_ms: int | None = None  # overloaded: when a retry may be admitted


class Stats(msgspec.Struct, tag="stats", frozen=True):
    """Periodic worker load report (also after each step while busy, rate-limited)."""

    worker_id: int
    num_waiting: int
    num_running: int
    num_steps_run: int
    num_finished: int
    num_cancelled: int
    last_step_ms: float
    last_batch_size: int
    last_batch_tokens: int
    cuda_graph_hits: int = 0  # steps replayed from a captured graph, since start
    cuda_graph_misses: int = 0  # steps run eagerly (no graph for their bucket, or CPU)
    step_ms: list[float] = []  # every step's wall time since the previous report (at most 1024)
    # Cumulative since the worker started (0 where not measured, e.g. on the CPU): the step loop's host work
    # (less its waits for the GPU), the GPU's time in steps, its idle gaps between back-to-back steps, its
    # time in codec decodes; first segments refused by admission control.
    host_s: float = 0.0
    gpu_busy_s: float = 0.0
    gpu_gap_s: float = 0.0
    codec_s: float = 0.0
    codec_calls: int = 0  # codec calls (graph replays + eager calls) and the segments they decoded, cumulative
    codec_items: int = 0
    refused: int = 0
    full_step_ms: float = 0.0  # the worker's measured step-time model at its token budget (0 until measured)
    # What the web process predicts a new first segment's start with between two reports (engine/admission.py):
    # time.monotonic() of this report, the token budget of a step, the first-class work held (running segments'
    # tokens summed per steps left; tokens not started yet), the Submits taken so far (the web counts what it
    # sent after them as queued ahead), and tokens per character of text of recent unprompted segments.
    at_s: float = 0.0
    budget_tokens: int = 0
    running: list[tuple[int, int]] = []
    waiting_tokens: int = 0
    num_submits: int = 0
    tokens_per_char: float = 0.0


class Fatal(msgspec.Struct, tag="fatal", frozen=True):
    """The worker cannot continue (e.g. the model failed to load); it exits after sending this."""

    worker_id: int
    message: str


class Pong(msgspec.Struct, tag="pong", frozen=True):
    worker_id: int
    seq: int


FromWorker = Ready | Audio | VoiceEncoded | Failed | Stats | Fatal | Pong

_encoder = msgspec.msgpack.Encoder()
_to_worker = msgspec.msgpack.Decoder(ToWorker)
_from_worker = msgspec.msgpack.Decoder(FromWorker)


def encode(message: ToWorker | FromWorker) -> bytes:
    return _encoder.encode(message)


def decode_to_worker(data: bytes) -> ToWorker:
    return _to_worker.decode(data)


def decode_from_worker(data: bytes) -> FromWorker:
    return _from_worker.decode(data)
