"""OmniVoiceEngine: the web-process side of the OmniVoice workers — spawn, route, stream results, restart.

Lives on the event loop; pipe I/O runs in one reader and one writer thread per worker so the loop never
blocks. Must not import torch or realtime_tts.model (a test asserts it): workers are spawned processes.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import numpy as np

from realtime_tts import errors, hub, omnivoice_text
from realtime_tts.config import Config
from realtime_tts.engine import admission, ipc
from realtime_tts.engine.base import (
    AudioChunk,
    Capabilities,
    EngineHealth,
    EngineLoad,
    SegmentRequest,
    VoicePrompt,
    WorkerHealth,
)
from realtime_tts.engine.pipe import PipeWriter

if TYPE_CHECKING:
    from realtime_tts.metrics import Metrics

log = logging.getLogger(__name__)


def _worker_main(*args: Any) -> None:
    """Spawn target of a worker process: the worker package (torch) is imported there, never in the web process."""
    from realtime_tts.gpu_worker.loop import main

    main(*args)

SAMPLE_RATE_HZ = 24_000
ENGINE_NAME = "omnivoice"
MAX_PROMPT_AUDIO_S = 60.0
_MAX_KEPT = 4096  # as the worker's PromptBook
_MAX_BATCH = 64  # messages from a worker handed to the loop in one call at most
_GENERATED_RMS = 0.1  # as gpu_worker/prompts.GENERATED_RMS (the worker peak-normalises such output)
WorkerStatus = Literal["ok", "loading", "restarting", "error"]


@dataclass(frozen=True, slots=True)
class _WorkerExited:
    """Queued to every in-flight request of a worker whose process ended."""

    message: str


_Inbox = asyncio.Queue[ipc.FromWorker | _WorkerExited]


@dataclass(eq=False)
class _Worker:
    worker_id: int
    device: str
    status: WorkerStatus = "loading"
    restarts: int = 0
    consecutive_failures: int = 0
    detail: str = ""
    generation: int = 0  # bumped at each spawn; messages of an older process are ignored
    process: BaseProcess | None = None
    pid: int | None = None
    pipe: PipeWriter | None = None  # to the worker process (None before its first spawn)
    in_flight: dict[str, _Inbox] = field(default_factory=dict)
    ready: asyncio.Future[None] | None = None
    stats: ipc.Stats | None = None
    restart_task: asyncio.Task[None] | None = None
    last_heard: float = 0.0  # time.monotonic() of its last message (the watchdog's clock)
    kill_reason: str | None = None  # why the watchdog killed it (its exit then says so)
    # Early admission (engine/admission.py): the worker's last report as a Backlog (None until it has measured
    # its steps), Submits sent to this process, and (send index, estimated tokens) of the first segments sent
    # that its last report had not taken yet.
    backlog: admission.Backlog | None = None
    tokens_per_char: float = 0.0
    num_sent: int = 0
    unseen_first: deque[tuple[int, int]] = field(default_factory=deque)

    def unseen_tokens(self) -> int:
        return sum(t for _, t in self.unseen_first)

    def take_stats(self, stats: ipc.Stats) -> None:
        self.stats = stats
        while self.unseen_first and self.unseen_first[0][0] <= stats.num_submits:
            self.unseen_first.popleft()
        self.tokens_per_char = stats.tokens_per_char
        self.backlog = admission.Backlog(tuple(stats.running), stats.waiting_tokens, stats.budget_tokens,
                                         stats.full_step_ms / 1000.0, stats.at_s) \
            if stats.full_step_ms > 0 and stats.budget_tokens > 0 and stats.at_s > 0 else None


def _errors_by_code() -> dict[str, type[errors.TTSError]]:
    table: dict[str, type[errors.TTSError]] = {}
    pending: list[type[errors.TTSError]] = [errors.TTSError]
    while pending:
        cls = pending.pop()
        table.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return table


_ERRORS = _errors_by_code()


def count_gpus() -> int:
    """Visible NVIDIA GPUs, found without importing torch (CUDA_VISIBLE_DEVICES, then the driver)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip()]
        return 0 if not ids or ids[0].strip() == "-1" else len(ids)
    if os.path.isdir("/proc/driver/nvidia/gpus"):
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return 0
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return 0


def cpu_worker_threads(num_workers: int) -> int:
    """torch threads of each CPU worker: half the cores shared among them. The web process (and the CPU
    voice) need the rest, and OpenMP threads that oversubscribe cores spin: on 2 busy cores, 2 threads ran
    the tiny model's step ~7x slower than 1 (measured)."""
    return max(1, (os.cpu_count() or 1) // 2 // max(1, num_workers))


def worker_devices(config: Config) -> list[str]:
    """One device per worker: every visible GPU (or config.omnivoice.gpus of them); without GPUs one CPU
    worker, or `gpus` CPU workers when set (several CPU workers: big CPU hosts, and the routing tests)."""
    cfg = config.omnivoice
    num_visible = count_gpus() if cfg.device in ("auto", "cuda") else 0
    if cfg.device == "cuda" and num_visible == 0:
        raise errors.EngineUnavailable("omnivoice device is 'cuda' but no GPU is visible")
    if num_visible == 0:
        return ["cpu"] * max(1, cfg.gpus)
    num = cfg.gpus or num_visible
    if num > num_visible:
        raise errors.EngineUnavailable(f"gpus={num} requested but only {num_visible} GPU(s) are visible")
    return [f"cuda:{i}" for i in range(num)]


def _prompt_payload(request: SegmentRequest) -> ipc.Prompt | None:
    prompt = request.voice.prompt
    if prompt is None:
        return None
    if prompt.engine != ENGINE_NAME:
        raise errors.BadRequest(f"voice: this clone prompt was made by engine {prompt.engine!r}, "
                                f"not {ENGINE_NAME!r}; re-create the voice", field="voice")
    if prompt.num_codebooks < 1 or len(prompt.codes) != 2 * prompt.num_codebooks * prompt.num_frames:
        raise errors.BadRequest("voice: clone prompt codes do not match their shape", field="voice")
    return ipc.Prompt(prompt.ref_text, prompt.codes, prompt.num_codebooks, prompt.num_frames, prompt.ref_rms,
                      key=prompt.key, generated=prompt.generated)


def estimate_tokens(submit: ipc.Submit, tokens_per_char: float) -> int:
    """Tokens one step of this segment will hold, from its text (and its clone prompt's reference text and
    codes) at the worker's reported tokens per character; 0 while the worker has not reported one."""
    chars = len(submit.text)
    frames = 0
    if submit.prompt is not None:
        chars += len(submit.prompt.ref_text)
        frames = submit.prompt.num_frames
    return round(tokens_per_char * chars) + frames if tokens_per_char > 0 else 0


def predicted_start(w: _Worker, submit: ipc.Submit, now_s: float, max_wait_s: float,
                    default_num_step: int) -> admission.Decision:
    """The web process's admission decision for a first segment on worker w (engine/admission.py's arithmetic on
    w's last report plus the first segments sent to it since): admit while the worker is cold. A segment the
    worker chooses the steps of counts at the default count, the most it gets."""
    tokens = estimate_tokens(submit, w.tokens_per_char)
    if w.backlog is None or tokens <= 0:
        return admission.Decision(True, 0.0, 0)
    wait_s = w.backlog.wait_s(now_s, w.unseen_tokens(), tokens, submit.num_step or default_num_step)
    return admission.decide(wait_s, max_wait_s)


def to_submit(request: SegmentRequest) -> ipc.Submit:
    """Validate everything pure Python can (so bad input is a 400, never a failed batch) and build the
    worker message."""
    if not request.text or not request.text.strip():
        raise errors.BadRequest("text must not be empty", field="text")
    mode = request.voice.mode
    if mode not in ("auto", "design", "clone"):
        raise errors.UnsupportedVoiceMode(f"voice mode {mode!r}: omnivoice supports auto, design, clone",
                                          field="voice")
    instruct = None
    if mode == "design" or request.voice.instruct:
        instruct = omnivoice_text.normalize_instruct(request.voice.instruct, request.text)
        if mode == "design" and instruct is None:
            raise errors.BadRequest("instruct is required for voice design", field="instruct")
    prompt = _prompt_payload(request)
    if mode == "clone" and prompt is None:
        raise errors.BadRequest("voice: clone needs a saved voice or reference audio", field="voice")
    if not omnivoice_text.is_known_language(request.language):
        raise errors.BadRequest(f"language: unknown language {request.language!r}; use an ISO code or an "
                                "English language name, or omit it", field="language")
    omnivoice_text.validate_speed_duration(request.speed, request.duration_s)
    if request.num_step is not None and not 1 <= request.num_step <= 64:
        raise errors.BadRequest(f"num_step must be within 1..64, got {request.num_step}", field="num_step")
    if not 0.0 <= request.guidance_scale <= 20.0:
        raise errors.BadRequest(f"guidance_scale must be within 0..20, got {request.guidance_scale}",
                                field="guidance_scale")
    if request.temperature < 0.0 or request.position_temperature < 0.0:
        raise errors.BadRequest("temperature must be >= 0", field="temperature")
    return ipc.Submit(
        request_id=request.request_id, text=request.text, mode=mode, instruct=instruct, prompt=prompt,
        language=omnivoice_text.resolve_language(request.language), speed=request.speed,
        duration_s=request.duration_s, num_step=request.num_step, guidance_scale=request.guidance_scale,
        temperature=request.temperature, position_temperature=request.position_temperature,
        top_p=request.top_p, seed=request.seed, denoise=request.denoise, priority=request.priority,
        deadline_s=request.deadline_s, prompt_from=request.prompt_from, keep_codes=request.keep_codes)


class OmniVoiceEngine:
    """engine.base.Engine over one spawned worker process per GPU (or one CPU worker)."""

    load_timeout_s: float = 600.0
    max_in_flight_per_worker: int = 4096  # beyond this, new segments are refused (Overloaded) to bound memory
    stop_timeout_s: float = 10.0
    max_restart_backoff_s: float = 30.0

    def __init__(self, config: Config) -> None:
        if not config.omnivoice.model:
            raise errors.EngineUnavailable("omnivoice: no model directory configured (--model)")
        self._config = config
        self._model_ref: str = config.omnivoice.model  # checked above: the str start() resolves
        self._model_dir = ""  # resolved at start(): a hub id may need a download (hub.resolve)
        self._workers: list[_Worker] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._started = False
        self._context = multiprocessing.get_context("spawn")
        self._stats_listeners: list[Callable[[ipc.Stats], None]] = []
        # Segments whose codes their worker keeps (keep_codes): request_id → (worker, its generation), so a
        # segment conditioned on one is sent to the same worker.
        self._kept: OrderedDict[str, tuple[_Worker, int]] = OrderedDict()
        self._job_timeout_s = config.limits.engine_job_timeout_s
        self._check_interval_s = config.limits.worker_check_interval_s
        self._watchdog: asyncio.Task[None] | None = None
        self._ping_seq = 0
        self._on_restart: Callable[[str], None] | None = None
        self._on_refuse: Callable[[_Worker], None] | None = None
        self._admission_wait_s = config.omnivoice.admission_wait_ms / 1000.0
        device = "cpu" if config.omnivoice.device == "cpu" else ("cuda" if count_gpus() else "cpu")
        self._capabilities = Capabilities(
            engine=ENGINE_NAME, model=hub.display_name(config.omnivoice.model) or ENGINE_NAME,
            sample_rate=SAMPLE_RATE_HZ, voice_modes=frozenset({"auto", "design", "clone"}), languages=None,
            deterministic=True, device=device, batched=True, continuity=True)

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._model_dir = str(await asyncio.to_thread(hub.resolve, self._model_ref))
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._workers = [_Worker(i, dev) for i, dev in enumerate(worker_devices(self._config))]
        for w in self._workers:
            await asyncio.to_thread(self._spawn, w)
        results = await asyncio.gather(*(self._wait_ready(w) for w in self._workers), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if len(failures) == len(self._workers):
            await self.stop()
            raise errors.EngineUnavailable(f"omnivoice workers failed to start: {failures[0]}")
        self._started = True
        self._watchdog = asyncio.create_task(self._watch(), name="omnivoice-watchdog")

    async def _watch(self) -> None:
        """A worker that says nothing gets a Ping (answered between two steps); one silent for
        engine_job_timeout_s is frozen or stuck in a step: killed, so its exit fails its requests (engine_dead,
        retryable) and it restarts, instead of its clients waiting forever."""
        while not self._stopping:
            await asyncio.sleep(self._check_interval_s)
            now = time.monotonic()
            for w in self._workers:
                if w.status != "ok" or w.process is None or w.kill_reason is not None:
                    continue
                silent = now - w.last_heard
                if silent >= self._job_timeout_s:
                    w.kill_reason = (f"omnivoice worker {w.worker_id} ({w.device}) gave no sign of life for "
                                     f"{silent:.1f} s (engine_job_timeout_s): killed and restarting; retry")
                    log.error("%s", w.kill_reason)
                    w.process.kill()  # its reader sees EOF: _on_exit fails its requests and restarts it
                elif silent >= self._check_interval_s:
                    self._ping_seq += 1
                    self._send(w, ipc.Ping(self._ping_seq))

    async def _wait_ready(self, w: _Worker) -> None:
        assert w.ready is not None
        try:
            await asyncio.wait_for(asyncio.shield(w.ready), self.load_timeout_s)
        except TimeoutError:
            raise errors.EngineUnavailable(
                f"worker {w.worker_id} did not load within {self.load_timeout_s} s") from None

    async def stop(self) -> None:
        self._stopping = True
        self._started = False
        if self._watchdog is not None:
            self._watchdog.cancel()
        for w in self._workers:
            if w.restart_task is not None:
                w.restart_task.cancel()
            self._fail_in_flight(w, "omnivoice engine stopped")
            if w.pipe is not None:
                w.pipe.send(ipc.encode(ipc.Shutdown()))
                w.pipe.close_when_flushed()
        await asyncio.gather(*(asyncio.to_thread(self._reap, w) for w in self._workers))

    def _reap(self, w: _Worker) -> None:
        process = w.process
        if process is None:
            return
        process.join(self.stop_timeout_s)
        if process.is_alive():
            log.warning("omnivoice worker %d did not exit; terminating", w.worker_id)
            process.terminate()
            process.join(5)
        if process.is_alive():
            process.kill()
            process.join(5)

    def _spawn(self, w: _Worker) -> None:
        """Start a worker process and its pipe threads (runs in a thread: process start takes a while)."""
        assert self._loop is not None
        loop = self._loop
        options = ipc.WorkerOptions(worker_id=w.worker_id, model_dir=self._model_dir, device=w.device,
                                    dtype=self._config.omnivoice.dtype if w.device != "cpu" else "fp32",
                                    max_batch_tokens=self._config.omnivoice.max_batch_tokens,
                                    latency_batch_tokens=self._config.omnivoice.latency_batch_tokens,
                                    num_step=self._config.omnivoice.num_step,
                                    min_num_step=self._config.omnivoice.min_num_step,
                                    admit_interval_s=self._config.omnivoice.admit_interval_ms / 1000.0,
                                    admission_wait_s=self._config.omnivoice.admission_wait_ms / 1000.0,
                                    policy=self._config.omnivoice.scheduler_policy,
                                    codec_graph_frames=self._config.omnivoice.codec_graph_frames,
                                    precision=self._config.omnivoice.precision,
                                    swiglu_gemm_min_tokens=self._config.omnivoice.swiglu_gemm_min_tokens,
                                    fp8_matmuls=self._config.omnivoice.fp8_matmuls,
                                    profile_path=self._config.omnivoice.profile_worker,
                                    num_threads=cpu_worker_threads(len(self._workers)) if w.device == "cpu" else 0)
        to_child_r, to_child_w = self._context.Pipe(duplex=False)
        from_child_r, from_child_w = self._context.Pipe(duplex=False)
        process = self._context.Process(target=_worker_main, args=(options, to_child_r, from_child_w),
                                        name=f"omnivoice-worker-{w.worker_id}", daemon=True)
        ready: asyncio.Future[None] = loop.create_future()
        w.ready = ready
        w.generation += 1
        w.status = "loading" if w.restarts == 0 else "restarting"
        if w.pipe is not None:
            loop.call_soon_threadsafe(w.pipe.close)  # the previous process's (normally closed at its exit)
        w.pipe = PipeWriter(to_child_w, loop)  # nothing is sent to it before this spawn returns
        w.stats = None
        w.backlog, w.tokens_per_char, w.num_sent = None, 0.0, 0
        w.unseen_first = deque()
        w.kill_reason = None
        w.last_heard = time.monotonic()
        process.start()
        # Our copies of the child's ends must go, or EOF never arrives when the child dies.
        to_child_r.close()
        from_child_w.close()
        w.process, w.pid = process, process.pid
        generation = w.generation
        threading.Thread(target=self._read_loop, args=(w, generation, from_child_r, process), daemon=True,
                         name=f"omnivoice-reader-{w.worker_id}").start()

    def _read_loop(self, w: _Worker, generation: int, conn: Connection, process: BaseProcess) -> None:
        loop = self._loop
        assert loop is not None
        try:
            while True:
                try:
                    data = conn.recv_bytes()
                except (EOFError, OSError):
                    break
                # Everything already in the pipe goes to the loop in one call: one wake-up (and one GIL hand-off)
                # per batch instead of per message when the worker sends faster than the loop takes them.
                batch: list[ipc.FromWorker] = []
                while True:
                    try:
                        batch.append(ipc.decode_from_worker(data))
                    except Exception:  # a corrupt frame is a worker bug; keep reading
                        log.exception("omnivoice worker %d sent an undecodable message", w.worker_id)
                    if len(batch) >= _MAX_BATCH or not conn.poll(0):
                        break
                    data = conn.recv_bytes()
                if batch:
                    loop.call_soon_threadsafe(self._on_messages, w, generation, batch)
        finally:
            conn.close()
            process.join(5)
            if process.is_alive() and not self._stopping:
                # Its pipe closed but it lingers (hung in teardown): it must not hold the device while
                # its replacement loads.
                process.kill()
                process.join(5)
            try:
                loop.call_soon_threadsafe(self._on_exit, w, generation, process.exitcode)
            except RuntimeError:
                pass  # the loop is closed: nothing left to tell

    # --- events from workers (on the loop) ---------------------------------------------------------------

    def _on_messages(self, w: _Worker, generation: int, batch: list[ipc.FromWorker]) -> None:
        for message in batch:
            self._on_message(w, generation, message)

    def _on_message(self, w: _Worker, generation: int, message: ipc.FromWorker) -> None:
        if generation != w.generation:
            return
        w.last_heard = time.monotonic()
        if isinstance(message, ipc.Pong):
            return
        if isinstance(message, ipc.Stats):
            w.take_stats(message)
            for listener in self._stats_listeners:
                try:
                    listener(message)
                except Exception:  # a metrics bug must not break the engine
                    log.exception("stats listener failed")
        elif isinstance(message, ipc.Ready):
            w.status, w.detail, w.consecutive_failures = "ok", "", 0
            log.info("omnivoice worker %d ready on %s (pid %d)", w.worker_id, message.device, message.pid)
            if w.ready is not None and not w.ready.done():
                w.ready.set_result(None)
        elif isinstance(message, ipc.Fatal):
            w.status, w.detail = "error", message.message
            log.error("omnivoice worker %d failed: %s", w.worker_id, message.message)
            if w.ready is not None and not w.ready.done():
                w.ready.set_exception(errors.EngineUnavailable(f"worker {w.worker_id}: {message.message}"))
        else:
            inbox = w.in_flight.get(message.request_id)
            if inbox is not None:
                inbox.put_nowait(message)

    def _on_exit(self, w: _Worker, generation: int, exitcode: int | None) -> None:
        if generation != w.generation or self._stopping:
            return
        if w.pipe is not None:
            w.pipe.close()
        reason = w.kill_reason or f"omnivoice worker {w.worker_id} ({w.device}) exited with code {exitcode}"
        if self._on_restart is not None:
            self._on_restart("stuck" if w.kill_reason else "died")
        log.error("%s; failing %d in-flight request(s) and restarting it", reason, len(w.in_flight))
        self._fail_in_flight(w, reason)
        if w.ready is not None and not w.ready.done():
            w.ready.set_exception(errors.EngineUnavailable(w.detail or reason))
        if w.status != "error":
            w.detail = reason
        w.status = "restarting" if w.status != "error" else "error"
        w.restarts += 1
        w.consecutive_failures += 1
        w.restart_task = asyncio.get_running_loop().create_task(self._restart(w))

    def _fail_in_flight(self, w: _Worker, message: str) -> None:
        for inbox in w.in_flight.values():
            inbox.put_nowait(_WorkerExited(message))
        w.in_flight.clear()

    async def _restart(self, w: _Worker) -> None:
        backoff = min(self.max_restart_backoff_s, 0.25 * 2 ** (w.consecutive_failures - 1))
        await asyncio.sleep(backoff)
        if self._stopping:
            return
        await asyncio.to_thread(self._spawn, w)
        try:
            await self._wait_ready(w)
        except errors.TTSError:
            pass  # its exit (or a Fatal) is reported by the reader and schedules the next attempt

    # --- requests ----------------------------------------------------------------------------------------

    def _pick(self, prompt_from: str | None = None) -> _Worker:
        if prompt_from is not None:
            # A segment waiting for another's codes goes where they are made (the worker holds it back).
            source = self._kept.get(prompt_from)
            if source is not None and source[0].status == "ok" and source[0].generation == source[1]:
                return source[0]
        ready = [w for w in self._workers if w.status == "ok"]
        if not ready:
            if any(w.status in ("loading", "restarting") for w in self._workers):
                raise errors.EngineUnavailable("omnivoice workers are (re)starting", retry_after_ms=1000)
            raise errors.EngineUnavailable("no omnivoice worker is running; see /health")
        best = min(ready, key=lambda w: (len(w.in_flight), w.stats.num_waiting if w.stats else 0, w.worker_id))
        if len(best.in_flight) >= self.max_in_flight_per_worker:
            raise errors.Overloaded(f"omnivoice workers are full ({len(best.in_flight)} segments each)",
                                    retry_after_ms=1000)
        return best

    def _send(self, w: _Worker, message: ipc.ToWorker) -> None:
        if isinstance(message, ipc.Submit):
            w.num_sent += 1
            if message.priority == 0:
                w.unseen_first.append((w.num_sent, estimate_tokens(message, w.tokens_per_char)))
        if w.pipe is not None:
            w.pipe.send(ipc.encode(message))

    def check(self, request: SegmentRequest) -> None:
        """Service.open's look before any work is queued: a request or turn (its first segment) that no worker
        can start within admission_wait_ms is refused now, the decision synthesize would make two tasks and as
        many loop iterations later (under load each iteration is the whole ready queue). Anything else wrong is
        left for synthesize to report."""
        if request.priority != 0 or self._admission_wait_s <= 0:
            return
        try:
            w = self._pick(request.prompt_from)
            submit = ipc.Submit(request.request_id, request.text, prompt=_prompt_payload(request),
                                num_step=request.num_step, priority=0, prompt_from=request.prompt_from)
        except errors.TTSError:
            return
        self._admit(w, submit)

    def _admit(self, w: _Worker, submit: ipc.Submit) -> _Worker:
        """A segment that opens a request or a turn, at its arrival: the worker that can start it within
        admission_wait_ms by its last report and what was sent to it since (w first, then the others unless
        the segment is bound to w's codes), or Overloaded at once, without a round trip to any worker."""
        if self._admission_wait_s <= 0:
            return w
        now = time.monotonic()
        others = [] if submit.prompt_from is not None else [o for o in self._workers if o is not w and o.status == "ok"]
        best: admission.Decision | None = None
        for candidate in (w, *others):
            decision = predicted_start(candidate, submit, now, self._admission_wait_s,
                                       self._config.omnivoice.num_step)
            if decision.admit:
                return candidate
            if best is None or decision.wait_s < best.wait_s:
                best = decision
        assert best is not None
        if self._on_refuse is not None:
            self._on_refuse(w)
        raise errors.Overloaded(
            f"omnivoice is full: this request would start in about {best.wait_s:.1f} s "
            f"(limit {self._admission_wait_s:g} s; refused on arrival by the web process)",
            retry_after_ms=best.retry_after_ms)

    async def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        submit = to_submit(request)
        w = self._pick(request.prompt_from)
        if submit.priority == 0:
            w = self._admit(w, submit)
        if submit.prompt_from is not None and self._kept.get(submit.prompt_from, (None,))[0] is not w:
            submit = msgspec.structs.replace(submit, prompt_from=None)  # its source is gone: own prompt only
        rid = request.request_id
        if request.keep_codes:
            self._kept[rid] = (w, w.generation)
            while len(self._kept) > _MAX_KEPT:
                self._kept.popitem(last=False)
        if rid in w.in_flight:
            raise errors.BadRequest(f"request_id {rid!r} is already in flight", field="request_id")
        inbox: _Inbox = asyncio.Queue()
        w.in_flight[rid] = inbox
        generation = w.generation
        self._send(w, submit)
        finished = False
        try:
            while True:
                message = await inbox.get()
                if isinstance(message, ipc.Audio):
                    samples = np.frombuffer(message.samples, dtype="<f4" if message.encoding == "f32le"
                                            else "<i2")
                    if message.encoding == "s16le":
                        samples = samples.astype(np.float32) / 32768.0
                    else:
                        samples = samples.astype(np.float32)  # a writable copy
                    finished = message.last
                    prompt = None
                    if message.codes and message.num_codebooks > 0:
                        prompt = VoicePrompt(ENGINE_NAME, omnivoice_text.end_with_punctuation(request.text),
                                             message.codes, message.num_codebooks,
                                             len(message.codes) // (2 * message.num_codebooks),
                                             _GENERATED_RMS, key=f"gen:{rid}", generated=True)
                    yield AudioChunk(samples=samples, last=message.last, queue_ms=message.queue_ms,
                                     gen_ms=message.gen_ms, batch_size=max(1, round(message.batch_size)),
                                     num_steps=message.num_steps, prompt=prompt)
                    if finished:
                        return
                elif isinstance(message, ipc.Failed):
                    finished = True
                    raise _ERRORS.get(message.code, errors.TTSError)(message.message, field=message.field,
                                                                     retry_after_ms=message.retry_after_ms)
                elif isinstance(message, _WorkerExited):
                    finished = True
                    raise errors.EngineDead(message.message)
        finally:
            if w.in_flight.get(rid) is inbox:
                del w.in_flight[rid]
            if not finished and w.generation == generation and w.status == "ok":
                self._send(w, ipc.Abort(rid))  # closed early: stop the work at the next step

    async def abort(self, request_id: str) -> None:
        for w in self._workers:
            if request_id in w.in_flight:
                self._send(w, ipc.Abort(request_id))

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size == 0:
            raise errors.BadRequest("ref_audio must be non-empty mono audio", field="ref_audio")
        if not 8000 <= sample_rate <= 192_000:
            raise errors.BadRequest(f"ref_audio sample rate must be 8000..192000 Hz, got {sample_rate}",
                                    field="ref_audio")
        if audio.size / sample_rate > MAX_PROMPT_AUDIO_S:
            raise errors.BadRequest(f"ref_audio must be at most {MAX_PROMPT_AUDIO_S:.0f} s long",
                                    field="ref_audio")
        if not np.isfinite(audio).all():
            raise errors.BadRequest("ref_audio contains NaN or infinite samples", field="ref_audio")
        if not ref_text or not ref_text.strip():
            raise errors.BadRequest("ref_text (the transcript of the reference audio) is required",
                                    field="ref_text")
        w = self._pick()
        rid = f"voice-{uuid.uuid4().hex}"
        inbox: _Inbox = asyncio.Queue()
        w.in_flight[rid] = inbox
        self._send(w, ipc.EncodeVoice(rid, audio.astype("<f4").tobytes(), sample_rate, ref_text.strip()))
        try:
            message = await inbox.get()
        finally:
            w.in_flight.pop(rid, None)
        if isinstance(message, ipc.VoiceEncoded):
            p = message.prompt
            return VoicePrompt(ENGINE_NAME, p.ref_text, p.codes, p.num_codebooks, p.num_frames, p.ref_rms)
        if isinstance(message, ipc.Failed):
            raise _ERRORS.get(message.code, errors.TTSError)(message.message, field=message.field)
        if isinstance(message, _WorkerExited):
            raise errors.EngineDead(message.message)
        raise errors.TTSError(f"unexpected worker reply {type(message).__name__}")

    # --- observation -------------------------------------------------------------------------------------

    def health(self) -> EngineHealth:
        workers = tuple(WorkerHealth(w.worker_id, w.status, w.device, len(w.in_flight), w.restarts, w.detail)
                        for w in self._workers)
        if any(w.status == "ok" for w in self._workers):
            status: Literal["ok", "loading", "error"] = "ok"
        elif self._workers and all(w.status == "error" for w in self._workers):
            status = "error"
        else:
            status = "loading"
        detail = "; ".join(w.detail for w in self._workers if w.detail)
        return EngineHealth(status, detail, workers)

    def load(self) -> EngineLoad:
        ok = [w for w in self._workers if w.status == "ok"]
        return EngineLoad(pool_size=len(self._workers), idle=sum(1 for w in ok if not w.in_flight),
                          queued_segments=sum(w.stats.num_waiting for w in self._workers if w.stats),
                          in_flight_segments=sum(len(w.in_flight) for w in self._workers))

    def add_stats_listener(self, listener: Callable[[ipc.Stats], None]) -> None:
        """Call listener(stats) on the event loop for every worker load report (for /metrics: queue depth,
        every step's time in stats.step_ms, cumulative CUDA-graph hits/misses of that worker process —
        they restart from 0 when a worker restarts)."""
        self._stats_listeners.append(listener)

    def attach_metrics(self, metrics: Metrics) -> None:
        """Feed /metrics from worker reports: per-worker queue depth, every step's time, CUDA-graph hits and
        misses, host / GPU-busy / GPU-gap / codec seconds, codec calls and items, admission refusals and the step
        model (worker counters restart at 0 with the process; only increases are counted)."""
        seen: dict[int, tuple[float, ...]] = {}
        self._on_restart = lambda cause: metrics.worker_restarts_total.labels(engine=ENGINE_NAME, cause=cause).inc()
        # worker-cumulative Stats fields → the counter each increase goes to, and its labels besides the worker's
        # (None: not per worker)
        cumulative: tuple[tuple[str, Any, dict[str, str] | None], ...] = (
            ("cuda_graph_hits", metrics.cuda_graph_hits_total, None),
            ("cuda_graph_misses", metrics.cuda_graph_misses_total, None),
            ("host_s", metrics.worker_host_seconds_total, {}), ("gpu_busy_s", metrics.gpu_busy_seconds_total, {}),
            ("gpu_gap_s", metrics.gpu_gap_seconds_total, {}), ("codec_s", metrics.codec_seconds_total, {}),
            ("codec_calls", metrics.codec_calls_total, {}), ("codec_items", metrics.codec_items_total, {}),
            ("refused", metrics.admission_refusals_total, {"side": "worker"}))
        self._on_refuse = lambda w: metrics.admission_refusals_total.labels(
            worker=f"{ENGINE_NAME}-{w.worker_id}", side="web").inc()

        def record(stats: ipc.Stats) -> None:
            worker = f"{ENGINE_NAME}-{stats.worker_id}"
            metrics.queue_depth.labels(worker=worker).set(stats.num_waiting + stats.num_running)
            metrics.full_step_seconds.labels(worker=worker).set(stats.full_step_ms / 1000.0)
            for ms in stats.step_ms:
                metrics.step_seconds.observe(ms / 1000.0)
            now = tuple(float(getattr(stats, name)) for name, _, _ in cumulative)
            before = seen.get(stats.worker_id, (0.0,) * len(now))
            if any(n < b for n, b in zip(now, before, strict=True)):
                before = (0.0,) * len(now)  # a restarted worker counts from 0 again
            for (_, counter, labels), n, b in zip(cumulative, now, before, strict=True):
                if n > b:
                    (counter if labels is None else counter.labels(worker=worker, **labels)).inc(n - b)
            seen[stats.worker_id] = now

        self.add_stats_listener(record)

    def worker_stats(self) -> list[ipc.Stats]:
        """The latest load report of each worker (for /metrics)."""
        return [w.stats for w in self._workers if w.stats is not None]

    def worker_pids(self) -> list[int | None]:
        return [w.pid for w in self._workers]

