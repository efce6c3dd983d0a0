"""Configuration: one frozen dataclass per concern, read from a TOML file, REALTIME_TTS_* env vars, CLI flags.

Precedence (later wins): defaults ← config file ← env vars ← flags. The file has one table per section of
Config ([server], [cpu], [omnivoice], ...), keys = field names; the sections and keys it accepts are read from
the dataclasses, and an unknown section or key is an error naming it. Every field name is unique across
sections, so each has exactly one env var (REALTIME_TTS_<FIELD>) and one CLI flag (--<field-with-dashes>).
The file: --config PATH, else $REALTIME_TTS_CONFIG (empty = none), else the first of DEFAULT_CONFIG_PATHS that
exists. Leaf module: imports nothing from the package.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "REALTIME_TTS_"
CONFIG_ENV = ENV_PREFIX + "CONFIG"
# Where the config file is looked for when neither --config nor REALTIME_TTS_CONFIG names one (first found).
DEFAULT_CONFIG_PATHS = ("~/.config/realtime-tts/config.toml", "/etc/realtime-tts/config.toml")


def _doc(text: str, **kw: Any) -> Any:
    return field(metadata={"doc": text}, **kw)


@dataclass(frozen=True)
class ServerConfig:
    host: str = _doc("Interface to bind.", default="127.0.0.1")
    port: int = _doc("TCP port to bind.", default=8000)
    log_level: str = _doc("uvicorn/log level: debug, info, warning, error.", default="info")
    max_ws_message_bytes: int = _doc("Largest WebSocket frame accepted (close 1009 above).", default=1 << 20)
    ws_idle_timeout_s: float = _doc("Close a WebSocket (4008) that sends nothing this long while the server "
                                    "waits for its request or more text; 0 = never.", default=120.0)


@dataclass(frozen=True)
class CpuVoiceConfig:
    cpu_workers: int = _doc("Worker processes (each with its own voice) running the CPU voice; 0 = cores.", default=0)
    cpu_threads_per_worker: int = _doc("onnxruntime intra-op threads per CPU-voice worker.", default=1)


@dataclass(frozen=True)
class OmniVoiceConfig:
    model: str | None = _doc("OmniVoice checkpoint: a local directory or a model-hub id (owner/name[@revision], "
                             "fetched into the Hugging Face cache; HF_HUB_OFFLINE=1 honoured); unset = the "
                             "embedded CPU voice only.", default=None)
    dtype: str = _doc("OmniVoice weights dtype: bf16, fp16 or fp32.", default="bf16")
    device: str = _doc("Torch device for OmniVoice workers: cuda or cpu (auto = cuda if present).", default="auto")
    gpus: int = _doc("Number of GPU workers (0 = every visible GPU).", default=0)
    # Serving defaults (latency budget, admission, codec graphs, target_chars) from the H200 A/B in serving run
    # 11 of bench/results/HISTORY.md: 100 streaming agents p95 238 ms after the first sentence with no underruns
    # (was 417 ms, 50 underruns). max_batch_tokens 4096 (was 6144) from the scheduler simulation on the H200's
    # measured costs (bench/results/omnivoice_sched_sim.md, session 8): a first segment's latency is ~32 steps
    # of the full budget under load, and 4096 is the cheapest token bucket per token up to 6144: p95 first
    # audio at 200-300 agents 264-265 ms vs 406-408 predicted, the HTTP loads unchanged. Bulk-only deployments
    # gain ~10% throughput with a larger budget (B=16 design 214 xRT vs B=128 243 on the H200).
    max_batch_tokens: int = _doc("Token budget per diffusion step across the running batch (larger: more "
                                 "throughput for bulk work, longer steps for everyone).", default=4096)
    num_step: int = _doc("Diffusion steps of a segment whose request names none (the released model's 32; the "
                         "OmniVoice authors give 16 as the faster setting). A request's own num_step is always "
                         "honoured.", default=32)
    min_num_step: int = _doc("Load-adaptive steps: the fewest steps a segment gets when the worker's measured "
                             "step times say num_step would make deadlines late (a segment gets num_step "
                             "whenever the card carries it); equal to num_step = off.", default=16)
    latency_batch_tokens: int = _doc("Smaller step budget while a first segment (or a stream segment about to "
                                     "run dry) is generating: shorter steps, sooner first audio; 0 = off.",
                                     default=1024)
    admit_interval_ms: int = _doc("While a batch runs, new segments join it together at most this often (they "
                                  "also finish together: fewer codec calls); 0 = at the next step.", default=0)
    admission_wait_ms: int = _doc("A new request or turn is refused at once (503 + Retry-After, WS 1013) when the "
                                  "worker's measured step times say its first segment could not start within "
                                  "this: by the web process on arrival (from the worker's last load report and "
                                  "what was sent since), else by the worker; 0 = never refuse (queue without "
                                  "bound).", default=1000)
    codec_graph_frames: int = _doc("Segments up to this many frames (25 per second) decode in padded batches "
                                   "through CUDA graphs of the codec captured per batch and frame bucket on "
                                   "first use, instead of eagerly; 0 = off.", default=400)
    precision: str = _doc("OmniVoice arithmetic on the GPU: reference (bf16 residual stream and audio head, as the "
                          "reference omnivoice package computes at bf16) or fp32 (fp32 residual stream, TF32 head).",
                          default="reference")
    swiglu_gemm_min_tokens: int = _doc("Diffusion steps of at least this many tokens run the MLP's gate/up "
                                       "projection and SwiGLU as one Triton GEMM (faster at bulk sizes on the "
                                       "H200, bench/results/omnivoice_gemm_h200.md); 0 = never.",
                                       default=8192)
    fp8_matmuls: bool = _doc("Opt-in, GPUs with FP8 tensor cores (sm89+: H100/H200, L4, RTX 40xx): the backbone's "
                             "four projections per layer in FP8 (e4m3 weights with a scale per output row, "
                             "activations quantised per token). Faster steps at serving sizes "
                             "(bench/results/omnivoice_fp8_h200.md); its effect on the released model's audio "
                             "is not measured here.", default=False)
    scheduler_policy: str = _doc("How a GPU worker picks each step's batch: class (first segments, then "
                                 "streams, then bulk, under a token budget) or deadline (experimental: every "
                                 "segment gets a deadline; steps sized by a step-time model measured at "
                                 "start-up).", default="class")
    continuity_prompt_max_s: float = _doc("One voice per conversation: the conversation's voice prompt (which "
                                          "every later segment carries in every step) lasts between half this "
                                          "and this: a first segment outside that is replaced by the first later "
                                          "segment (the same voice) inside it; 0 = the first segment, whatever "
                                          "its length.", default=4.0)
    voices_dir: str = _doc("Where saved voices (clone prompts) persist.", default="~/.cache/realtime_tts/voices")
    profile_worker: str = _doc("For measurements: each GPU worker samples where its step-loop, decode and "
                               "pipe-reader threads' wall time goes (stack samples every 2 ms) and writes it to "
                               "PATH.worker<N>.txt when it exits; empty = off.", default="")
    voice_continuity: bool = _doc("One voice per conversation: in auto/design mode the first segment of a socket or "
                                  "session becomes the voice prompt of every later segment (off: each segment "
                                  "samples its own voice; the baseline of bench/omnivoice_continuity.py).",
                                  default=True)


@dataclass(frozen=True)
class PacingConfig:
    lead_in_ms: int = _doc("Silence kept before the first segment of a response.", default=80)
    gap_ms: int = _doc("Pause between consecutive sentences (split evenly across the join).", default=240)
    tail_ms: int = _doc("Silence kept after the last segment of a response.", default=120)
    silence_db: float = _doc("Level (dBFS) under which edge audio counts as silence when trimming.", default=-45.0)
    first_frame_ms: int = _doc("Duration of the first PCM frame of a response (small: players start early).",
                               default=30)
    frame_ms: int = _doc("Duration of the later PCM frames.", default=120)


@dataclass(frozen=True)
class TextConfig:
    min_chars: int = _doc("A streamed fragment shorter than this stays buffered.", default=4)
    first_segment_min_chars: int = _doc("First unit of a turn may cut at a clause once this long.", default=24)
    target_chars: int = _doc("Preferred unit length after the first (about one sentence: a unit starts "
                             "as soon as its text is in, and short units share GPU steps well).", default=60)
    max_chars: int = _doc("Units longer than this are cut at clause marks, then spaces, then hard.", default=320)
    max_text_chars: int = _doc("Largest text accepted in one request.", default=50_000)


@dataclass(frozen=True)
class SecurityConfig:
    api_keys: str | None = _doc("API keys accepted (Authorization: Bearer KEY): comma-separated NAME:KEY pairs; "
                                "NAME appears in logs and metrics, the key never. Unset (and no api_keys_file) = "
                                "no authentication.", default=None)
    api_keys_file: str | None = _doc("File of NAME:KEY lines (# comments), read at start: keeps keys out of the "
                                     "environment and the process list.", default=None)
    public_health: bool = _doc("GET /health answers without a key (load balancers' probes).", default=True)
    public_metrics: bool = _doc("GET /metrics answers without a key.", default=False)
    token_ttl_s: float = _doc("Longest lifetime of a token minted by POST /v1/auth/token (for browser "
                              "WebSockets, which cannot send headers: ?token=...).", default=300.0)
    allow_key_in_query: bool = _doc("Accept a long-lived API key in a URL query parameter (off: URLs end up in "
                                    "proxy logs and browser history; mint a short-lived token instead).",
                                    default=False)


@dataclass(frozen=True)
class LimitsConfig:
    max_buffered_chars: int = _doc("Text a streaming context may hold not yet spoken (received, not yet sent as "
                                   "audio); more is refused (too_large) until audio catches up.", default=50_000)
    max_connections: int = _doc("Open WebSockets plus HTTP requests in flight, in total (public /health and "
                                "/metrics not counted); over it: 503 / close 1013; 0 = no limit.", default=1024)
    max_connections_per_key: int = _doc("The same, per API key (when keys are configured); 0 = no limit.",
                                        default=64)
    requests_per_key_per_s: float = _doc("Requests and WebSocket connects per API key per second (burst: twice "
                                         "that); over it: 429 + Retry-After / close 1013; 0 = no limit.",
                                         default=20.0)
    ws_max_audio_ahead_s: float = _doc("A WebSocket stream's audio is sent at most this far ahead of real time, "
                                       "so a client reading at playback speed never has more queued in front of "
                                       "a keepalive ping; 0 = as fast as it is made.", default=8.0)
    ws_send_timeout_s: float = _doc("A WebSocket client that reads nothing this long while audio waits for it is "
                                    "closed (1008, reason says why) and its work aborted; 0 = never.",
                                    default=15.0)
    engine_job_timeout_s: float = _doc("An engine worker that gives no sign of life on a job this long is "
                                       "treated as stuck: killed, its requests fail (engine_dead, retryable), "
                                       "it restarts.", default=20.0)
    worker_check_interval_s: float = _doc("How often idle engine workers are checked (a dead one restarts "
                                          "before a request needs it).", default=1.0)


@dataclass(frozen=True)
class DialectConfig:
    unknown_vendor_voice: str = _doc("What a vendor dialect (Cartesia, ElevenLabs, Deepgram) does with a voice id "
                                     "this server does not know: default (speak in the default voice, with a "
                                     "warning) or error (refuse, naming the available voices).",
                                     default="default")


@dataclass(frozen=True)
class SessionConfig:
    max_contexts: int = _doc("Live contexts per session-mode WebSocket (PROTOCOL.md §2); one more is refused with "
                             "error too_many_contexts, the socket stays open.", default=8)
    context_idle_s: float = _doc("A session context that is not ended and receives nothing this long is ended: "
                                 "its text is spoken, then context.done with reason idle; 0 = never.", default=20.0)
    session_send_timeout_s: float = _doc("A session-mode client that reads nothing this long while audio waits "
                                         "for it is closed (1008, slow_reader) and its engine work aborted; "
                                         "0 = never.", default=15.0)
    session_buffer_ms: int = _doc("Audio a session-mode socket holds ready to send (all its contexts together) "
                                  "before its contexts' engine work waits for the client to read.", default=2000)


@dataclass(frozen=True)
class LoggingConfig:
    log_format: str = _doc("Log line format: text (human) or json (one JSON object per line, for log shippers).",
                           default="text")
    log_requests: bool = _doc("One info line per request (HTTP or WebSocket) with its ids, outcome and timings.",
                              default=True)
    log_text: bool = _doc("Also put the request's text (up to 2000 chars) in that line; off: text never reaches "
                          "the log at info level.", default=False)


@dataclass(frozen=True)
class ShutdownConfig:
    drain_timeout_s: float = _doc("On SIGTERM/SIGINT: stop accepting, let in-flight requests finish for up to this "
                                  "long, then close the rest (WebSocket 1001 after an error frame); a second "
                                  "signal skips the wait.", default=30.0)
    close_grace_s: float = _doc("After the drain: how long a connection gets to take its close frame before it "
                                "is reset (a client that stopped reading).", default=2.0)


@dataclass(frozen=True)
class Config:
    server: ServerConfig = field(default_factory=ServerConfig)
    cpu: CpuVoiceConfig = field(default_factory=CpuVoiceConfig)
    omnivoice: OmniVoiceConfig = field(default_factory=OmniVoiceConfig)
    pacing: PacingConfig = field(default_factory=PacingConfig)
    text: TextConfig = field(default_factory=TextConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    session: SessionConfig = field(default_factory=SessionConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    dialects: DialectConfig = field(default_factory=DialectConfig)


class ConfigError(ValueError):
    pass


def sections() -> dict[str, type[Any]]:
    """Section name → dataclass, in Config order."""
    hints = typing.get_type_hints(Config)
    return {f.name: hints[f.name] for f in dataclasses.fields(Config)}


def _base_type(tp: Any) -> type[Any]:
    if _is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return typing.cast(type[Any], args[0])
    return typing.cast(type[Any], tp)


def _parse(name: str, raw: Any, tp: Any) -> Any:
    base = _base_type(tp)
    if raw is None or (isinstance(raw, str) and raw == "" and base is not str):
        return None
    try:
        if base is bool and isinstance(raw, str):
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return base(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: cannot read {raw!r} as {base.__name__}") from None


def load_config(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
                config_file: str | Path | None = None) -> Config:
    """Defaults ← config file ← REALTIME_TTS_* env vars ← overrides (CLI flags; keys are field names, None =
    unset). config_file None: the default lookup (find_config_file)."""
    env = os.environ if env is None else env
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    known = {f.name for cls in sections().values() for f in dataclasses.fields(cls)}
    unknown = set(overrides) - known
    if unknown:
        raise ConfigError(f"unknown config field(s): {', '.join(sorted(unknown))}")
    path = Path(config_file).expanduser() if config_file is not None else find_config_file(env)
    from_file = read_config_file(path) if path is not None else {}
    built: dict[str, Any] = {}
    for section, cls in sections().items():
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = dict(from_file.get(section, {}))
        for f in dataclasses.fields(cls):
            env_name = ENV_PREFIX + f.name.upper()
            if f.name in overrides:
                values[f.name] = _parse(f.name, overrides[f.name], hints[f.name])
            elif env_name in env:
                values[f.name] = _parse(env_name, env[env_name], hints[f.name])
        built[section] = cls(**values)
    cfg = Config(**built)
    validate(cfg)
    return cfg


def find_config_file(env: Mapping[str, str]) -> Path | None:
    """$REALTIME_TTS_CONFIG (must exist; empty = no file), else the first of DEFAULT_CONFIG_PATHS that exists."""
    if CONFIG_ENV in env:
        named = env[CONFIG_ENV].strip()
        return Path(named).expanduser() if named else None
    for candidate in DEFAULT_CONFIG_PATHS:
        p = Path(candidate).expanduser()
        if p.is_file():
            return p
    return None


def read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """The file's values by section, each checked against its dataclass field's type (errors name the file,
    the section and the key)."""
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path}: {e}") from None
    known = sections()
    out: dict[str, dict[str, Any]] = {}
    for section, table in doc.items():
        if section not in known:
            raise ConfigError(f"config file {path}: unknown section [{section}]; sections: {', '.join(known)}")
        if not isinstance(table, dict):
            raise ConfigError(f"config file {path}: {section} must be a table ([{section}])")
        hints = typing.get_type_hints(known[section])
        names = [f.name for f in dataclasses.fields(known[section])]
        for key, value in table.items():
            if key not in hints or key not in names:
                raise ConfigError(f"config file {path}: unknown key {key!r} in [{section}]; keys: {', '.join(names)}")
            out.setdefault(section, {})[key] = _typed(f"{path}: [{section}] {key}", value, hints[key])
    return out


def _typed(name: str, value: Any, tp: Any) -> Any:
    """A TOML value as the field's type: no silent coercion (a string for an int is an error), except int → float
    and a list → tuple."""
    options = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    for option in options:
        origin = typing.get_origin(option) or option
        if origin is float and isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if origin in (tuple, list) and isinstance(value, list):
            return origin(value)
        if origin is int and isinstance(value, bool):
            continue
        if isinstance(origin, type) and isinstance(value, origin):
            return value
    want = " or ".join(getattr(typing.get_origin(o) or o, "__name__", str(o)) for o in options)
    raise ConfigError(f"{name}: expected {want}, got {type(value).__name__} {value!r}")


def _is_union(tp: Any) -> bool:
    return isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union


def validate(cfg: Config) -> None:
    def check(ok: bool, msg: str) -> None:
        if not ok:
            raise ConfigError(msg)

    check(0 < cfg.server.port < 65536, f"port must be 1..65535, got {cfg.server.port}")
    check(cfg.server.ws_idle_timeout_s >= 0, f"ws_idle_timeout_s must be >= 0, got {cfg.server.ws_idle_timeout_s}")
    check(cfg.cpu.cpu_workers >= 0, f"cpu_workers must be >= 0, got {cfg.cpu.cpu_workers}")
    check(cfg.cpu.cpu_threads_per_worker >= 1,
          f"cpu_threads_per_worker must be >= 1, got {cfg.cpu.cpu_threads_per_worker}")
    check(cfg.omnivoice.dtype in ("bf16", "fp16", "fp32"), f"dtype must be bf16, fp16 or fp32, got {cfg.omnivoice.dtype!r}")
    check(cfg.omnivoice.device in ("auto", "cuda", "cpu"), f"device must be auto, cuda or cpu, got {cfg.omnivoice.device!r}")
    check(cfg.omnivoice.gpus >= 0, f"gpus must be >= 0, got {cfg.omnivoice.gpus}")
    check(cfg.omnivoice.max_batch_tokens >= 1, f"max_batch_tokens must be >= 1, got {cfg.omnivoice.max_batch_tokens}")
    check(1 <= cfg.omnivoice.num_step <= 64, f"num_step must be 1..64, got {cfg.omnivoice.num_step}")
    check(1 <= cfg.omnivoice.min_num_step <= cfg.omnivoice.num_step,
          f"min_num_step must be 1..num_step ({cfg.omnivoice.num_step}), got {cfg.omnivoice.min_num_step}")
    check(0 <= cfg.omnivoice.continuity_prompt_max_s <= 30,
          f"continuity_prompt_max_s must be 0..30, got {cfg.omnivoice.continuity_prompt_max_s}")
    check(cfg.omnivoice.codec_graph_frames >= 0,
          f"codec_graph_frames must be >= 0, got {cfg.omnivoice.codec_graph_frames}")
    check(cfg.omnivoice.swiglu_gemm_min_tokens >= 0,
          f"swiglu_gemm_min_tokens must be >= 0, got {cfg.omnivoice.swiglu_gemm_min_tokens}")
    check(cfg.omnivoice.precision in ("fp32", "reference"),
          f"precision must be fp32 or reference, got {cfg.omnivoice.precision!r}")
    check(cfg.omnivoice.scheduler_policy in ("deadline", "class"),
          f"scheduler_policy must be deadline or class, got {cfg.omnivoice.scheduler_policy!r}")
    check(cfg.omnivoice.admission_wait_ms >= 0,
          f"admission_wait_ms must be >= 0, got {cfg.omnivoice.admission_wait_ms}")
    check(cfg.omnivoice.admit_interval_ms >= 0, f"admit_interval_ms must be >= 0, got {cfg.omnivoice.admit_interval_ms}")
    check(cfg.omnivoice.latency_batch_tokens >= 0,
          f"latency_batch_tokens must be >= 0, got {cfg.omnivoice.latency_batch_tokens}")
    for name in ("lead_in_ms", "gap_ms", "tail_ms", "first_frame_ms", "frame_ms"):
        value = getattr(cfg.pacing, name)
        check(0 <= value <= 5000, f"{name} must be 0..5000 ms, got {value}")
    check(cfg.pacing.first_frame_ms > 0 and cfg.pacing.frame_ms > 0, "frame sizes must be > 0 ms")
    lim = cfg.limits
    for name in ("max_buffered_chars", "max_connections", "max_connections_per_key"):
        check(getattr(lim, name) >= 0, f"{name} must be >= 0, got {getattr(lim, name)}")
    for name in ("requests_per_key_per_s", "ws_max_audio_ahead_s", "ws_send_timeout_s"):
        check(getattr(lim, name) >= 0, f"{name} must be >= 0, got {getattr(lim, name)}")
    check(lim.engine_job_timeout_s > 0, f"engine_job_timeout_s must be > 0, got {lim.engine_job_timeout_s}")
    check(lim.worker_check_interval_s > 0,
          f"worker_check_interval_s must be > 0, got {lim.worker_check_interval_s}")
    check(cfg.security.token_ttl_s > 0, f"token_ttl_s must be > 0, got {cfg.security.token_ttl_s}")
    check(cfg.dialects.unknown_vendor_voice in ("default", "error"),
          f"unknown_vendor_voice must be default or error, got {cfg.dialects.unknown_vendor_voice!r}")
    ses = cfg.session
    check(1 <= ses.max_contexts <= 1024, f"max_contexts must be 1..1024, got {ses.max_contexts}")
    check(ses.context_idle_s >= 0, f"context_idle_s must be >= 0, got {ses.context_idle_s}")
    check(ses.session_send_timeout_s >= 0, f"session_send_timeout_s must be >= 0, got {ses.session_send_timeout_s}")
    check(ses.session_buffer_ms >= 20, f"session_buffer_ms must be >= 20, got {ses.session_buffer_ms}")
    check(cfg.logging.log_format in ("text", "json"), f"log_format must be text or json, got {cfg.logging.log_format!r}")
    check(cfg.shutdown.drain_timeout_s >= 0, f"drain_timeout_s must be >= 0, got {cfg.shutdown.drain_timeout_s}")
    check(cfg.shutdown.close_grace_s >= 0, f"close_grace_s must be >= 0, got {cfg.shutdown.close_grace_s}")
    t = cfg.text
    check(1 <= t.min_chars <= t.first_segment_min_chars <= t.max_chars,
          f"need 1 <= min_chars ({t.min_chars}) <= first_segment_min_chars ({t.first_segment_min_chars}) "
          f"<= max_chars ({t.max_chars})")
    check(t.min_chars <= t.target_chars <= t.max_chars,
          f"need min_chars <= target_chars ({t.target_chars}) <= max_chars ({t.max_chars})")


def field_docs() -> list[tuple[str, str, Any, str]]:
    """(section, field, default, doc) for every field: used by the CLI and the README."""
    out = []
    for section, cls in sections().items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            out.append((section, f.name, default, str(f.metadata.get("doc", ""))))
    return out
