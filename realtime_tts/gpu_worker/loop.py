"""The OmniVoice worker process: loads the model on one device and runs the step loop.

Loop: take messages → admit segments to the scheduler (each with the step count steps.py chooses) → run one
diffusion step for the batch it picks → retire finished segments to the decode thread, which decodes them
together and sends their audio. Spawned by engine/client.py; torch and realtime_tts.model are imported only
inside main(), through backend.ModelBackend (the web process imports this module for the target).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import msgspec

from realtime_tts import errors
from realtime_tts.engine import ipc
from realtime_tts.engine.admission import running_by_steps_left
from realtime_tts.gpu_worker.admission import Admission, StepClock
from realtime_tts.gpu_worker.backend import Backend, DeviceTimes, ModelBackend
from realtime_tts.gpu_worker.prompts import Generated, Gone, PromptBook
from realtime_tts.gpu_worker.scheduler import Scheduler, StepPlan, StepTimeModel
from realtime_tts.gpu_worker.steps import StepChooser, Work, due_s
from realtime_tts.thread_sampler import StackSampler

log = logging.getLogger("realtime_tts.worker")
# What the step loop takes: messages from the web process, and the loop's own notes from the decode thread.
Inbox = queue.Queue[ipc.ToWorker | Generated | Gone]
# The step loop's own host work per step (scheduler, bookkeeping), added to the measured step times.
_LOOP_HOST_S = 0.0003


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
    start: DeviceTimes = dataclasses.field(default_factory=DeviceTimes)  # the backend's device times when the window opened
    decodes: int = 0
    decoded: int = 0  # segments decoded
    decode_s: float = 0.0
    admitted: int = 0  # segments admitted to the scheduler
    admitted_tokens: int = 0  # their tokens per step, summed (a conditioned segment's include its prompt)
    chosen: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)  # steps at start

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
                f"items, {self.admitted} segments admitted of "
                f"{self.admitted_tokens / max(1, self.admitted):.0f} tokens each" + self._chosen())

    def _chosen(self) -> str:
        """Load-adaptive steps: how many segments that started in the window ran each step count."""
        return ", steps chosen " + ", ".join(f"{n}×{c}" for n, c in sorted(self.chosen.items())) if self.chosen else ""


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
    num_steps: int = 0  # diffusion steps it runs (named by the request or chosen at admission)
    adjustable: bool = False  # its request named no num_step: it runs the step level's count until it starts
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
        # Load-adaptive steps: a segment that names no num_step gets options.num_step, fewer (down to
        # min_num_step) only when the step clock says the card could not carry that (steps.py).
        self.steps = StepChooser(options.num_step, min(options.min_num_step, options.num_step),
                                 headroom=options.step_headroom)
        self._level = options.num_step  # the step level last applied to waiting segments
        self._level_dirty = False  # adjustable segments admitted since (the next step recomputes it)
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
                if self._level_dirty:
                    self._relevel()
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
        named = submit.num_step is not None
        if not named:
            submit = msgspec.structs.replace(submit, num_step=self.steps.num_step)
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
        now = time.monotonic()
        if not named and self.steps.adaptive and self._level != num_steps:  # the last level; _relevel() revises it
            state, num_steps = self.backend.with_num_steps(state, self._level), self._level
        if submit.priority == 0 and self._refuse(submit.request_id, num_tokens, num_steps):
            self.backend.release(state)
            return
        self._level_dirty = self._level_dirty or (not named and self.steps.adaptive)
        act = self._activity
        act.admitted += 1
        act.admitted_tokens += num_tokens
        self.segments[submit.request_id] = _Segment(state, now, submit.priority, submit.keep_codes, num_steps,
                                                    adjustable=not named)
        self.scheduler.add(submit.request_id, num_tokens=num_tokens, num_steps=num_steps,
                           priority=submit.priority, deadline_s=submit.deadline_s)

    def _relevel(self) -> None:
        """Before a step, when segments were admitted since the last one: the step level from the deadlines in
        flight (steps.py), and the waiting adjustable segments remade to it when it moved (so a burst admitted
        at once is judged as a whole before any of it starts)."""
        self._level_dirty = False
        live = []
        for request_id, priority, deadline_s, arrival_s, tokens, steps_left, started in self.scheduler.live():
            adjustable = not started and self.segments[request_id].adjustable
            live.append(Work(due_s(priority, deadline_s, arrival_s), tokens, steps_left, adjustable))
        level = self.steps.level(live, self._capacity())
        for request_id, *_, started in self.scheduler.live():
            segment = self.segments[request_id]
            if not started and segment.adjustable and segment.num_steps != level:
                segment.state = self.backend.with_num_steps(segment.state, level)
                segment.num_steps = level
                self.scheduler.set_steps(request_id, level)
        self._level = level

    def _capacity(self) -> float | None:
        """Token-steps per second the card carries flat out: a full step's tokens over its measured time."""
        step_s = self.step_clock.seconds(self.admission.budget)
        return self.admission.budget / step_s if step_s else None

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
            if segment.adjustable:
                self._activity.chosen[segment.num_steps] += 1
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
                                num_codebooks=num_codebooks, num_steps=segment.num_steps))

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
