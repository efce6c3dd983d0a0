"""The OmniVoice worker process: loads the model on one device and runs the step loop.

Loop: take messages → admit segments to the scheduler → run one diffusion step for the batch it picks →
retire finished segments to the decode thread, which decodes them together and sends their audio. Spawned by
engine/client.py; torch and realtime_tts.model are imported only inside main() (the web process imports this
module for the target).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import random
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

import msgspec

from realtime_tts import errors
from realtime_tts.engine import ipc
from realtime_tts.engine.admission import running_by_steps_left
from realtime_tts.engine.base import VoicePrompt
from realtime_tts.gpu_worker.admission import Admission, StepClock
from realtime_tts.gpu_worker.prompts import Generated, Gone, PromptBook
from realtime_tts.gpu_worker.scheduler import Scheduler, StepPlan, StepTimeModel
from realtime_tts.thread_sampler import StackSampler

log = logging.getLogger("realtime_tts.worker")
# What the step loop takes: messages from the web process, and the loop's own notes from the decode thread.
Inbox = queue.Queue[ipc.ToWorker | Generated | Gone]
# Decoded prompts a worker keeps (saved voices, conversation prompts): a hot voice is made into tensors once.
PROMPT_CACHE_SIZE = 256
# The step loop's own host work per step (scheduler, bookkeeping), added to the measured step times.
_LOOP_HOST_S = 0.0003


class Backend(Protocol):
    """What the loop needs from the model side (ModelBackend below, which steps through gpu_worker/runner's
    StepRunner). Tensors stay inside; the loop only sees opaque per-segment states."""

    device: str
    model_name: str
    sample_rate: int
    max_batch_items: int  # the largest batch a step runs well (CUDA: the largest captured graph width)
    max_batch_tokens: int  # the largest step it runs well (CUDA: the largest token bucket)
    token_buckets: tuple[int, ...]  # a step costs the smallest of these holding its tokens (() = no buckets)
    step_points: list[tuple[int, float]] | None  # measured (tokens, seconds) of one step per size, or None

    def prepare(self, submit: ipc.Submit) -> tuple[Any, int, int]:
        """→ (state, tokens it adds to a step, number of steps). Raises errors.TTSError on bad input."""

    def step(self, states: list[Any]) -> None:
        """One diffusion step for every state (each at its own step index). May return before the device has
        run it: decode() waits for what it needs."""

    def release(self, state: Any) -> None:
        """Drop an unfinished state (cancelled or failed): free what it holds on the device."""

    def decode(self, states: list[Any]) -> list[bytes]:
        """Finished states → float32 little-endian mono audio, one per state, batched. Called from the loop's
        decode thread while the loop thread steps."""

    def bind_thread(self) -> None:
        """Run once in the decode thread before its first decode (e.g. select the device)."""

    def encode_prompt(self, audio: bytes, sample_rate: int, ref_text: str) -> ipc.Prompt: ...

    def codes(self, state: Any) -> tuple[bytes, int]:
        """A finished state's generated codes: (int16 little-endian [num_codebooks, frames], num_codebooks).
        Called from the decode thread (waits for the device like decode)."""

    def counters(self) -> tuple[int, int]:
        """(CUDA graph hits, misses) so far."""

    def device_times(self) -> DeviceTimes:
        """Cumulative device-side timings so far (zeros where not measured, e.g. on the CPU)."""

    def idle(self) -> None:
        """The loop has nothing to run now (the time until its next step is no gap between steps)."""


@dataclass(frozen=True, slots=True)
class DeviceTimes:
    """Cumulative seconds: the loop blocked waiting for the device to catch up (inside step()), the device
    running steps, the device idle between steps while the loop was busy, the device running codec decodes; and
    cumulative counts of codec calls and of the items they decoded."""

    wait_s: float = 0.0
    busy_s: float = 0.0
    gap_s: float = 0.0
    codec_s: float = 0.0
    codec_calls: int = 0  # codec calls (graph replays + eager calls) and the items they decoded
    codec_items: int = 0


class ModelBackend:
    """Backend over realtime_tts.model, stepping through gpu_worker/runner.StepRunner (CUDA: fused Triton
    backbone + CUDA graphs per bucket with eager fallback; CPU: the model's eager packed step) and decoding
    finished segments together through the codec. torch is imported here, inside the worker process.
    """

    def __init__(self, options: ipc.WorkerOptions) -> None:
        import torch

        from realtime_tts import model as ov
        from realtime_tts.gpu_worker.runner import StepRunner

        # Decodes run in the loop's decode thread while steps run here; a CUDA graph capture must not see
        # another thread's CUDA work (global capture mode), so captures and decodes exclude each other.
        self._cuda_lock = threading.Lock()
        if options.num_threads > 0:
            torch.set_num_threads(options.num_threads)
        if options.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(options.device))
        self._ov = ov
        self.model = ov.OmniVoiceModel.from_pretrained(options.model_dir, dtype=options.dtype,
                                                       device=options.device)
        # Room for every bucket serving_keys() lists (~290 at a 16k budget; each holds only its small static
        # inputs, the graphs share one memory pool).
        self.runner = StepRunner(self.model, max_graphs=400, max_slots=options.max_active,
                                 codec_graph_frames=options.codec_graph_frames, precision=options.precision,
                                 swiglu_gemm_min_tokens=options.swiglu_gemm_min_tokens,
                                 capture_lock=self._cuda_lock)
        self._budget = options.max_batch_tokens
        self._policy = options.policy
        self.device = options.device
        self.model_name = os.path.basename(options.model_dir.rstrip("/"))
        self.sample_rate = int(self.model.codec.sample_rate)
        if self.runner.use_graphs:
            self.max_batch_items = max(self.runner.batch_buckets)
            self.max_batch_tokens = max(self.runner.token_buckets)
            self.token_buckets: tuple[int, ...] = tuple(self.runner.token_buckets)
        else:
            self.max_batch_items, self.max_batch_tokens, self.token_buckets = 256, 1 << 30, ()
        self._rng = random.Random()
        self._prompts: collections.OrderedDict[str, Any] = collections.OrderedDict()  # key → ClonePrompt
        self.step_points: list[tuple[int, float]] | None = None
        # Codec decodes run on their own stream (decode thread), beside the steps instead of between them.
        self._decode_stream: Any = (torch.cuda.Stream(self.model.device)  # type: ignore[no-untyped-call]
                                    if self.model.device.type == "cuda" else None)
        self._codec_s = 0.0  # device time of the decodes (timing events on the decode stream)
        if self.model.device.type == "cuda":
            self._warm_up()

    def _warm_up(self, capture_s: float = 30.0) -> None:
        """Compile the Triton kernels and load cuBLAS/codec before Ready, so no request pays for it; then capture
        the CUDA graphs of the buckets serving lands in. Captured on first use instead, they stalled the
        worker mid-serving (H200 run: captures of up to 1.0 s during the agent runs; N=25 had a worse p95
        than N=50). bench/omnivoice_sched_sim.py --keys: these buckets cover every step of the bench's runs."""
        import torch

        state, _, num_steps = self.prepare(ipc.Submit("warm-up", "Warm up.", duration_s=1.0, num_step=2, seed=0))
        for _ in range(num_steps):
            self.step([state])
        self.decode([state])
        # The codec's Snake kernel (kernels/snake.py) compiles one variant per tile width and per divisibility
        # of its strides by 16, i.e. per length mod 16 at each decoder stage: 1-16 frames cover them all. Left
        # to the first requests, those compiles stalled the decode thread (H200 call 4: 25 agents' p95 first
        # audio 775 ms, against 154 ms at 100 agents run after them).
        self.model.codec.decode([torch.zeros(self.model.num_codebooks, t, dtype=torch.long) for t in range(1, 17)])
        # the padded batches' masked kernels and the codec graphs serving decodes land in (codec_graphs.py)
        t0 = time.perf_counter()
        if num_codec := self.runner.warm_codec():
            log.info("captured %d codec graphs in %.1f s", num_codec, time.perf_counter() - t0)
        if self.runner.use_graphs:
            budget = min(self._budget, self.max_batch_tokens)
            t0 = time.perf_counter()
            keys = self.runner.serving_keys(budget)
            captured = self.runner.capture_startup(budget, max_seconds=capture_s, keys=keys)
            log.info("captured %d of %d serving graph buckets in %.1f s", captured, len(keys),
                     time.perf_counter() - t0)
            # The deadline policy plans with these; the log line is also the step-time model the scheduler
            # simulation reads (bench/omnivoice_serve.py saves it, bench/omnivoice_costs.py), under any policy.
            self.step_points = self._time_steps(budget)
            log.info("step times (tokens: ms): %s", ", ".join(f"{n}: {1000 * s:.2f}" for n, s in self.step_points))

    def _time_steps(self, max_tokens: int, reps: int = 3) -> list[tuple[int, float]]:
        """(token bucket, seconds of one step) on this device for every token bucket up to max_tokens, each
        timed on a batch of real 2.4 s sentences that fills it (what the deadline scheduler plans with)."""
        import statistics

        import torch

        base, item_tokens, _ = self.prepare(ipc.Submit("calibrate", "One two three four five six seven.",
                                                       duration_s=2.4, seed=0))
        points = []
        for bucket in self.runner.token_buckets:
            if bucket > max_tokens:
                break
            num = min(self.max_batch_items, max(1, bucket // item_tokens))
            states = [self._ov.ItemState.start(base.item) for _ in range(num)]
            self.runner.step(states)  # lays the batch out (captures its graph if start-up did not)
            times = []
            for _ in range(reps):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                self.runner.step(states)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            for s in states:
                self.runner.release(s)
            points.append((bucket, statistics.median(times)))
        return points

    def _clone_prompt(self, p: ipc.Prompt) -> Any:
        """ipc.Prompt → ClonePrompt (codes as a tensor), through the LRU when the prompt has a key."""
        key = p.key
        prompt = self._prompts.get(key) if key is not None else None
        if key is not None and prompt is not None and prompt.ref_text == p.ref_text \
                and prompt.codes.shape[-1] == p.num_frames:
            self._prompts.move_to_end(key)
            return prompt
        prompt = self._ov.ClonePrompt.from_voice_prompt(VoicePrompt("omnivoice", p.ref_text, p.codes,
                                                                    p.num_codebooks, p.num_frames, p.ref_rms))
        if p.key is not None:
            self._prompts[p.key] = prompt
            while len(self._prompts) > PROMPT_CACHE_SIZE:
                self._prompts.popitem(last=False)
        return prompt

    def prepare(self, submit: ipc.Submit) -> tuple[Any, int, int]:
        ov = self._ov
        prompt = self._clone_prompt(submit.prompt) if submit.prompt is not None else None
        params = ov.DecodeParams(num_step=submit.num_step, guidance_scale=submit.guidance_scale,
                                 position_temperature=submit.position_temperature,
                                 class_temperature=submit.temperature)
        # No seed: a fresh one, so repeated requests vary; with a seed the audio is reproducible and does
        # not depend on which other segments share the batch (per-item counter-based noise).
        seed = submit.seed if submit.seed is not None else self._rng.getrandbits(62)
        item = ov.prepare(self.model, submit.text, language=submit.language, instruct=submit.instruct,
                          prompt=prompt, speed=submit.speed, duration_s=submit.duration_s, params=params,
                          denoise=submit.denoise, seed=seed)
        if submit.prompt is not None and submit.prompt.generated:
            item = dataclasses.replace(item, ref_rms=None)  # loudness as auto/design audio (match_loudness)
        self.runner.check(item)
        state = ov.ItemState.start(item)  # on the host: the runner copies it into a device slot at its first step
        return state, item.num_tokens, len(item.reveal)

    def step(self, states: list[Any]) -> None:
        self.runner.step(states)

    def release(self, state: Any) -> None:
        self.runner.release(state)

    def decode(self, states: list[Any]) -> list[bytes]:
        with self._cuda_lock:
            stream = self._decode_stream
            if stream is None:
                waves = self.runner.decode(states)
            else:
                import torch

                for event in {id(s.ready): s.ready for s in states if s.ready is not None}.values():
                    stream.wait_event(event)  # the grids were copied out of their slots on the step stream
                start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                # the decode thread sleeps until its decode is done instead of polling the driver (host_copy.py)
                end = torch.cuda.Event(enable_timing=True, blocking=True)  # type: ignore[no-untyped-call]
                with torch.cuda.stream(stream):
                    start.record()
                    waves = self.runner.decode(states)  # its copy to the host waits for the decode
                    end.record()
                end.synchronize()
                self._codec_s += start.elapsed_time(end) / 1000.0
        return [self._ov.fade_edges(self._ov.match_loudness(w, s.item.ref_rms), self.sample_rate).astype("<f4")
                .tobytes() for w, s in zip(waves, states, strict=True)]

    def bind_thread(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            with self._cuda_lock:  # not while a capture runs
                torch.cuda.set_device(torch.device(self.device))  # per thread: the decode thread's default is cuda:0

    def encode_prompt(self, audio: bytes, sample_rate: int, ref_text: str) -> ipc.Prompt:
        import numpy as np

        wave = np.frombuffer(audio, dtype="<f4").astype(np.float32)
        with self._cuda_lock:  # the codec is the decode thread's too
            vp = self.model.encode_prompt(wave, sample_rate, ref_text).to_voice_prompt()
        return ipc.Prompt(vp.ref_text, vp.codes, vp.num_codebooks, vp.num_frames, vp.ref_rms)

    def codes(self, state: Any) -> tuple[bytes, int]:
        from realtime_tts.gpu_worker.host_copy import to_host

        stream = self._decode_stream
        if stream is None or state.ready is None:  # CPU: the grid is on the host already
            grid = to_host(state.tokens)
        else:
            import torch

            # On the decode stream, behind the step that copied the grid out of its slot (state.ready) and nothing
            # else: a copy on the default stream (the steps') would also wait for the steps queued after it.
            with torch.cuda.stream(stream):
                stream.wait_event(state.ready)
                grid = to_host(state.tokens)
        codes = grid.numpy().astype("<i2")  # [8, frames]
        return codes.tobytes(), int(codes.shape[0])

    def counters(self) -> tuple[int, int]:
        """(CUDA graph hits, misses) so far."""
        return self.runner.stats.graph_hits, self.runner.stats.graph_misses

    def device_times(self) -> DeviceTimes:
        st = self.runner.stats
        calls, items = self.runner.codec_counts()
        return DeviceTimes(st.wait_s, st.gpu_busy_s, st.gpu_gap_s, self._codec_s, calls, items)

    def idle(self) -> None:
        self.runner.idle()


@dataclass(slots=True)
class _Activity:
    """Counters of one reporting window of the step loop (logged at INFO while busy): where a worker's time
    goes under load, without a profiler."""

    since: float
    steps: int = 0
    items: int = 0  # sum of batch sizes
    tokens: int = 0  # sum of tokens per step
    step_s: float = 0.0  # host time in backend.step (includes waiting for the GPU to catch up)
    host_s: float = 0.0  # the loop's own work per step: the whole iteration less the waits for the GPU
    start: DeviceTimes = DeviceTimes()  # the backend's device times when the window opened
    decodes: int = 0
    decoded: int = 0  # segments decoded
    decode_s: float = 0.0

    def line(self, now: float, times: DeviceTimes) -> str:
        span = max(1e-9, now - self.since)
        per = max(1, self.steps)
        decode_ms = 1000 * self.decode_s / max(1, self.decodes)
        calls = times.codec_calls - self.start.codec_calls
        busy, gap = times.busy_s - self.start.busy_s, times.gap_s - self.start.gap_s
        return (f"{self.steps / span:.0f} steps/s, {self.items / per:.1f} items and {self.tokens / per:.0f} tokens "
                f"per step, step {1000 * self.step_s / per:.2f} ms in backend.step of which "
                f"{1000 * self.host_s / per:.2f} ms host work ({100 * self.host_s / span:.0f}% of the loop; the "
                f"rest waits for the GPU), GPU {100 * busy / span:.0f}% busy in steps, idle gaps "
                f"{1000 * gap / per:.2f} ms per step, codec {100 * (times.codec_s - self.start.codec_s) / span:.0f}% "
                f"of the GPU, {self.decodes} decodes of {self.decoded} segments, {decode_ms:.1f} ms each, "
                f"{calls} codec calls of {(times.codec_items - self.start.codec_items) / max(1, calls):.1f} "
                f"items")


@dataclass(slots=True)
class _Mean:
    """Exponentially weighted mean (the last ~`span` values count); 0.0 until the first value."""

    span: float = 50.0
    value: float = 0.0
    _seen: bool = False

    def observe(self, x: float) -> None:
        self.value = self.value + (x - self.value) / self.span if self._seen else x
        self._seen = True


@dataclass(slots=True)
class _Segment:
    state: Any
    submitted_s: float
    priority: int
    keep_codes: bool = False  # Submit.keep_codes: codes go back with the audio and to dependents
    queue_ms: float = 0.0
    sum_batch: int = 0  # sum over its steps of the batch size, for the mean
    num_steps_run: int = 0
    gen_start_s: float = 0.0


class _Outbox:
    """Serialised sends to the web process: the loop thread (stats, failures) and the decode thread (audio,
    decode failures) both write to the one pipe."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def __call__(self, message: ipc.FromWorker) -> None:
        with self._lock:
            self._conn.send_bytes(ipc.encode(message))


def _read_loop(conn: Connection, inbox: Inbox) -> None:
    """Pipe → queue, so the step loop can take messages without blocking between steps."""
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            inbox.put(ipc.Shutdown())  # the web process is gone
            return
        try:
            inbox.put(ipc.decode_to_worker(data))
        except Exception:
            log.exception("undecodable message from the web process")


def step_time_model(points: list[tuple[int, float]]) -> StepTimeModel | None:
    """The scheduler's staircase from measured (bucket tokens, seconds) points. Timing noise can make a
    bucket measure faster than a smaller one (H200: 1792 tokens 5.07 ms, 2048 tokens 4.87 ms): a step never
    costs less than a smaller one, so each point is raised to the largest before it. None (→ class policy,
    logged) when the points still make no model."""
    rising: list[tuple[int, float]] = []
    for tokens, seconds in sorted(points):
        rising.append((tokens, max(seconds, rising[-1][1] if rising else 0.0)))
    try:
        return StepTimeModel.from_buckets(rising, host_s=_LOOP_HOST_S)
    except ValueError as exc:
        log.error("no step-time model from %s (%s): the class policy schedules", points, exc)
        return None


def device_is_broken(exc: BaseException) -> bool:
    """A CUDA runtime fault (illegal address, device-side assert, ...) as opposed to a recoverable error
    such as running out of memory. Matched by name: this module does not import torch."""
    if type(exc).__name__ in ("OutOfMemoryError",):
        return False
    return type(exc).__name__ in ("AcceleratorError", "CudaError") or "CUDA error" in str(exc)


class WorkerLoop:
    """The step loop, independent of the process plumbing and of torch (given a Backend)."""

    def __init__(self, options: ipc.WorkerOptions, backend: Backend,
                 inbox: Inbox,
                 send: Any) -> None:
        self.options = options
        self.backend = backend
        self.inbox = inbox
        self.send = send
        # The configured budget, but never past what the runner has graphs for (bigger steps run eagerly).
        budget = min(options.max_batch_tokens, backend.max_batch_tokens)
        # The deadline policy plans with the device's measured step times (CUDA warm-up); without them (CPU)
        # the class policy runs.
        points = backend.step_points
        step_model = step_time_model(points) if options.policy == "deadline" and points else None
        self.scheduler = Scheduler(max_batch_tokens=budget, max_batch_items=backend.max_batch_items,
                                   latency_batch_tokens=min(options.latency_batch_tokens, budget) or None,
                                   admit_interval_s=options.admit_interval_s, max_active=options.max_active,
                                   step_model=step_model, token_buckets=backend.token_buckets)
        # Admission control: a new request's first segment that the measured step times say cannot start within
        # admission_wait_s is refused at once (Overloaded + retry-after) instead of queueing without bound.
        self.step_clock = StepClock()
        self.admission = Admission(options.admission_wait_s, budget, self.step_clock)
        self._last_step_end: float | None = None  # perf_counter at the end of the last step while busy
        self._num_submits = 0  # Submits taken (ipc.Stats.num_submits)
        self._tokens_per_char = _Mean()  # tokens of a segment per character of its text (unprompted ones)
        self.segments: dict[str, _Segment] = {}
        self.prompts = PromptBook()  # segments waiting for an earlier segment's codes (Submit.prompt_from)
        self.running = True
        self._last_stats_s = 0.0
        self._last_step_ms = 0.0
        self._last_plan: StepPlan | None = None
        self._last_stats: ipc.Stats | None = None
        self._recent_step_ms: list[float] = []
        self._activity = _Activity(time.monotonic(), start=backend.device_times())
        self._host_total = 0.0  # host_s of the windows before the current one
        self._activity_lock = threading.Lock()  # the decode thread adds to the window the loop thread swaps
        self.activity_interval_s = 5.0
        # Finished segments are decoded (codec + copy to the host) and sent from one decode thread, so the step
        # loop does not wait for them. The thread takes everything finished since its last call and decodes it
        # together (first segments, then the rest): one codec call per distinct length instead of one per
        # finishing step (H200 run 9: ~100 calls/s of 12-47 ms each kept the thread saturated under load).
        self._decode_q: queue.Queue[list[tuple[str, _Segment]] | None] = queue.Queue()
        self._decoder = threading.Thread(target=self._decode_loop, name="decode", daemon=True)
        self._decoder.start()

    def run(self) -> None:
        try:
            while self.running:
                idle = len(self.scheduler) == 0
                if idle:
                    self._last_step_end = None  # the time until the next step is no step's time
                    self.backend.idle()
                self._take_messages(block=idle)
                if not self.running:
                    break
                t0 = time.perf_counter()
                wait0 = self.backend.device_times().wait_s
                plan = self.scheduler.schedule()  # cancelled segments were dropped when cancelled
                if plan.batch:
                    self._run_step(plan)
                    self._account_host(t0, wait0, plan.num_tokens)
                self._maybe_send_stats()
        finally:
            self._decode_q.put(None)  # what finished is still sent
            self._decoder.join(timeout=60)  # not forever: a decode stuck on a broken device must not hold the exit

    def _take_messages(self, block: bool) -> None:
        try:
            message = self.inbox.get(timeout=self.options.stats_interval_s) if block else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self._handle(message)
            try:
                message = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _handle(self, message: ipc.ToWorker | Generated | Gone) -> None:
        if isinstance(message, ipc.Submit):
            self._num_submits += 1
            ready = self.prompts.take(message)
            if ready is not None:
                self._admit(ready)
        elif isinstance(message, Generated):
            for ready in self.prompts.generated(message.request_id, message.codes, message.num_codebooks):
                self._admit(ready)
        elif isinstance(message, Gone):
            for ready in self.prompts.gone(message.request_id):
                self._admit(ready)
        elif isinstance(message, ipc.Abort):
            if self.scheduler.cancel(message.request_id):
                segment = self.segments.pop(message.request_id, None)  # its id may be reused right away
                if segment is not None:
                    self.backend.release(segment.state)
                self.send(ipc.Failed(message.request_id, errors.Cancelled.code, "cancelled"))
            elif self.prompts.drop(message.request_id):  # still waiting for its prompt
                self.send(ipc.Failed(message.request_id, errors.Cancelled.code, "cancelled"))
            for ready in self.prompts.gone(message.request_id):
                self._admit(ready)
        elif isinstance(message, ipc.EncodeVoice):
            self._encode_voice(message)
        elif isinstance(message, ipc.Shutdown):
            self.running = False
        elif isinstance(message, ipc.Ping):
            self.send(ipc.Pong(self.options.worker_id, message.seq))

    def _account_host(self, t0: float, wait0: float, tokens: int) -> None:
        """After a step: the loop's host work for it (the iteration less its waits for the GPU), and the step
        period for the step clock (back to back steps only: under load, the card's step time)."""
        now = time.perf_counter()
        self._activity.host_s += max(0.0, (now - t0) - (self.backend.device_times().wait_s - wait0))
        if self._last_step_end is not None:
            self.step_clock.observe(tokens, now - self._last_step_end)
        self._last_step_end = now

    def _fail(self, request_id: str, exc: BaseException) -> None:
        self.inbox.put(Gone(request_id))  # from either thread: the loop thread releases its dependents
        if isinstance(exc, errors.TTSError):
            self.send(ipc.Failed(request_id, exc.code, exc.message, exc.field, exc.retry_after_ms))
        else:
            log.error("request %s failed:\n%s", request_id, "".join(traceback.format_exception(exc)))
            self.send(ipc.Failed(request_id, errors.TTSError.code, f"omnivoice worker error: {exc!r}"))

    def _admit(self, submit: ipc.Submit) -> None:
        if submit.request_id in self.segments:
            self.send(ipc.Failed(submit.request_id, errors.BadRequest.code,
                                 f"request_id {submit.request_id!r} is already in flight", "request_id"))
            return
        try:
            state, num_tokens, num_steps = self.backend.prepare(submit)
        except Exception as exc:  # noqa: BLE001 — bad input or a model error: only this request fails
            self._fail(submit.request_id, exc)
            return
        if num_tokens > self.backend.max_batch_tokens:
            # through _fail: segments waiting for this one's codes are released too
            self._fail(submit.request_id, errors.BadRequest(
                f"text: this segment needs {num_tokens} tokens per step, more than the "
                f"{self.backend.max_batch_tokens} one step can hold; send shorter text or "
                "let the server split it (chunk_mode concurrent)", field="text"))
            self.backend.release(state)
            return
        if submit.prompt is None and submit.prompt_from is None and submit.text:
            self._tokens_per_char.observe(num_tokens / len(submit.text))
        if submit.priority == 0 and self._refuse(submit.request_id, num_tokens, num_steps):
            self.backend.release(state)
            return
        self.segments[submit.request_id] = _Segment(state, time.monotonic(), submit.priority, submit.keep_codes)
        self.scheduler.add(submit.request_id, num_tokens=num_tokens, num_steps=num_steps,
                           priority=submit.priority, deadline_s=submit.deadline_s)

    def _refuse(self, request_id: str, num_tokens: int, num_steps: int) -> bool:
        """A segment that opens a request or turn: refuse it (Overloaded) when the step clock predicts it
        cannot start within options.admission_wait_s behind what is already here."""
        running, waiting = self.scheduler.load_ahead(0)
        decision = self.admission.decide(running, waiting, num_tokens, num_steps)
        if decision.admit:
            return False
        self._fail(request_id, errors.Overloaded(
            f"omnivoice worker {self.options.worker_id} is full: this request would start in about "
            f"{decision.wait_s:.1f} s (limit {self.options.admission_wait_s:g} s)",
            retry_after_ms=decision.retry_after_ms))
        return True

    def _encode_voice(self, message: ipc.EncodeVoice) -> None:
        try:
            prompt = self.backend.encode_prompt(message.audio, message.sample_rate, message.ref_text)
        except Exception as exc:  # noqa: BLE001 — worker-loop edge: only this request fails
            self._fail(message.request_id, exc)
            return
        self.send(ipc.VoiceEncoded(message.request_id, prompt))

    def _run_step(self, plan: StepPlan) -> None:
        now = time.monotonic()
        for request_id in plan.started:
            segment = self.segments[request_id]
            segment.queue_ms = (now - segment.submitted_s) * 1000.0
            segment.gen_start_s = now
        batch = [self.segments[r] for r in plan.batch]
        t0 = time.perf_counter()
        try:
            self.backend.step([s.state for s in batch])
        except Exception as exc:  # the worker-loop edge: fail this batch, keep serving (or exit, below)
            for request_id in plan.batch:
                self.scheduler.cancel(request_id)
                failed = self.segments.pop(request_id, None)
                if failed is not None:
                    self.backend.release(failed.state)
                self._fail(request_id, exc)
            if device_is_broken(exc):
                # A CUDA fault poisons the context for every later step: exit, and the web process fails
                # what is left here (EngineDead) and starts a fresh worker.
                log.critical("device error, exiting so the worker is restarted: %s", exc)
                raise SystemExit(3) from exc
            return
        step_s = time.perf_counter() - t0
        self._last_step_ms = step_s * 1000.0
        act = self._activity
        act.steps += 1
        act.items += len(batch)
        act.tokens += plan.num_tokens
        act.step_s += step_s
        if len(self._recent_step_ms) < 1024:
            self._recent_step_ms.append(self._last_step_ms)
        self._last_plan = plan
        for segment in batch:
            segment.sum_batch += len(batch)
            segment.num_steps_run += 1
        finished = self.scheduler.complete_step(plan)
        if finished:
            self._retire(finished)

    def _retire(self, request_ids: list[str]) -> None:
        self._decode_q.put([(r, self.segments.pop(r)) for r in request_ids])

    def _decode_loop(self) -> None:
        """The decode thread: wait for finished segments, take all that are queued, decode and send first
        segments (someone is waiting on them), then the rest; until the loop ends (None)."""
        self.backend.bind_thread()
        while True:
            job = self._decode_q.get()
            if job is None:
                return
            done = False
            while not done:
                try:
                    more = self._decode_q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    done = True
                else:
                    job += more
            first = [(r, s) for r, s in job if s.priority == 0]
            rest = [(r, s) for r, s in job if s.priority != 0]
            for part in (first, rest):
                if part:
                    self._decode_job([r for r, _ in part], [s for _, s in part])
            if done:
                return

    def _decode_job(self, request_ids: list[str], segments: list[_Segment]) -> None:
        """In the decode thread: decode together, send each (send is thread-safe)."""
        t0 = time.perf_counter()
        codes: dict[str, tuple[bytes, int]] = {}
        try:
            for request_id, segment in zip(request_ids, segments, strict=True):
                if segment.keep_codes:  # before the codec runs: segments waiting for them start sooner
                    codes[request_id] = self.backend.codes(segment.state)
                    self.inbox.put(Generated(request_id, *codes[request_id]))
            audio = self.backend.decode([s.state for s in segments])
            with self._activity_lock:
                act = self._activity
                act.decodes += 1
                act.decoded += len(segments)
                act.decode_s += time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 — worker-loop edge: only these requests fail
            for request_id in request_ids:
                self._fail(request_id, exc)
            return
        done = time.monotonic()
        for request_id, segment, samples in zip(request_ids, segments, audio, strict=True):
            grid, num_codebooks = codes.get(request_id, (b"", 0))
            self.send(ipc.Audio(request_id, samples, "f32le", self.backend.sample_rate, last=True,
                                queue_ms=segment.queue_ms, gen_ms=(done - segment.gen_start_s) * 1000.0,
                                batch_size=segment.sum_batch / max(1, segment.num_steps_run), codes=grid,
                                num_codebooks=num_codebooks))

    def _maybe_send_stats(self) -> None:
        """At most one report per stats_interval_s, and none while idle and unchanged."""
        now = time.monotonic()
        if now - self._activity.since >= self.activity_interval_s:
            times = self.backend.device_times()
            with self._activity_lock:
                done, self._activity = self._activity, _Activity(now, start=times)
                self._host_total += done.host_s
            if done.steps or done.decodes:
                log.info("worker %d: %s", self.options.worker_id, done.line(now, times))
        if now - self._last_stats_s < self.options.stats_interval_s:
            return
        s = self.scheduler.stats()
        plan = self._last_plan
        hits, misses = self.backend.counters()
        times = self.backend.device_times()
        predicted = self.step_clock.seconds(self.admission.budget)
        running, waiting_tokens = self.scheduler.load_ahead(0)
        # Segments waiting for an earlier segment's codes count as waiting: routing and /metrics see them.
        stats = ipc.Stats(self.options.worker_id, s.num_waiting + len(self.prompts), s.num_running,
                          s.num_steps_run, s.num_finished,
                          s.num_cancelled, self._last_step_ms, len(plan.batch) if plan else 0,
                          plan.num_tokens if plan else 0, hits, misses, self._recent_step_ms,
                          host_s=self._host_total + self._activity.host_s, gpu_busy_s=times.busy_s,
                          gpu_gap_s=times.gap_s, codec_s=times.codec_s, codec_calls=times.codec_calls,
                          codec_items=times.codec_items, refused=self.admission.num_refused,
                          full_step_ms=1000.0 * predicted if predicted is not None else 0.0,
                          at_s=now, budget_tokens=self.admission.budget, running=running_by_steps_left(running),
                          waiting_tokens=waiting_tokens, num_submits=self._num_submits,
                          tokens_per_char=self._tokens_per_char.value)
        if not self._recent_step_ms and self._last_stats is not None and msgspec.structs.replace(
                self._last_stats, step_ms=[], at_s=now) == stats:
            return
        self._last_stats_s, self._last_stats = now, stats
        self._recent_step_ms = []
        self.send(stats)


def main(options: ipc.WorkerOptions, conn_in: Connection, conn_out: Connection) -> None:
    """Process entry point (multiprocessing spawn target)."""
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s worker{options.worker_id} %(levelname)s "
                                                   "%(name)s: %(message)s")
    send = _Outbox(conn_out)
    try:
        backend: Backend = ModelBackend(options)
    except Exception as exc:
        log.exception("failed to load the OmniVoice model from %s", options.model_dir)
        send(ipc.Fatal(options.worker_id, f"cannot load model from {options.model_dir}: {exc}"))
        raise SystemExit(1) from None
    inbox: Inbox = queue.Queue()
    threading.Thread(target=_read_loop, args=(conn_in, inbox), daemon=True, name="ipc-reader").start()
    send(ipc.Ready(options.worker_id, backend.device, backend.sample_rate, backend.model_name, os.getpid()))
    sampler = _thread_sampler() if options.profile_path else None
    try:
        WorkerLoop(options, backend, inbox, send).run()
    except (BrokenPipeError, EOFError):
        pass  # the web process went away
    finally:
        if sampler is not None:
            path = f"{options.profile_path}.worker{options.worker_id}.txt"
            with open(path, "w") as f:
                f.write(sampler.stop() + "\n")
            log.info("worker %d: thread stack samples in %s", options.worker_id, path)
    log.info("worker %d exiting", options.worker_id)


def _thread_sampler() -> StackSampler:
    """`serve --profile-worker PATH`: sample this process's step loop, decode and pipe-reader threads every 2 ms
    (each sample holds the GIL for tens of microseconds: a few percent of the threads' time)."""
    sampler = StackSampler(want=lambda name: name in ("MainThread", "decode", "ipc-reader"), period_s=0.002)
    sampler.start()
    return sampler
