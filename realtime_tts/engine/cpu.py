"""CpuEngine: the English voice shipped inside the `hibari-tts` wheel, run in a pool of worker processes.

One fresh interpreter per core (`python -m realtime_tts.engine.cpu`), each with one Hibari instance (ONNX
session + G2P): hibari's G2P and DSP hold the GIL, so threads do not scale across cores and processes do. Jobs
are taken in priority order (first audio of a turn first, then streams about to run dry, then bulk); the web
process only sends text and receives float32 audio over a socket pair (asyncio streams: the loop never blocks on
a worker). Voices: hibari's registry as installed (heart is inside the wheel; the others only where hibari has
downloaded them before: this server never downloads); OpenAI's names map to them (voices/presets.py), falling
back to heart with a warning. Must not import torch or the OmniVoice engine.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import time
import unicodedata
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from realtime_tts.config import Config
from realtime_tts.engine.base import (
    PRIORITY_FIRST,
    PRIORITY_STREAM,
    AudioChunk,
    Capabilities,
    EngineHealth,
    EngineLoad,
    SegmentRequest,
    VoicePrompt,
    WorkerHealth,
)
from realtime_tts.errors import BadRequest, EngineDead, EngineUnavailable, Overloaded, UnsupportedVoiceMode
from realtime_tts.protocol import OPENAI_VOICES
from realtime_tts.voices.presets import HIBARI_DEFAULT, HIBARI_VOICES, hibari_voice

if TYPE_CHECKING:
    from realtime_tts.metrics import Metrics

log = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
VOICE = HIBARI_DEFAULT  # the voice inside the wheel (American English, female)
MODEL_ID = "hibari-heart"
# hibari's voice names and OpenAI's (mapped by voices/presets.py; documented in docs/protocol.md).
PRESETS = (*HIBARI_VOICES, *OPENAI_VOICES)
ENGLISH = ("en", "en-us", "en_us", "en-gb", "en_gb", "english", "auto")
GPU_ENGINE = "omnivoice"
# Request fields this voice has no use for (OmniVoice's sampling and length controls): answered with a warning.
IGNORED_PARAMS = ("duration", "num_step", "guidance_scale", "temperature", "top_p")
# Admission limit: jobs waiting for a worker, per worker (beyond it: Overloaded, retry later).
MAX_QUEUED_PER_WORKER = 64
# Requests served at once, per worker (the service refuses more at once: 503 / 1013). One worker makes ~50x real
# time here (bench/results/cpu_voice.md): 32 live streams leave it headroom; more would only queue.
MAX_REQUESTS_PER_WORKER = 32
# A worker that does not load within this long is reported as failed (loading takes ~1 s here).
LOAD_TIMEOUT_S = 120.0
# An idle worker is pinged every worker_check_interval_s; one that does not answer within this long is frozen
# (SIGSTOP, a hung library): killed and restarted before a request needs it.
PING_TIMEOUT_S = 5.0


def foreign_letters(text: str) -> str:
    """The non-Latin letters of text when they are more than an English voice may skip quietly (a word of two or
    more: "Hello 世界", three in all, or a fifth of its letters), else "". Latin letters with accents, digits,
    punctuation, symbols, emoji and a stray letter (π) are fine: the G2P reads or skips them."""
    letters = 0
    foreign: list[str] = []
    run = longest = 0
    for ch in text:
        latin = not ch.isalpha() or unicodedata.name(ch, "").startswith("LATIN")
        letters += ch.isalpha()
        run = 0 if latin else run + 1
        longest = max(longest, run)
        if not latin:
            foreign.append(ch)
    if foreign and (longest >= 2 or len(foreign) >= 3 or len(foreign) * 5 >= letters):
        return "".join(foreign[:12])
    return ""


# -- the worker process ----------------------------------------------------------------------------------------

def _worker_main(conn: Connection, threads: int) -> None:
    """Worker process: load the default voice once, then answer (text, sentence, speed, seed, voice) jobs with
    (t_start, t_end, phonemes, float32 audio bytes) until the pipe closes (the web process went away). A
    segment's first job has sentence None: G2P of the text, its first sentence spoken, the sentences' phonemes
    sent back once; each later job carries just its sentence's phonemes (text "") and gets None back. Other
    installed voices load on first use (each its own model and G2P variant)."""
    try:
        from hibari import Hibari  # imported here: only worker processes need onnxruntime
        from hibari.voices import voice_path

        voices = {VOICE: Hibari(voice=VOICE, threads=threads)}
        voices[VOICE]("Warm up.", seed=0)  # loads the G2P tables and touches every ONNX kernel once
        installed = []
        for name in HIBARI_VOICES:
            try:
                voice_path(name, download_missing=False)  # never downloads: offline hosts stay offline
                installed.append(name)
            except (FileNotFoundError, ValueError):
                pass
    except Exception as e:  # noqa: BLE001 — the process edge: reported to the web process, which raises
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", (os.getpid(), tuple(installed))))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:  # the web process's liveness ping
            try:
                conn.send(("pong", os.getpid()))
            except (BrokenPipeError, OSError):  # the web process went away (shutdown) while it pinged
                return
            continue
        text, sentence, speed, seed, voice = job
        try:
            t_start = time.perf_counter()
            if voice not in voices:
                voices[voice] = Hibari(voice=voice, threads=threads)
            tts = voices[voice]
            phonemes: list[str] | None = None
            if sentence is None:
                phonemes = list(tts.phonemize(text))
                sentence = phonemes[0] if phonemes else None
                phonemes = phonemes or [""]  # nothing to say: one empty chunk ends the segment
            pcm = b""
            if sentence is not None:
                # A fresh generator per sentence: a sentence's audio depends only on its text and the seed, so
                # how the text was cut into segments does not change the sound.
                rng = np.random.default_rng(seed)
                samples = tts.from_ids(tts.ids(sentence), speed, rng)  # [num_samples] float32
                pcm = np.ascontiguousarray(samples, dtype=np.float32).tobytes()
            reply: tuple[Any, ...] = ("ok", t_start, time.perf_counter(), phonemes, pcm)
        except Exception as e:  # noqa: BLE001 — the job's edge: re-raised in the awaiting coroutine
            reply = ("fail", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


# -- the web-process side ----------------------------------------------------------------------------------------

@dataclass(order=True)
class _Job:
    key: tuple[int, float, int]  # (priority, deadline, arrival): the queue's order
    payload: tuple[Any, ...] = field(compare=False)  # (text, sentence, speed, seed): _worker_main's job
    future: asyncio.Future[Any] = field(compare=False)


class _Worker:
    """One voice process and its socket, read and written by the event loop through asyncio streams (speaking
    multiprocessing.connection's framing: a 4-byte big-endian length, then a pickle), so no thread sits in
    between: a job costs the loop one write and one wake-up, as with a voice thread."""

    def __init__(self, worker_id: int, threads: int):
        self.worker_id = worker_id
        self._threads = threads
        self.process: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.status: Literal["ok", "loading", "restarting", "error"] = "loading"
        self.detail = ""
        self.restarts = 0
        self.busy = False
        self.installed: tuple[str, ...] = (VOICE,)  # voices this worker's hibari has on disk

    async def start(self) -> None:
        # A fresh interpreter (never fork: the web process has threads), started as its own module rather than
        # through multiprocessing's spawn, which would re-import the server's __main__ and whose children the
        # OmniVoice engine's tooling counts as its own workers.
        ours, theirs = socket.socketpair()
        with theirs:
            self.process = await asyncio.to_thread(
                subprocess.Popen, [sys.executable, "-m", "realtime_tts.engine.cpu", str(theirs.fileno()),
                                   str(self._threads)], pass_fds=(theirs.fileno(),))
        # theirs is closed here, so our end reports EOF when the worker dies
        self._reader, self._writer = await asyncio.open_connection(sock=ours)
        try:
            kind, info = await asyncio.wait_for(self._recv(), LOAD_TIMEOUT_S)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError) as e:
            await self._reap()
            raise EngineUnavailable(f"CPU voice worker {self.worker_id} exited or hung while loading") from e
        if kind != "ready":
            await self._reap()
            raise EngineUnavailable(f"CPU voice failed to load: {info}")
        self.installed = tuple(info[1])
        self.status, self.detail = "ok", ""

    async def _recv(self) -> Any:
        assert self._reader is not None
        (size,) = struct.unpack("!i", await self._reader.readexactly(4))
        return pickle.loads(await self._reader.readexactly(size))

    async def call(self, payload: tuple[Any, ...] | None) -> tuple[Any, ...]:
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            assert self._writer is not None
            self._writer.write(struct.pack("!i", len(data)) + data)
            await self._writer.drain()
            return tuple(await self._recv())
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            raise EngineDead(f"CPU voice worker {self.worker_id} died while synthesizing") from e

    async def _reap(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None
        if self.process is not None:
            self.process.kill()  # a worker whose socket broke but which lingers must not keep a core
            await asyncio.to_thread(self.process.wait, 5)
            self.process = None

    async def restart(self) -> None:
        self.status, self.restarts = "restarting", self.restarts + 1
        await self._reap()
        await self.start()

    def kill(self) -> None:
        """SIGKILL now (also ends a SIGSTOPped process); _reap collects it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    async def stop(self) -> None:
        self.status, self.detail = "error", "stopped"
        if self._writer is not None:
            self._writer.close()  # the worker sees EOF and exits
            self._reader = self._writer = None
        if self.process is not None:
            try:
                await asyncio.to_thread(self.process.wait, 2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)
            self.process = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None


class _VoiceProcesses:
    """n worker processes serving jobs from one priority queue (kept on the event loop)."""

    def __init__(self, num_workers: int, threads_per_voice: int, *, job_timeout_s: float = 20.0,
                 check_interval_s: float = 1.0):
        self.workers = [_Worker(i, threads_per_voice) for i in range(num_workers)]
        self.job_timeout_s = job_timeout_s
        self.check_interval_s = check_interval_s
        self.on_restart: Any = None  # callable(cause): counts restarts in /metrics once attached
        self._heap: list[_Job] = []
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._arrival = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def num_workers(self) -> int:
        return len(self.workers)

    @property
    def queued(self) -> int:
        return len(self._heap)

    @property
    def busy(self) -> int:
        return sum(w.busy for w in self.workers)

    async def start(self) -> None:
        try:
            await asyncio.gather(*(w.start() for w in self.workers))
        except BaseException:
            await self.stop()
            raise
        self._tasks = [asyncio.create_task(self._serve(w), name=f"cpu-voice-{w.worker_id}") for w in self.workers]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
        for job in self._heap:
            if not job.future.done():
                job.future.set_exception(EngineUnavailable("CPU voice stopped"))
        self._heap.clear()

    def submit(self, payload: tuple[Any, ...], priority: int, deadline: float | None) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        key = (priority, deadline if deadline is not None else math.inf, next(self._arrival))
        self._push(_Job(key, payload, fut))
        return fut

    def _push(self, job: _Job) -> None:
        heapq.heappush(self._heap, job)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                break

    async def _next(self, timeout: float) -> _Job | None:
        """The next job, or None when none came within timeout (the caller checks on its worker then)."""
        while True:
            while not self._heap:
                waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                done, _ = await asyncio.wait([waiter], timeout=timeout)
                if not done:
                    waiter.cancel()  # _push skips it
                    return None
            job = heapq.heappop(self._heap)
            if not job.future.done():  # a cancelled job (its request went away while queued) is dropped
                return job

    async def _restart_dead(self, worker: _Worker) -> None:
        """A worker that died while idle (no job lost) comes back; the restart reaps a process still lingering."""
        log.warning("CPU voice worker %d (pid %s) died while idle; restarting it", worker.worker_id, worker.pid)
        await self._restart(worker, "died_idle")

    async def _check_idle(self, worker: _Worker) -> None:
        """Between jobs: a dead worker restarts now, and a frozen one (no answer to a ping) is killed and
        restarted, so neither waits for a request to find out."""
        if not worker.alive:
            await self._restart_dead(worker)
            return
        try:
            await asyncio.wait_for(worker.call(None), PING_TIMEOUT_S)
        except EngineDead:
            # Its pipe closed: it died after the liveness check above (a killed process is reaped a little
            # later, more so on a busy machine). Dead, not frozen, whichever noticed it first.
            await self._restart_dead(worker)
        except TimeoutError:
            log.warning("CPU voice worker %d (pid %s) did not answer a ping within %g s; killing and restarting it",
                        worker.worker_id, worker.pid, PING_TIMEOUT_S)
            worker.kill()
            await self._restart(worker, "stuck_idle")

    async def _serve(self, worker: _Worker) -> None:
        while True:
            job = await self._next(self.check_interval_s)
            if job is None:
                await self._check_idle(worker)
                continue
            if not worker.alive:
                # It died while idle: no job was lost. This one goes back (same place in the order) for
                # another worker or for this one once it is back.
                self._push(job)
                await self._restart_dead(worker)
                continue
            worker.busy = True
            try:
                # A sentence takes well under a second; no answer within the job timeout means frozen or
                # looping: only this job fails, the worker is killed and comes back.
                reply = await asyncio.wait_for(worker.call(job.payload), self.job_timeout_s)
            except asyncio.CancelledError:  # stop(): the request awaiting this job must not wait forever
                _settle(job.future, None, EngineUnavailable("CPU voice stopped"))
                raise
            except TimeoutError:
                worker.busy = False
                _settle(job.future, None, EngineDead(
                    f"CPU voice worker {worker.worker_id} gave no answer within {self.job_timeout_s:g} s "
                    "(engine_job_timeout_s): killed and restarting; retry"))
                log.warning("CPU voice worker %d (pid %s) stuck on a job for %g s; killing and restarting it",
                            worker.worker_id, worker.pid, self.job_timeout_s)
                worker.kill()
                await self._restart(worker, "stuck")
                continue
            except EngineDead as e:
                worker.busy = False
                _settle(job.future, None, e)
                log.warning("CPU voice worker %d (pid %s) died; restarting it", worker.worker_id, worker.pid)
                await self._restart(worker, "died")
                continue
            except Exception as e:  # a garbled reply: fail the job; the socket's framing is lost, so restart
                worker.busy = False
                log.exception("CPU voice worker %d sent a bad reply; restarting it", worker.worker_id)
                _settle(job.future, None, EngineUnavailable(f"CPU voice failed: {type(e).__name__}: {e}"))
                await self._restart(worker, "bad_reply")
                continue
            finally:
                worker.busy = False
            if reply[0] == "ok":
                _settle(job.future, reply[1:], None)
            else:
                _settle(job.future, None, EngineUnavailable(f"CPU voice failed: {reply[1]}"))

    async def _restart(self, worker: _Worker, cause: str) -> None:
        if self.on_restart is not None:
            self.on_restart(cause)
        delay = 0.5
        while True:
            try:
                await worker.restart()
                return
            # SubprocessError: a killed worker not reaped within _reap's wait (TimeoutExpired); the next try
            # kills and waits again. Uncaught, it would end this serving task and the worker for good.
            except (EngineUnavailable, OSError, subprocess.SubprocessError) as e:
                worker.status, worker.detail = "error", str(e) or type(e).__name__
                log.error("CPU voice worker %d failed to restart: %s", worker.worker_id, e)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def _settle(fut: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled while running: the result is discarded
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


class CpuEngine:
    """Engine protocol over hibari. Each segment: G2P + first sentence in one job (short time to first
    audio), then one job per further sentence, so an abort takes effect between sentences."""

    def __init__(self, config: Config):
        num = config.cpu.cpu_workers or os.cpu_count() or 1
        self._pool = _VoiceProcesses(num, config.cpu.cpu_threads_per_worker,
                                     job_timeout_s=config.limits.engine_job_timeout_s,
                                     check_interval_s=config.limits.worker_check_interval_s)
        self.max_active_requests = num * MAX_REQUESTS_PER_WORKER  # read by the service's admission
        self.ignored_params = IGNORED_PARAMS  # read by the service: warnings
        self._status: str = "loading"
        self._detail = ""
        self._active: set[str] = set()
        self._aborted: set[str] = set()
        self._capabilities = Capabilities(
            engine="cpu", model=MODEL_ID, sample_rate=SAMPLE_RATE, voice_modes=frozenset({"auto"}),
            languages=("en",), presets=PRESETS, deterministic=True, device="cpu")

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def start(self) -> None:
        try:
            await self._pool.start()
        except Exception as e:
            self._status, self._detail = "error", f"CPU voice failed to load: {e}"
            raise EngineUnavailable(self._detail) from e
        self._status = "ok"

    async def stop(self) -> None:
        self._status, self._detail = "error", "stopped"
        await self._pool.stop()

    def check(self, request: SegmentRequest) -> None:
        """Refuse what this voice cannot do, before any work is queued."""
        mode = request.voice.mode
        if mode != "auto":
            raise UnsupportedVoiceMode(
                f"voice mode {mode!r} is not supported by the CPU voice; it needs the {GPU_ENGINE!r} engine "
                f"(start the server with --model DIR)", field="voice")
        preset = request.voice.preset
        if preset is not None and preset.lower() not in PRESETS:
            raise BadRequest(f"voice {preset!r} is not a preset of the CPU voice; use auto, base, a saved voice "
                             f"(needs {GPU_ENGINE!r}) or one of {', '.join(PRESETS)}", field="voice")
        if request.language is not None and request.language.lower() not in ENGLISH:
            raise BadRequest(f"language {request.language!r}: the CPU voice speaks English only (en); other "
                             f"languages need the {GPU_ENGINE!r} engine", field="language")
        foreign = foreign_letters(request.text)
        if foreign:
            raise BadRequest(f"text: the CPU voice speaks English only and cannot say {foreign!r} (it would be "
                             f"silence); text in other scripts needs the {GPU_ENGINE!r} engine (start the server "
                             "with --model DIR and send model omnivoice)", field="text")

    async def synthesize(self, request: SegmentRequest) -> AsyncIterator[AudioChunk]:
        self.check(request)
        if self._status != "ok":
            raise EngineUnavailable(f"CPU voice is not ready ({self._status})")
        if self._pool.queued >= MAX_QUEUED_PER_WORKER * self._pool.num_workers:
            raise Overloaded("CPU voice queue is full", retry_after_ms=500)
        rid = request.request_id
        voice = self.voice_for(request.voice.preset)[0]
        t_submit = time.perf_counter()
        self._active.add(rid)
        try:
            phonemes: list[str] | None = None
            index = 0
            while phonemes is None or index < len(phonemes):
                if rid in self._aborted:
                    return
                # Only the segment's first sentence is "first audio"; the rest can wait behind other turns'.
                priority = request.priority if index == 0 else max(request.priority, PRIORITY_STREAM)
                deadline = request.deadline_s if priority != PRIORITY_FIRST else None
                # The text goes once (G2P in the worker); later jobs carry only their sentence's phonemes.
                text, sentence = (request.text, None) if phonemes is None else ("", phonemes[index])
                job = self._pool.submit((text, sentence, request.speed, request.seed, voice), priority, deadline)
                t_start, t_end, sentences, pcm = await job
                phonemes = phonemes if phonemes is not None else sentences
                assert phonemes is not None
                index += 1
                yield AudioChunk(samples=np.frombuffer(pcm, dtype=np.float32), last=index >= len(phonemes),
                                 queue_ms=(t_start - t_submit) * 1e3 if index == 1 else 0.0,
                                 gen_ms=(t_end - t_start) * 1e3, batch_size=1)
        finally:
            self._active.discard(rid)
            self._aborted.discard(rid)

    def voice_for(self, preset: str | None) -> tuple[str, str | None]:
        """The hibari voice a preset plays here, and a warning when it had to fall back to the default (the
        voice it maps to is not installed: hibari downloads voices once, this server never does)."""
        wanted = hibari_voice(preset)
        if all(wanted in w.installed for w in self._pool.workers):
            return wanted, None
        return VOICE, (f"voice {preset!r}: hibari voice {wanted!r} is not installed on this server, {VOICE!r} "
                       f"speaks instead (hibari downloads it once: `hibari --voice {wanted} hi` where the network "
                       "allows)")

    def preset_warning(self, preset: str | None) -> str | None:
        """For the service: the warning a request with this preset gets (None: it plays as named)."""
        return self.voice_for(preset)[1]

    async def abort(self, request_id: str) -> None:
        if request_id in self._active:
            self._aborted.add(request_id)

    async def encode_voice(self, audio: np.ndarray, sample_rate: int, ref_text: str) -> VoicePrompt:
        raise UnsupportedVoiceMode(f"voice cloning is not supported by the CPU voice; it needs the {GPU_ENGINE!r} "
                                   "engine (start the server with --model DIR)", field="voice")

    def health(self) -> EngineHealth:
        if self._status != "ok":
            status: Literal["ok", "loading", "error"] = "loading" if self._status == "loading" else "error"
        else:  # serving while at least one worker is up (the others restart)
            status = "ok" if any(w.status == "ok" for w in self._pool.workers) else "error"
        # a worker whose process is gone shows at once, before its serving task notices (within a check interval)
        workers = tuple(WorkerHealth(worker_id=w.worker_id, status="restarting" if w.status == "ok" and not w.alive
                                     else w.status, device="cpu", in_flight=int(w.busy), restarts=w.restarts,
                                     detail=w.detail if w.alive or w.status != "ok" else "process exited")
                        for w in self._pool.workers)
        if status == "ok" and not any(w.status == "ok" for w in workers):
            status = "error"
        return EngineHealth(status=status, detail=self._detail, workers=workers)

    def load(self) -> EngineLoad:
        n = self._pool.num_workers
        busy = min(self._pool.busy, n)
        return EngineLoad(pool_size=n, idle=n - busy, queued_segments=self._pool.queued, in_flight_segments=busy)

    def attach_metrics(self, metrics: Metrics) -> None:
        """/metrics: the queue depth (one series, the workers share one queue) and worker restarts by cause."""
        metrics.queue_depth.labels(worker="cpu").set_function(lambda: float(self._pool.queued))
        self._pool.on_restart = lambda cause: metrics.worker_restarts_total.labels(engine="cpu", cause=cause).inc()

    def worker_pids(self) -> list[int | None]:
        """The voice processes' ids, by worker (tests and operators: which process to look at)."""
        return [w.pid for w in self._pool.workers]


if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group: the server shuts down and closes our socket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _worker_main(Connection(int(sys.argv[1])), int(sys.argv[2]))
