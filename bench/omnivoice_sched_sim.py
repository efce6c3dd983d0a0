"""CPU simulation of one OmniVoice worker under the serving bench's arrival patterns: the real Scheduler
(gpu_worker/scheduler.py) on a simulated clock, steps and codec decodes timed from the H200 (runs 8-10).

No GPU, no model: it answers "what do the scheduling policy, its knobs and the codec cost do to first audio,
underruns and load latency", one change at a time. Runs on the CPU (torch is imported only as
gpu_worker/runner.py's module, for its TOKEN_BUCKETS).

Model (calibrated against serving run 10, bench/results/HISTORY.md):
- a step costs the measured time of its CUDA-graph token bucket (runner.TOKEN_BUCKETS; STEP_MS, H200 run 8
  warm-up) + host work per step, slowed in proportion to the frames of a codec call running beside it (Cost);
- one decode thread (worker._decode_loop): it takes every finished segment queued since its last call, decodes
  first segments in one call, then the rest in another; a call costs codec_call_ms + codec_len_ms per DISTINCT
  length (the codec runs one forward per length) + codec_frame_ms per frame, longer beside big steps;
- agents as bench/omnivoice_serve.py sends them (30 words/s, starts spread over 1 s), units as the real
  SentenceBuffer cuts them (two per reply: the first sentence, then the other two merged), the first unit
  started at the word that completes it (the service's speculation), later units when the buffer emits them,
  the service's lookahead (2), deadlines from service.playback_deadline as the service sets them: first audio
  (sent, or service.FIRST_AUDIO_S after the first unit started) + max(audio sent, 0.9 × estimated audio of every
  earlier segment).

    .venv/bin/python bench/omnivoice_sched_sim.py --calibrate     # sim vs H200 run 10 (+ runs 8, 9 cross-checks)
    .venv/bin/python bench/omnivoice_sched_sim.py --calibrate16   # sim vs issue 16's multi-turn agents run
    .venv/bin/python bench/omnivoice_sched_sim.py --sweep codec,policy,admit,latency,split   # one change at a time
    .venv/bin/python bench/omnivoice_sched_sim.py --candidates    # combinations, robustness
    .venv/bin/python bench/omnivoice_sched_sim.py --agents 100 --policy deadline --codec-len-ms 1
    .venv/bin/python bench/omnivoice_sched_sim.py --costs bench/results/h200_costs.json --agents 100 --max-tokens 6144
    .venv/bin/python bench/omnivoice_sched_predict.py [--defaults]   # measured costs: prediction vs the card

Issue 16: the costs now come from a cost file of device measurements (bench/omnivoice_costs.py, Cost.measured:
step staircase, the loop's gap/host work per step, the codec per segment), nothing fitted; the Cost defaults and
RUN16_COST below are the earlier fits, kept for the history tables in bench/results/omnivoice_sched_sim.md.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from omnivoice_costs import CodecCost, CostFileError, CostModel, LoopCost, StepCost, load_costs
from omnivoice_serve import (  # the serving bench's texts (this script's folder is on the path)
    REPLIES,
    SHORT_INPUTS,
)

from realtime_tts.config import load_config
from realtime_tts.gpu_worker.admission import Admission, StepClock
from realtime_tts.gpu_worker.runner import TOKEN_BUCKETS
from realtime_tts.gpu_worker.scheduler import Scheduler, StepTimeModel
from realtime_tts.omnivoice_text import estimate_frames
from realtime_tts.service import FIRST_AUDIO_S, LOOKAHEAD, estimate_audio_s, playback_deadline
from realtime_tts.text import SentenceBuffer

# Step time per token bucket on the H200 (ms; bf16, CUDA graphs, real sentences; run 8's warm-up, run.log
# "step times"). Past the last bucket: the last point's tokens per ms.
STEP_MS = {256: 1.70, 512: 2.07, 768: 2.53, 1024: 2.94, 1280: 3.46, 1536: 3.92, 1792: 4.57, 2048: 4.86,
           2560: 5.58, 3072: 6.58, 3584: 7.56, 4096: 8.17, 4608: 9.41, 5120: 10.23, 5632: 11.12, 6144: 12.23,
           7168: 13.94, 8192: 15.26, 9216: 18.69, 10240: 19.51, 12288: 23.37, 14336: 28.84, 16384: 31.10}
NUM_STEP = 32
JITTER_S = 0.01  # the bench's player: a chunk later than this after the buffer ran dry is an underrun


def step_engine_ms(tokens: int, buckets: tuple[tuple[int, float], ...] | None = None) -> float:
    """Engine time of a step of this many tokens: the measured time of its token bucket (runner.TOKEN_BUCKETS),
    from `buckets` (a cost file's staircase) or STEP_MS."""
    i = bisect.bisect_left(TOKEN_BUCKETS, tokens)
    top = TOKEN_BUCKETS[i] if i < len(TOKEN_BUCKETS) else tokens
    if buckets is not None:
        return StepCost(buckets).ms(top)
    if top in STEP_MS:
        return STEP_MS[top]
    last = max(STEP_MS)
    return STEP_MS[last] * top / last


def step_model(cost: Cost) -> StepTimeModel:
    """What the worker hands the deadline policy: the measured bucket staircase + its host guess per step
    (loop._LOOP_HOST_S when the costs are measured)."""
    table = cost.step_bucket_ms if cost.step_bucket_ms is not None else tuple(STEP_MS.items())
    host_ms = 0.3 if cost.loop is not None else cost.step_host_ms
    return StepTimeModel.from_buckets([(t, ms / 1000.0) for t, ms in table], host_ms / 1000.0)


def item_tokens(text: str, ref: tuple[str, int] | None = None) -> tuple[int, int]:
    """(tokens per step, frames) of a design segment: cond row (style 6 + text markers 2 + words and
    punctuation, as the bench's word tokenizer counts) + frames, and the uncond row (frames). ref: the
    (text, frames) of the segment whose codes prompt this one (voice continuity): its text joins the cond row's
    text, its frames the cond row (+ <|denoise|>), and the frames follow its pace (sequence.prepare)."""
    if ref is None:
        frames = estimate_frames(text)
        prefix = 8 + len(text.split()) + sum(c in ",.!?;:" for c in text)
        return prefix + 2 * frames, frames
    ref_text, ref_frames = ref
    frames = estimate_frames(text, ref_text, ref_frames)
    both = ref_text + " " + text
    prefix = 9 + len(both.split()) + sum(c in ",.!?;:" for c in both)
    return prefix + ref_frames + 2 * frames, frames


@dataclass(frozen=True)
class Cost:
    """Host and codec costs (ms) and the step slow-down while a decode runs beside it."""

    step_host_ms: float = 0.3
    # a step overlapping a decode call takes (1 + contention × frames in that call / 1000) × its engine time
    # (the codec on long items takes SMs from the step; run 10: load steps, beside calls of ~150 short frames,
    # took their table time; N=100 steps, beside calls of ~600 frames, took ~1.7 ms more)
    contention: float = 0.15
    codec_call_ms: float = 2.0
    codec_len_ms: float = 6.0
    codec_frame_ms: float = 0.035  # per frame decoded (all items of the call)
    # a decode call beside big steps is slower (they fill the GPU): × (1 + decode_slow × tokens of the last
    # step / 4096)
    decode_slow: float = 1.5
    engine_scale: float = 1.0  # step engine time × this (what-if: a faster or slower engine)
    merge: bool = True  # the decode thread takes everything queued (4cfb23a); False: one job per finishing step
    # Measured costs (a cost file, bench/omnivoice_costs.py; Cost.measured): the step staircase instead of
    # STEP_MS, the loop's period rule instead of step_host_ms, the codec per segment / padded frames.
    step_bucket_ms: tuple[tuple[int, float], ...] | None = None
    loop: LoopCost | None = None
    codec_item_ms: float = 0.0
    codec_padded: bool = False  # frames counted as segments × the longest (one batched forward)

    @classmethod
    def measured(cls, model: CostModel) -> Cost:
        """The costs of a cost file, nothing fitted."""
        c = model.codec
        return cls(step_host_ms=0.0, contention=model.interference.contention, codec_call_ms=c.call_ms,
                   codec_len_ms=c.length_ms, codec_frame_ms=c.frame_ms, decode_slow=model.interference.decode_slow,
                   step_bucket_ms=model.step.bucket_ms, loop=model.loop, codec_item_ms=c.item_ms,
                   codec_padded=c.frames == "padded")

    def codec(self) -> CodecCost:
        return CodecCost(self.codec_call_ms, self.codec_item_ms, self.codec_len_ms, self.codec_frame_ms,
                         "padded" if self.codec_padded else "sum")


@dataclass(frozen=True)
class Knobs:
    """Scheduler settings (the worker's config.omnivoice fields)."""

    policy: str = "class"  # class | deadline
    admit_ms: float = 30.0
    latency_batch_tokens: int = 4096
    max_batch_tokens: int = 16384
    first_deadline_s: float = 0.1
    # text.target_chars, a what-if for the service. 160: the server's default of the base settings (run 10),
    # pinned because the config default has since moved to 60 (63495b0); None: today's config default.
    target_chars: int | None = 160
    # the worker's admission control (gpu_worker/admission.py, the real Admission and StepClock): a first
    # segment predicted to start later than this is refused; 0 = off (the runs before issue 16)
    admission_wait_ms: float = 0.0
    # config omnivoice.voice_continuity (on since 2e6dbb4, after issue 16's H200 run): a turn's later segments
    # are prompted with its first segment's codes (more tokens) and start once those exist
    continuity: bool = False
    # the worker hands the scheduler its token buckets (class policy: a budget is raised to its bucket's top,
    # free tokens; since session 9); False: the scheduler as before
    bucket_fill: bool = True

    def scheduler(self, clock: list[float], cost: Cost) -> Scheduler:
        kw: dict[str, Any] = {"token_buckets": TOKEN_BUCKETS} if self.bucket_fill else {}
        if self.policy == "deadline":
            kw |= {"step_model": step_model(cost), "first_deadline_s": self.first_deadline_s}
        # max_batch_items 128: the runner's largest batch bucket (the worker passes it)
        return Scheduler(max_batch_tokens=self.max_batch_tokens, max_batch_items=128,
                         latency_batch_tokens=self.latency_batch_tokens or None,
                         admit_interval_s=self.admit_ms / 1000.0, clock=lambda: clock[0], **kw)


@dataclass(order=True)
class _Arrival:
    t: float
    seq: int
    rid: str = field(compare=False)
    tokens: int = field(compare=False)
    frames: int = field(compare=False)
    priority: int = field(compare=False)
    deadline: Callable[[float], float | None] = field(compare=False)


class Sim:
    """One worker: the step loop on the simulated clock, and the decode thread on its own timeline."""

    def __init__(self, knobs: Knobs, cost: Cost) -> None:
        self.clock = [0.0]
        self.s = knobs.scheduler(self.clock, cost)
        self.cost = cost
        self.arrivals: list[_Arrival] = []
        self.seq = 0
        self.done: dict[str, float] = {}
        self.on_done: dict[str, Callable[[float], None]] = {}
        self.info: dict[str, tuple[int, int]] = {}  # rid → (priority, frames)
        self.decode_q: list[tuple[float, str]] = []  # (finished at, rid), in order
        self.decoder_free = 0.0
        self.decode_busy: list[tuple[float, float, int]] = []  # decode calls (start, end, frames)
        self.steps = 0
        self.step_tokens = 0
        self.step_s = 0.0
        self.decode_calls = 0
        self.decode_s = 0.0
        self.decode_lengths = 0
        self.last_tokens = 0  # tokens of the last step run
        self.decode_items = 0
        self.gpu_s = 0.0  # device time of the steps (engine, with contention): the card's "GPU in steps"
        self.timers: list[tuple[float, int, Callable[[float], None]]] = []  # (t, seq, fn): fn(t) at t
        self.step_clock = StepClock()
        self.admission = Admission(knobs.admission_wait_ms / 1000.0, knobs.max_batch_tokens, self.step_clock) \
            if knobs.admission_wait_ms > 0 else None
        self.on_refused: dict[str, Callable[[float], None]] = {}
        self.on_codes: dict[str, Callable[[float], None]] = {}  # keep_codes segments: called when the decode
        # thread takes them (it sends their codes before running the codec)
        self.knobs = knobs
        self.refused: list[str] = []
        self._last_step_end: float | None = None  # end of the last step while busy (the step clock's periods)

    def at(self, t: float, fn: Callable[[float], None]) -> None:
        """Call fn(t) when the clock reaches t (between steps, like a message the worker takes)."""
        self.seq += 1
        heapq.heappush(self.timers, (t, self.seq, fn))

    def cancel(self, rid: str) -> None:
        """An abort: the segment leaves the scheduler at once (finished ones are still decoded)."""
        self.s.cancel(rid)
        self.on_done.pop(rid, None)
        self.on_refused.pop(rid, None)
        self.on_codes.pop(rid, None)
        self.arrivals = [a for a in self.arrivals if a.rid != rid]
        heapq.heapify(self.arrivals)

    def submit(self, t: float, rid: str, tokens: int, frames: int, priority: int,
               deadline: Callable[[float], float | None] = lambda t: None,
               on_done: Callable[[float], None] | None = None,
               on_refused: Callable[[float], None] | None = None) -> None:
        self.seq += 1
        self.info[rid] = (priority, frames)
        heapq.heappush(self.arrivals, _Arrival(t, self.seq, rid, tokens, frames, priority, deadline))
        if on_done is not None:
            self.on_done[rid] = on_done
        if on_refused is not None:
            self.on_refused[rid] = on_refused

    def _admit(self, a: _Arrival) -> None:
        """The worker's _admit: a first segment the admission rule refuses never reaches the scheduler."""
        if a.priority == 0 and self.admission is not None:
            running, waiting = self.s.load_ahead(0)
            if not self.admission.decide(running, waiting, a.tokens, NUM_STEP).admit:
                self.refused.append(a.rid)
                self.on_done.pop(a.rid, None)
                cb = self.on_refused.pop(a.rid, None)
                if cb is not None:
                    cb(a.t)
                return
        self.on_refused.pop(a.rid, None)
        self.s.add(a.rid, num_tokens=a.tokens, num_steps=NUM_STEP, priority=a.priority, deadline_s=a.deadline(a.t))

    def _decode_rounds(self, until: float) -> None:
        """Run the decode thread's calls that start by `until` (the step loop has queued all they take)."""
        c = self.cost
        while self.decode_q:
            start = max(self.decoder_free, self.decode_q[0][0])
            if start > until:
                return
            n = 0
            while n < len(self.decode_q) and (self.decode_q[n][0] <= start if c.merge
                                              else self.decode_q[n][0] == self.decode_q[0][0]):
                n += 1
            job, self.decode_q = [r for _, r in self.decode_q[:n]], self.decode_q[n:]
            for rid in job:
                codes_cb = self.on_codes.pop(rid, None)
                if codes_cb is not None:
                    codes_cb(start)
            t = start
            for part in ([r for r in job if self.info[r][0] == 0], [r for r in job if self.info[r][0] != 0]):
                if not part:
                    continue
                lengths = len({self.info[r][1] for r in part})
                frames = sum(self.info[r][1] for r in part)
                slow = 1.0 + c.decode_slow * self.last_tokens / 4096
                end = t + slow * c.codec().ms([self.info[r][1] for r in part]) / 1000.0
                self.decode_lengths += lengths
                self.decode_items += len(part)
                self.decode_busy.append((t, end, frames))
                self.decode_calls += 1
                self.decode_s += end - t
                for rid in part:
                    self.done[rid] = end
                    cb = self.on_done.pop(rid, None)
                    if cb is not None:
                        cb(end)
                t = end
            self.decoder_free = t

    def _overlap(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] during which the decode thread runs a call, weighted by its frames / 1000."""
        total = 0.0
        for a, b, frames in reversed(self.decode_busy):
            if b <= t0:
                break
            total += max(0.0, min(b, t1) - max(a, t0)) * frames / 1000.0
        return total

    def run(self, until: float = 600.0) -> None:
        """Step until nothing is live, queued or decoding."""
        c = self.cost
        while self.clock[0] < until:
            now = self.clock[0]
            self._decode_rounds(now)
            while self.timers and self.timers[0][0] <= now:
                t, _, fn = heapq.heappop(self.timers)
                fn(t)
            while self.arrivals and self.arrivals[0].t <= now:
                self._admit(heapq.heappop(self.arrivals))
            plan = self.s.schedule()
            if not plan.batch:
                self._last_step_end = None
                nxt = [a.t for a in self.arrivals[:1]] + [t for t, _, _ in self.timers[:1]]
                if self.decode_q:
                    nxt.append(max(self.decoder_free, self.decode_q[0][0]))
                if not nxt:
                    return
                self.clock[0] = max(now, min(nxt))
                continue
            engine = c.engine_scale * step_engine_ms(plan.num_tokens, c.step_bucket_ms) / 1000.0
            # a decode already running slows the step for the part it overlaps (the step's length is not
            # known before: iterate once from the no-contention length)
            ms = engine + c.step_host_ms / 1000.0
            slowed = c.contention * engine * self._overlap(now, now + ms) / ms
            engine += slowed
            if c.loop is not None:  # measured: device time + the GPU's gap, or the loop's host work if longer
                ms = c.loop.period_ms(1000.0 * engine, len(plan.batch)) / 1000.0
            else:
                ms += slowed
            if self._last_step_end is not None:
                self.step_clock.observe(plan.num_tokens, ms)
            self.clock[0] = now + ms
            self._last_step_end = self.clock[0]
            self.gpu_s += engine
            self.steps += 1
            self.step_tokens += plan.num_tokens
            self.last_tokens = plan.num_tokens
            self.step_s += ms
            for rid in self.s.complete_step(plan):
                self.decode_q.append((self.clock[0], rid))

    def stats(self) -> dict[str, float]:
        return {"steps": self.steps, "tokens_per_step": self.step_tokens / max(1, self.steps),
                "step_ms": 1000.0 * self.step_s / max(1, self.steps), "decode_calls": self.decode_calls,
                "decode_ms": 1000.0 * self.decode_s / max(1, self.decode_calls),
                "decode_items": self.decode_items / max(1, self.decode_calls),
                "decode_lengths": self.decode_lengths / max(1, self.decode_calls),
                "decode_busy": self.decode_s / max(1e-9, self.step_s), "gpu_s": self.gpu_s,
                "codec_s": self.decode_s, "segments": self.decode_items, "refused": len(self.refused)}


def sim_load(knobs: Knobs, cost: Cost, num: int = 1000, rate: float = 100.0) -> dict[str, float]:
    sim = Sim(knobs, cost)
    for i in range(num):
        tokens, frames = item_tokens(SHORT_INPUTS[i % len(SHORT_INPUTS)])
        sim.submit(i / rate, f"r{i}", tokens, frames, priority=0)
    sim.run()
    lat = np.array([sim.done[f"r{i}"] - i / rate for i in range(num) if f"r{i}" in sim.done])  # served
    return {"p50_s": float(np.percentile(lat, 50)), "p95_s": float(np.percentile(lat, 95)),
            "p99_s": float(np.percentile(lat, 99)), "wall_s": max(sim.done.values()), "served": len(lat),
            **sim.stats()}


def reply_units(text: str, words_per_s: float, target_chars: int | None = None) -> tuple[float, list[tuple[float, str]]]:
    """(time the first sentence's last word is sent, [(time the unit's engine request can start, unit text)])
    for one reply sent word by word from t = 0, cut by the real SentenceBuffer with the server's settings.
    The first unit starts when peek_first_unit offers it (the service's speculation)."""
    t = load_config({"target_chars": target_chars}).text
    buf = SentenceBuffer(min_chars=t.min_chars, first_segment_min_chars=t.first_segment_min_chars,
                         target_chars=t.target_chars, max_chars=t.max_chars)
    words = text.split(" ")
    units: list[tuple[float, str]] = []
    clause = None
    for i, w in enumerate(words):
        at = i / words_per_s
        if clause is None and w[-1] in ".!?":
            clause = at
        units += [(at, u.text) for u in buf.feed(w + (" " if i < len(words) - 1 else ""))]
        if not units:
            peek = buf.peek_first_unit()
            if peek is not None:
                units.append((at, peek.text))  # the speculation; feed() later emits the same unit
    first = units[0][1]
    units = [units[0]] + [(at, u) for at, u in units[1:] if not (u == first and at >= units[0][0])]
    units += [(len(words) / words_per_s, u.text) for u in buf.end()]
    assert clause is not None
    return clause, units


class _Turn:
    """One agent reply on the sim's clock, as the service sends it and the bench's player plays it: units as the
    real SentenceBuffer cuts them (`shape`, from reply_units) starting at `start`, the lookahead, deadlines from
    the service's rule. barge_after: the user interrupts that long after the first audio (its segments are
    aborted). on_end(t): called once when the reply has played out, or at the barge-in."""

    def __init__(self, sim: Sim, name: str, shape: tuple[float, list[tuple[float, str]]], start: float,
                 barge_after: float | None = None, on_end: Callable[[float], None] | None = None) -> None:
        clause, units = shape
        self.sim, self.name = sim, name
        self.clause = start + clause
        self.emit = [start + at for at, _ in units]
        self.continuity = sim.knobs.continuity
        first = item_tokens(units[0][1])
        self.segs = [first] + [item_tokens(u, (units[0][1], first[1]) if self.continuity else None)
                               for _, u in units[1:]]
        self.codes_at: float | None = None  # continuity: when the first segment's codes reached the worker
        self.pending: list[tuple[int, float]] = []  # continuity: later segments held for those codes
        self.est = [estimate_audio_s(u, engine="omnivoice") for _, u in units]
        self.dur = list(self.est)  # audio the client plays (noise from random weights: nothing trimmed)
        self.done: list[float | None] = [None] * len(units)
        self.sent: list[float | None] = [None] * len(units)  # emitted in order by the service
        self.first_due = self.emit[0] + FIRST_AUDIO_S
        self.barge_after, self.on_end = barge_after, on_end
        self.barged_at: float | None = None
        self.refused = False  # its first segment was refused (admission control): the turn is over
        self.played_out = False
        self.end_s: float | None = None  # when its playback ends (once all is generated)
        self.submitted: set[int] = set()
        for k in range(min(LOOKAHEAD["concurrent"], len(self.segs))):
            self.submit(k, self.emit[k])

    def deadline(self, k: int, t: float) -> float | None:
        """service Plan.request (realtime_tts/service/planning.py) at time t."""
        if k == 0:
            return None
        first = self.sent[0] if self.sent[0] is not None and self.sent[0] <= t else None
        out = sum(d for d, s in zip(self.dur, self.sent) if s is not None and s <= t)
        return playback_deadline(first, self.first_due, out, sum(self.est[:k]))

    def submit(self, k: int, t: float) -> None:
        if self.continuity and k and self.codes_at is None:
            self.pending.append((k, t))  # the worker's PromptBook holds it until the codes exist
            return
        if self.continuity and k:
            t = max(t, self.codes_at or 0.0)
        if self.continuity and k == 0:
            self.sim.on_codes[f"{self.name}-0"] = self.codes
        self.submitted.add(k)
        self.sim.submit(t, f"{self.name}-{k}", self.segs[k][0], self.segs[k][1], priority=0 if k == 0 else 1,
                        deadline=lambda at: self.deadline(k, at), on_done=lambda done_t: self.finished(k, done_t),
                        on_refused=self.refuse if k == 0 else None)

    def codes(self, t: float) -> None:
        self.codes_at = t
        pending, self.pending = self.pending, []
        if self.barged_at is None:
            for k, at in pending:
                self.submit(k, max(at, t))

    def refuse(self, t: float) -> None:
        """The worker refused the first segment (Overloaded): the service fails the turn, the rest is dropped."""
        self.refused = True
        self.barged_at = t  # nothing more is sent or counted as played
        for k in self.submitted:
            if k and self.done[k] is None:
                self.sim.cancel(f"{self.name}-{k}")
        self.ended(t)

    def finished(self, k: int, t: float) -> None:
        if self.barged_at is not None:
            return
        self.done[k] = t
        for j in range(len(self.segs)):  # segments are sent in order
            if self.sent[j] is None:
                done, before = self.done[j], self.sent[j - 1] if j else None
                if done is None:
                    break
                sent = self.sent[j] = max(done, before or 0.0)
                if j == 0 and self.barge_after is not None:
                    self.sim.at(sent + self.barge_after, self.barge)
                ahead = j + LOOKAHEAD["concurrent"]
                if ahead < len(self.segs):  # the lookahead slot frees when segment j is out
                    self.submit(ahead, max(self.emit[ahead], sent))
        if self.sent[-1] is not None and not self.played_out:
            stall, _ = self.player()
            self.played_out = True  # generated: it plays out at real-time pace (a barge-in may still come)
            self.end_s = self.sent[0] + stall + sum(self.dur)  # type: ignore[operator]
            self.sim.at(self.end_s, self.ended)

    def ended(self, t: float) -> None:
        if self.on_end is not None:
            self.on_end(t)
            self.on_end = None

    def barge(self, t: float) -> None:
        if self.ended_at_or_before(t):
            return
        self.barged_at = t
        for k in self.submitted:
            if self.done[k] is None:
                self.sim.cancel(f"{self.name}-{k}")
        self.ended(t)

    def ended_at_or_before(self, t: float) -> bool:
        return self.end_s is not None and self.end_s <= t

    def player(self) -> tuple[float, int]:
        """The bench's player over the segments sent: (stall seconds, underruns)."""
        sent = [s for s in self.sent if s is not None]
        stall, played, underruns = 0.0, 0.0, 0
        for k, s in enumerate(sent):
            dry = sent[0] + stall + played
            if k and s > dry + JITTER_S:
                underruns += 1
                stall += s - dry
            played += self.dur[k]
        return stall, underruns


def _turn_results(sim: Sim, turns: list[_Turn]) -> dict[str, float]:
    """The bench's figures over all turns: first audio after the first sentence (every turn), underruns and
    stall (turns not interrupted)."""
    after_clause, underruns, with_underrun, stall_total = [], 0, 0, 0.0
    for tr in turns:
        if tr.sent[0] is not None:
            after_clause.append(tr.sent[0] - tr.clause)
        if tr.barged_at is None:
            assert all(s is not None for s in tr.sent), tr.name
            stall, ur = tr.player()
            underruns += ur
            with_underrun += ur > 0
            stall_total += stall
    fa = np.array(after_clause) * 1000.0
    return {"p50_ms": float(np.percentile(fa, 50)), "p95_ms": float(np.percentile(fa, 95)),
            "max_ms": float(fa.max()), "underruns": underruns, "turns_with_underrun": with_underrun,
            "turns": len(turns), "barged": sum(tr.barged_at is not None and not tr.refused for tr in turns),
            "refused_turns": sum(tr.refused for tr in turns),
            "stall_ms": stall_total * 1000.0, **sim.stats()}


def sim_agents(knobs: Knobs, cost: Cost, n: int, words_per_s: float = 30.0, seed: int = 0) -> dict[str, float]:
    """One reply per agent. seed 0: agents start evenly spread over one second (the bench's former pattern);
    seed > 0: at uniform random times in it."""
    sim = Sim(knobs, cost)
    starts = [a / n for a in range(n)] if seed == 0 else \
        sorted(np.random.default_rng(seed).uniform(0.0, 1.0, n).tolist())
    shapes = [reply_units(r, words_per_s, knobs.target_chars) for r in REPLIES]
    turns = [_Turn(sim, f"a{a}", shapes[a % len(shapes)], starts[a]) for a in range(n)]
    sim.run()
    return _turn_results(sim, turns)


def sim_conversations(knobs: Knobs, cost: Cost, n: int, turns: int = 2, gap_s: float = 2.0, barge_in: float = 0.2,
                      ramp_s: float = 4.0, words_per_s: float = 12.0) -> dict[str, float]:
    """bench/omnivoice_serve.py's agents (run_agents with a Conversation): each agent's turns one after the
    other, the next `gap_s` after the reply has played (or after the barge-in), first turns ramped over ramp_s,
    the same random draws per agent as the bench (who barges in, and when)."""
    import random

    sim = Sim(knobs, cost)
    shapes = [reply_units(r, words_per_s, knobs.target_chars) for r in REPLIES]
    all_turns: list[_Turn] = []

    def start_turn(a: int, k: int, rng: random.Random, t: float) -> None:
        barge = rng.uniform(0.5, 3.0) if rng.random() < barge_in else None
        nxt = (lambda end: start_turn(a, k + 1, rng, end + gap_s)) if k + 1 < turns else None
        all_turns.append(_Turn(sim, f"a{a}t{k}", shapes[(a + 7 * k) % len(shapes)], t, barge, nxt))

    for a in range(n):
        start_turn(a, 0, random.Random(a), a * ramp_s / max(1, n))
    sim.run()
    return _turn_results(sim, all_turns)


AGENT_HEAD = ("| N | after 1st sentence p50 / p95 / max ms | underruns | stall ms | steps | step mean ms "
              "| tokens/step | decode calls, mean ms |")
LOAD_HEAD = "| load p50 / p95 / p99 s | wall s | steps | step mean ms | tokens/step | decode calls, mean ms |"


def agent_cells(r: dict[str, float]) -> str:
    return (f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['max_ms']:.0f} | {r['underruns']} | {r['stall_ms']:.0f} "
            f"| {r['steps']} | {r['step_ms']:.2f} | {r['tokens_per_step']:.0f} "
            f"| {r['decode_calls']}, {r['decode_ms']:.1f} |")


def load_cells(r: dict[str, float]) -> str:
    return (f"{r['p50_s']:.3f} / {r['p95_s']:.3f} / {r['p99_s']:.3f} | {r['wall_s']:.1f} | {r['steps']} "
            f"| {r['step_ms']:.2f} | {r['tokens_per_step']:.0f} | {r['decode_calls']}, {r['decode_ms']:.1f} |")


# H200 run 10 (class policy, admit 30 ms, latency budget 4096): after-1st-sentence p50 / p95 ms, underruns,
# steps, step mean ms (the server's /metrics), decode calls and mean ms (the worker's activity line).
RUN10_AGENTS = {1: ("68 / 68", 0, 95, 1.94, "-"), 25: ("95 / 638", 0, 479, 4.41, "27, 35.6"),
                50: ("129 / 411", 0, 491, 5.20, "60, 35.8"), 100: ("428 / 891", 74, 423, 9.38, "37, 92.4")}
RUN10_LOAD = ("0.195 / 0.245 / 0.341", 10.1, 2373, 3.92, "143 + 157, 32.5 / 27.1")


# Cross-checks on earlier code (same costs, no refit): H200 runs 8 and 9 decoded one codec call per finishing
# step (before 4cfb23a) with the admission interval 0; after-1st-sentence p50 / p95 ms and underruns per N,
# load p50 / p95 s.
CROSS = (
    ("run 9 (class, admit 0, no decode merging)", Knobs(admit_ms=0.0), Cost(merge=False),
     {25: "84 / 754, 0", 50: "93 / 722, 0", 100: "467 / 774, 68"}, "2.01 / 6.04"),
    ("run 8 (deadline policy, admit 0, no decode merging)", Knobs(policy="deadline", admit_ms=0.0), Cost(merge=False),
     {25: "98 / 172, 4", 50: "91 / 149, 33", 100: "369 / 554, 100"}, "1.63 / 2.38"),
)


def calibrate(cost: Cost, knobs: Knobs, load: int, rate: float) -> None:
    print(f"## Calibration: sim vs H200 run 10 ({knobs}, {cost})\n")
    print("| N | source | after 1st sentence p50 / p95 ms | underruns | steps | step mean ms | decode calls, mean ms |")
    print("|---|---|---|---|---|---|---|")
    for n, (fa, ur, steps, step_ms, dec) in RUN10_AGENTS.items():
        r = sim_agents(knobs, cost, n)
        print(f"| {n} | H200 run 10 | {fa} | {ur} | {steps} | {step_ms:.2f} | {dec} |")
        print(f"| {n} | sim | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} | {r['underruns']} | {r['steps']} "
              f"| {r['step_ms']:.2f} | {r['decode_calls']}, {r['decode_ms']:.1f} ({r['decode_items']:.1f} items, "
              f"{r['decode_lengths']:.1f} lengths) |", flush=True)
    r = sim_load(knobs, cost, load, rate)
    fa, wall, steps, step_ms, dec = RUN10_LOAD
    print(f"\n| load {load} @ {rate:g}/s | p50 / p95 / p99 s | wall s | steps | step mean ms | decode calls, mean ms |")
    print("|---|---|---|---|---|---|")
    print(f"| H200 run 10 | {fa} | {wall} | {steps} | {step_ms:.2f} | {dec} |")
    print(f"| sim | {r['p50_s']:.3f} / {r['p95_s']:.3f} / {r['p99_s']:.3f} | {r['wall_s']:.1f} | {r['steps']} "
          f"| {r['step_ms']:.2f} | {r['decode_calls']}, {r['decode_ms']:.1f} ({r['decode_items']:.1f} items, "
          f"{r['decode_lengths']:.1f} lengths) |", flush=True)
    print("\n| cross-check | N=25: p50 / p95 ms, underruns | N=50 | N=100 | load p50 / p95 s |")
    print("|---|---|---|---|---|")
    for label, k, c, measured, measured_load in CROSS:
        sim = {n: sim_agents(k, c, n) for n in measured}
        ld = sim_load(k, c, load, rate)
        print(f"| {label}: H200 | " + " | ".join(measured.values()) + f" | {measured_load} |")
        print(f"| {label}: sim | " + " | ".join(f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f}, {r['underruns']}"
                                                 for r in sim.values()) + f" | {ld['p50_s']:.2f} / {ld['p95_s']:.2f} |",
              flush=True)


# name → (title, [(label, Knobs changes, Cost changes)]): one change at a time from the base settings
SWEEPS: dict[str, tuple[str, list[tuple[str, dict[str, Any], dict[str, Any]]]]] = {
    # codec_len_ms × the load slow-down (~1.5 beside the load test's steps) is the ~9 ms per distinct length the
    # run 10 activity lines show; per-length CUDA graphs of the codec should leave ~1.5 ms of it
    "codec": ("codec cost per distinct length under load (codec_len_ms 6 / 1 / 0 × the slow-down)", [
        ("~9 ms/length (today)", {}, {"codec_len_ms": 6.0}),
        ("~1.5 ms/length", {}, {"codec_len_ms": 1.0}),
        ("0 ms/length", {}, {"codec_len_ms": 0.0}),
        ("no codec cost at all (bound)", {}, {"codec_len_ms": 0.0, "codec_call_ms": 0.0, "codec_frame_ms": 0.0}),
    ]),
    "policy": ("scheduler policy", [(p, {"policy": p}, {}) for p in ("class", "deadline")]),
    "admit": ("admission interval", [(f"admit {ms:g} ms", {"admit_ms": ms}, {}) for ms in (0.0, 15.0, 30.0, 60.0)]),
    "latency": ("latency_batch_tokens", [
        (f"latency budget {t}", {"latency_batch_tokens": t}, {}) for t in (2048, 4096, 8192)]),
    # not a scheduler knob: the service's unit length after the first (config text.target_chars); at 160 the
    # bench's 2nd and 3rd sentences are one ~6.3 s unit that starts at the end of the reply
    "split": ("text.target_chars (units after the first)", [
        (f"target_chars {t}", {"target_chars": t}, {}) for t in (160, 80, 60)]),
}

# Combinations (label, scheduler knobs, costs): today's, then what closes N=100 in the sim, and that minus one
# change at a time (which of its parts carry it).
_G = Cost(codec_len_ms=1.0)  # per-length CUDA graphs of the codec: ~1.5 ms per distinct length under load
_BEST = Knobs(admit_ms=0.0, latency_batch_tokens=2048, target_chars=60)
# max_batch_tokens 6144: a backlog of later segments runs in 12 ms steps, most urgent first, instead of all at
# once in 31 ms steps that finish every one of them late together
_ROBUST = replace(_BEST, latency_batch_tokens=1024, max_batch_tokens=6144)
CANDIDATES: list[tuple[str, Knobs, Cost]] = [
    ("today (class, admit 30, latency 4096, target_chars 160, codec ~9 ms/length)", Knobs(), Cost()),
    ("A = class, admit 0, latency 2048, target_chars 60, codec ~1.5 ms/length", _BEST, _G),
    ("A with codec ~9 ms/length", _BEST, Cost()),
    ("A with admit 30 ms", replace(_BEST, admit_ms=30.0), _G),
    ("A with latency 4096", replace(_BEST, latency_batch_tokens=4096), _G),
    ("A with target_chars 160", replace(_BEST, target_chars=160), _G),
    ("A with the deadline policy", replace(_BEST, policy="deadline"), _G),
    ("A with latency 1024", replace(_BEST, latency_batch_tokens=1024), _G),
    ("A with max_batch_tokens 6144", replace(_BEST, max_batch_tokens=6144), _G),
    ("B = A with latency 1024 and max_batch_tokens 6144", _ROBUST, _G),
    ("B with codec ~9 ms/length", _ROBUST, Cost()),
]
# Robustness of a combination at N=100: the model off in the unfavourable direction.
PERTURB: list[tuple[str, Callable[[Cost], Cost], int]] = [
    ("as calibrated", lambda c: c, 100),
    ("engine steps x1.1", lambda c: replace(c, engine_scale=1.1), 100),
    ("codec x1.5 (call, length, frame)", lambda c: replace(c, codec_call_ms=1.5 * c.codec_call_ms,
                                                         codec_len_ms=1.5 * c.codec_len_ms,
                                                         codec_frame_ms=1.5 * c.codec_frame_ms), 100),
    ("step contention x2", lambda c: replace(c, contention=2 * c.contention), 100),
    ("N=110", lambda c: c, 110),
    ("N=120", lambda c: c, 120),
]


# The H200 serving run of issue 16 (bench/results/omnivoice_serve_h200.md, gpu branch 5df6767, the server's
# defaults): 2 turns per agent, 2 s of user turn, 20% barge-ins, first turns ramped over 4 s, 12 words/s.
# N → (after-1st-sentence p50, p95 ms, turns with underrun, steps, step mean ms); loads → (p50, p95 s).
RUN16_AGENTS = {200: (103, 288, 8, 4775, 3.10), 250: (122, 464, 154, 4402, 3.76), 300: (200, 472, 268, 3769, 4.74)}
RUN16_LOAD = {(1500, 150.0): (0.710, 0.979), (2000, 200.0): (1.489, 10.489)}
# The server's defaults since session 3 (config.py) and the costs fitted to RUN16_AGENTS (a grid over engine_scale,
# contention, codec_len_ms, decode_slow, step_host_ms; the best of 108 by the largest p95 error over the three N).
RUN16_KNOBS = Knobs(admit_ms=0.0, latency_batch_tokens=1024, max_batch_tokens=6144, target_chars=None)
RUN16_COST = Cost(engine_scale=0.94, contention=0.3, codec_len_ms=2.0, decode_slow=0.5, step_host_ms=0.3)
RUN16_WHATIFS: list[tuple[str, Knobs, Cost]] = [
    ("the defaults (calibrated)", RUN16_KNOBS, RUN16_COST),
    ("latency_batch_tokens 2048", replace(RUN16_KNOBS, latency_batch_tokens=2048), RUN16_COST),
    ("max_batch_tokens 4096", replace(RUN16_KNOBS, max_batch_tokens=4096), RUN16_COST),
    ("max_batch_tokens 8192", replace(RUN16_KNOBS, max_batch_tokens=8192), RUN16_COST),
    ("deadline policy", replace(RUN16_KNOBS, policy="deadline"), RUN16_COST),
    ("codec batched across lengths (~0.3 ms per extra length)", RUN16_KNOBS, replace(RUN16_COST, codec_len_ms=0.3)),
    ("no codec cost at all (bound)", RUN16_KNOBS,
     replace(RUN16_COST, codec_call_ms=0.0, codec_len_ms=0.0, codec_frame_ms=0.0, contention=0.0)),
    ("engine steps x0.9", RUN16_KNOBS, replace(RUN16_COST, engine_scale=0.9 * RUN16_COST.engine_scale)),
]


def calibrate16() -> None:
    """The sim beside the issue-16 H200 run (multi-turn agents), then one change at a time at N=250 and 300."""
    print("## Calibration: sim vs the issue-16 H200 serving run (multi-turn agents)\n")
    print(f"Knobs: {RUN16_KNOBS}; costs: {RUN16_COST}.\n")
    print("| N | source | after 1st sentence p50 / p95 ms | turns with underrun | steps | step mean ms |")
    print("|---|---|---|---|---|---|")
    for n, (p50, p95, ur, steps, step_ms) in RUN16_AGENTS.items():
        r = sim_conversations(RUN16_KNOBS, RUN16_COST, n)
        print(f"| {n} | H200 | {p50} / {p95} | {ur} | {steps} | {step_ms:.2f} |")
        print(f"| {n} | sim | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} ({100 * (r['p95_ms'] / p95 - 1):+.0f}%) "
              f"| {r['turns_with_underrun']} | {r['steps']} | {r['step_ms']:.2f} |", flush=True)
    print("\n| load | H200 p50 / p95 s | sim p50 / p95 s |\n|---|---|---|")
    for (num, rate), (load_p50, load_p95) in RUN16_LOAD.items():
        r = sim_load(RUN16_KNOBS, RUN16_COST, num, rate)
        print(f"| {num} @ {rate:g}/s | {load_p50:.3f} / {load_p95:.3f} | {r['p50_s']:.3f} / {r['p95_s']:.3f} |", flush=True)
    print("\n### One change at a time (sim, calibrated costs)\n")
    print("| change | N=250: p95 ms, turns with underrun | N=300 |\n|---|---|---|")
    for label, k, c in RUN16_WHATIFS:
        rs = [sim_conversations(k, c, n) for n in (250, 300)]
        print(f"| {label} | " + " | ".join(f"{r['p95_ms']:.0f}, {r['turns_with_underrun']}" for r in rs) + " |",
              flush=True)


def seed_cells(knobs: Knobs, cost: Cost, n: int, seeds: int) -> str:
    """p95 first audio and underruns over random-start seeds 1..seeds: 'min–max | min–max'."""
    if seeds < 1:
        return "- | - |"
    rs = [sim_agents(knobs, cost, n, seed=s) for s in range(1, seeds + 1)]
    p95 = [r["p95_ms"] for r in rs]
    ur = [r["underruns"] for r in rs]
    return f"{min(p95):.0f}–{max(p95):.0f} | {min(ur)}–{max(ur)} |"


def candidates(ns: list[int], seeds: int, load: int, rate: float) -> None:
    print(f"### Combinations (bench spread = seed 0; seeds 1-{seeds}: random starts)\n")
    print("| combination | N | after 1st sentence p50 / p95 / max ms | underruns | stall ms | seeds: p95 ms | "
          "seeds: underruns | load p95 s |")
    print("|---|---|---|---|---|---|---|---|")
    for label, k, c in CANDIDATES:
        ld = sim_load(k, c, load, rate)["p95_s"] if load else float("nan")
        for n in ns:
            r = sim_agents(k, c, n)
            print(f"| {label} | {n} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['max_ms']:.0f} | {r['underruns']} "
                  f"| {r['stall_ms']:.0f} | {seed_cells(k, c, n, seeds)} {ld:.3f} |", flush=True)
    print(f"\n### Robustness of A, B and C = B with today's codec (seed 0; seeds 1-{seeds})\n")
    print("| combination | model change | N | after 1st sentence p50 / p95 / max ms | underruns | stall ms "
          "| seeds: p95 ms | seeds: underruns | load p95 s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, k, c0 in (("A", _BEST, _G), ("B", _ROBUST, _G), ("C", _ROBUST, Cost())):
        for label, change, n in PERTURB:
            c = change(c0)
            ld = sim_load(k, c, load, rate)["p95_s"] if load else float("nan")
            r = sim_agents(k, c, n)
            print(f"| {name} | {label} | {n} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['max_ms']:.0f} "
                  f"| {r['underruns']} | {r['stall_ms']:.0f} | {seed_cells(k, c, n, seeds)} {ld:.3f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", default="25,50,100")
    p.add_argument("--load", type=int, default=1000)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--calibrate", action="store_true", help="sim vs H200 run 10 at the base settings")
    p.add_argument("--calibrate16", action="store_true",
                   help="sim vs the issue-16 H200 run (multi-turn agents), then one change at a time")
    p.add_argument("--sweep", default="", help="comma-separated: " + ", ".join(SWEEPS))
    p.add_argument("--candidates", action="store_true", help="the combinations table and A's robustness")
    p.add_argument("--seeds", type=int, default=5, help="random-start seeds besides the bench's spread (0: none)")
    # base settings: the worker's defaults at 4cfb23a and the calibrated costs
    p.add_argument("--policy", choices=("class", "deadline"), default="class")
    p.add_argument("--admit-ms", type=float, default=30.0)
    p.add_argument("--latency-tokens", type=int, default=4096)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--first-s", type=float, default=0.1, help="first_deadline_s (deadline policy)")
    p.add_argument("--codec-len-ms", type=float, default=Cost.codec_len_ms)
    p.add_argument("--codec-call-ms", type=float, default=Cost.codec_call_ms)
    p.add_argument("--codec-frame-ms", type=float, default=Cost.codec_frame_ms)
    p.add_argument("--decode-slow", type=float, default=Cost.decode_slow)
    p.add_argument("--contention", type=float, default=Cost.contention)
    p.add_argument("--step-host-ms", type=float, default=Cost.step_host_ms)
    p.add_argument("--costs", help="a cost file (bench/omnivoice_costs.py): measured costs replace the --codec-*, "
                                   "--decode-slow, --contention and --step-host-ms ones")
    p.add_argument("--admission-wait-ms", type=float, default=0.0, help="the worker's admission control (0: off)")
    p.add_argument("--target-chars", type=int, default=160, help="text.target_chars (0: the config default)")
    p.add_argument("--continuity", action="store_true", help="voice continuity (later segments on the first's codes)")
    args = p.parse_args()
    knobs = Knobs(args.policy, args.admit_ms, args.latency_tokens, args.max_tokens, args.first_s,
                  args.target_chars or None, args.admission_wait_ms, args.continuity)
    cost = Cost(args.step_host_ms, args.contention, args.codec_call_ms, args.codec_len_ms, args.codec_frame_ms,
                args.decode_slow)
    if args.costs:
        try:
            cost = Cost.measured(load_costs(args.costs))
        except CostFileError as exc:
            raise SystemExit(f"error: {exc}") from None
    ns = [int(x) for x in args.agents.split(",") if x]
    if args.calibrate16:
        calibrate16()
        return
    if args.calibrate:
        calibrate(cost, knobs, args.load, args.rate)
        return
    if args.candidates:
        candidates(ns, args.seeds, args.load, args.rate)
        return
    sweeps = [s for s in args.sweep.split(",") if s] or [""]
    for name in sweeps:
        title, variants = SWEEPS[name] if name else ("base", [("base", {}, {})])
        print(f"\n### {title} (base: {knobs}; {cost})\n")
        print("| variant " + AGENT_HEAD + f" seeds 1-{args.seeds}: p95 ms | seeds: underruns | load p95 s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for label, knob_changes, cost_changes in variants:
            k, c = replace(knobs, **knob_changes), replace(cost, **cost_changes)
            ld = sim_load(k, c, args.load, args.rate)["p95_s"] if args.load else float("nan")
            for n in ns:
                print(f"| {label} | {n} | {agent_cells(sim_agents(k, c, n))} {seed_cells(k, c, n, args.seeds)} "
                      f"{ld:.3f} |", flush=True)


if __name__ == "__main__":
    main()
