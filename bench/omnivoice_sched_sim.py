"""CPU simulation of one OmniVoice worker under the serving bench's arrival patterns: the real Scheduler
(engine/scheduler.py) on a simulated clock, steps timed by a model fitted to the H200 step times.

No GPU, no model: it answers "what does the scheduling policy do to first audio / latency / underruns",
before vs after, given a step-time model. Host overhead per step (pack when the batch changes, codec decode
of finished items) is a parameter: the H200 serving run did not measure it separately; --calibrate finds the
value under which the old policy reproduces the measured load result.

    .venv/bin/python bench/omnivoice_sched_sim.py                       # old vs new, agents + load
    .venv/bin/python bench/omnivoice_sched_sim.py --calibrate           # host overhead that fits the H200 run
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realtime_tts.engine.runner import BATCH_BUCKETS, FRAME_QUANTUM, TOKEN_BUCKETS
from realtime_tts.engine.scheduler import Scheduler
from realtime_tts.omnivoice_text import estimate_frames

# Engine step time on the H200 (bf16, CUDA graphs, no host work): (tokens per step, ms), 6 s design items of
# 332 tokens at B = 1, 16, 64, 128 (bench/results/omnivoice_bench_h200_run2.md "per step ms").
STEP_TABLE = ((0, 1.4), (332, 2.151), (5312, 13.329), (21248, 47.798), (42496, 92.994))
# The bench's texts (bench/omnivoice_serve.py).
REPLIES = (
    ("Sure, I can help with that.", "Your order shipped this morning and should arrive on Thursday.",
     "Is there anything else you would like to know?"),
    ("Good question, let me check.", "The museum opens at nine and closes at six on weekdays.",
     "Tickets are cheaper if you book them online."),
    ("Thanks for waiting, I found it.", "The meeting moved to the larger room on the third floor.",
     "I have already sent the new invitation to everyone."),
)
SHORT_INPUTS = ("Hello there, how are you today?", "Your table is ready now.", "Please hold on a moment.",
                "The train leaves at five.", "Thank you for calling us.")
NUM_STEP = 32
KEYS: Counter[tuple[int, int, int]] = Counter()  # (token, batch, frame) bucket of every simulated step
GAP_S = 0.24  # pacing.gap_ms: silence between sentences (playback slack)


def step_ms(tokens: int) -> float:
    xs = [t for t, _ in STEP_TABLE]
    i = min(max(1, bisect.bisect_left(xs, tokens)), len(xs) - 1)
    (x0, y0), (x1, y1) = STEP_TABLE[i - 1], STEP_TABLE[i]
    return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)


def item_tokens(text: str) -> tuple[int, int]:
    """(tokens per step, frames) of a design segment: cond row (style 6 + text markers 2 + words and
    punctuation, as the bench's word tokenizer counts) + frames, and the uncond row (frames)."""
    frames = estimate_frames(text)
    prefix = 8 + len(text.split()) + sum(c in ",.!?;:" for c in text)
    return prefix + 2 * frames, frames


def bucket_key(tokens: int, batch: int, frames: int) -> tuple[int, int, int]:
    """engine/runner.StepRunner.bucket_for's (token, batch, frame) bucket of a step (reveal width aside)."""
    def up(ladder: tuple[int, ...], n: int) -> int:
        i = bisect.bisect_left(ladder, n)
        return ladder[i] if i < len(ladder) else -1
    return up(TOKEN_BUCKETS, tokens + 1), up(BATCH_BUCKETS, batch), -(-frames // FRAME_QUANTUM) * FRAME_QUANTUM


class OldScheduler(Scheduler):
    """The rule before f3d17a1: while anything urgent is live, every step is capped at latency_batch_tokens."""

    def budget(self, order: list[Any], now: float) -> int:
        if self.latency_batch_tokens is not None and any(self._urgent(it, now) for it in order):
            return min(self.max_batch_tokens, self.latency_batch_tokens)
        return self.max_batch_tokens


@dataclass
class Host:
    """Host work per step in ms: fixed, plus packing when the batch changed (per item), plus codec decode of
    the items that finished (per call and per item)."""

    step_ms: float = 0.3
    pack_ms_per_item: float = 0.0
    decode_ms: float = 0.0
    decode_ms_per_item: float = 0.0
    decode_thread: bool = False  # decode off the step loop (in order, one at a time), as the worker now does

    def scaled(self, k: float) -> Host:
        return Host(self.step_ms, self.pack_ms_per_item * k, self.decode_ms * k, self.decode_ms_per_item * k,
                    self.decode_thread)


@dataclass(order=True)
class _Arrival:
    t: float
    seq: int
    rid: str = field(compare=False)
    tokens: int = field(compare=False)
    priority: int = field(compare=False)
    deadline: float | None = field(compare=False)


class Sim:
    def __init__(self, scheduler: Scheduler, clock: list[float], host: Host) -> None:
        self.s, self.clock, self.host = scheduler, clock, host
        self.arrivals: list[_Arrival] = []
        self.seq = 0
        self.done: dict[str, float] = {}
        self.on_done: dict[str, Any] = {}
        self.last_batch: tuple[str, ...] = ()
        self.frames: dict[str, int] = {}
        self.decoder_free_s = 0.0

    def submit(self, t: float, rid: str, tokens: int, priority: int, deadline: float | None = None,
               on_done: Any = None, frames: int = 0) -> None:
        self.seq += 1
        self.frames[rid] = frames
        heapq.heappush(self.arrivals, _Arrival(t, self.seq, rid, tokens, priority, deadline))
        if on_done is not None:
            self.on_done[rid] = on_done

    def run(self, until: float = 600.0) -> None:
        """Step until nothing is live or waiting."""
        while self.clock[0] < until:
            while self.arrivals and self.arrivals[0].t <= self.clock[0]:
                a = heapq.heappop(self.arrivals)
                self.s.add(a.rid, num_tokens=a.tokens, num_steps=NUM_STEP, priority=a.priority, deadline_s=a.deadline)
            plan = self.s.schedule()
            if not plan.batch:
                if not self.arrivals:
                    return
                self.clock[0] = self.arrivals[0].t
                continue
            KEYS[bucket_key(plan.num_tokens, len(plan.batch), max(self.frames[r] for r in plan.batch))] += 1
            ms = step_ms(plan.num_tokens) + self.host.step_ms
            if plan.batch != self.last_batch:
                ms += self.host.pack_ms_per_item * len(plan.batch)
            self.last_batch = plan.batch
            self.clock[0] += ms / 1000.0
            finished = self.s.complete_step(plan)
            if finished:
                decode_s = (self.host.decode_ms + self.host.decode_ms_per_item * len(finished)) / 1000.0
                if self.host.decode_thread:
                    self.decoder_free_s = max(self.decoder_free_s, self.clock[0]) + decode_s
                    done_s = self.decoder_free_s
                else:
                    self.clock[0] += decode_s
                    done_s = self.clock[0]
                for rid in finished:
                    self.done[rid] = done_s
                    cb = self.on_done.pop(rid, None)
                    if cb is not None:
                        cb(done_s)


# (row name, scheduler rule, decode in a thread, admit interval s): what changed, one step at a time
POLICIES = (("old", "old", False, 0.0), ("budget rule", "new", False, 0.0),
            ("+ decode thread", "new", True, 0.0), ("+ admit every 30 ms (now)", "new", True, 0.03))


def make_scheduler(policy: str, max_tokens: int, latency_tokens: int, clock: list[float],
                   admit_interval_s: float = 0.0) -> Scheduler:
    cls = OldScheduler if policy == "old" else Scheduler
    # max_batch_items 128: the runner's largest batch bucket (the worker passes it)
    return cls(max_batch_tokens=max_tokens, latency_batch_tokens=latency_tokens or None, max_batch_items=128,
               admit_interval_s=admit_interval_s, clock=lambda: clock[0])


def sim_load(policy: str, max_tokens: int, latency_tokens: int, host: Host, num: int = 1000,
             rate: float = 100.0, admit_interval_s: float = 0.0) -> dict[str, float]:
    clock = [0.0]
    sim = Sim(make_scheduler(policy, max_tokens, latency_tokens, clock, admit_interval_s), clock, host)
    for i in range(num):
        tokens, frames = item_tokens(SHORT_INPUTS[i % len(SHORT_INPUTS)])
        sim.submit(i / rate, f"r{i}", tokens, priority=0, frames=frames)
    sim.run()
    lat = np.array([sim.done[f"r{i}"] - i / rate for i in range(num)])
    return {"p50_s": float(np.percentile(lat, 50)), "p95_s": float(np.percentile(lat, 95)),
            "p99_s": float(np.percentile(lat, 99)), "wall_s": max(sim.done.values())}


def sim_agents(policy: str, max_tokens: int, latency_tokens: int, host: Host, n: int,
               words_per_s: float = 30.0, urgent_s: float = 0.5, admit_interval_s: float = 0.0) -> dict[str, float]:
    clock = [0.0]
    sched = make_scheduler(policy, max_tokens, latency_tokens, clock, admit_interval_s)
    sched.urgent_s = urgent_s
    sim = Sim(sched, clock, host)
    after_clause: list[float] = []
    underruns = [0]
    stall_total = [0.0]

    class Agent:
        def __init__(self, a: int) -> None:
            self.a, start = a, a / n  # agents start spread over one second
            sentences = REPLIES[a % len(REPLIES)]
            self.ready: list[float] = []  # the time each sentence's last word is sent
            words = 0
            for s in sentences:
                words += len(s.split())
                self.ready.append(start + (words - 1) / words_per_s)
            self.segs = [item_tokens(s) for s in sentences]
            self.play_start = self.sent_s = self.stall = 0.0

        def submit(self, k: int, t: float) -> None:
            deadline = None if k == 0 else self.play_start + self.stall + self.sent_s  # playback runs dry
            sim.submit(max(t, self.ready[k]), f"a{self.a}-{k}", self.segs[k][0], priority=0 if k == 0 else 1,
                       deadline=deadline, on_done=lambda done_t: self.finished(k, done_t), frames=self.segs[k][1])

        def finished(self, k: int, t: float) -> None:
            if k == 0:
                self.play_start = t
                after_clause.append(t - self.ready[0])
            else:
                dry = self.play_start + self.stall + self.sent_s
                if t > dry + 0.01:
                    underruns[0] += 1
                    self.stall += t - dry
                    stall_total[0] += t - dry
            self.sent_s += self.segs[k][1] / 25 + GAP_S
            if k + 1 < len(self.segs):
                self.submit(k + 1, t)  # the next segment starts once this one has audio

    for a in range(n):
        Agent(a).submit(0, 0.0)
    sim.run()
    fa = np.array(after_clause) * 1000.0
    return {"p50_ms": float(np.percentile(fa, 50)), "p95_ms": float(np.percentile(fa, 95)),
            "underruns": underruns[0], "stall_ms": stall_total[0] * 1000.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", default="1,25,50,100")
    p.add_argument("--load", type=int, default=1000)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--latency-tokens", type=int, default=4096)
    p.add_argument("--pack-ms-per-item", type=float, default=0.03)
    p.add_argument("--decode-ms", type=float, default=2.0)
    p.add_argument("--decode-ms-per-item", type=float, default=0.2)
    p.add_argument("--host-scale", default="0,1,2", help="comma-separated multipliers of the host overheads")
    p.add_argument("--calibrate", action="store_true", help="scan host scales for the old policy's load result")
    p.add_argument("--keys", action="store_true",
                   help="which CUDA-graph buckets the new policy's steps land in, and how many of those steps "
                        "the worker's start-up captures (runner.serving_keys) cover")
    args = p.parse_args()
    base = Host(0.3, args.pack_ms_per_item, args.decode_ms, args.decode_ms_per_item)
    if args.calibrate:
        print("H200 measured (old policy): load p50 4.244 s, p95 13.479 s, wall 20.0 s")
        for k in (0, 1, 2, 3, 4, 6, 8):
            r = sim_load("old", args.max_tokens, args.latency_tokens, base.scaled(k), args.load, args.rate)
            print(f"host x{k}: " + ", ".join(f"{key} {v:.3f}" for key, v in r.items()))
        return
    if args.keys:
        from realtime_tts.engine.runner import StepRunner

        host = base.scaled(4)
        for n in [int(x) for x in args.agents.split(",") if x]:
            sim_agents("new", args.max_tokens, args.latency_tokens, host, n, admit_interval_s=0.03)
        if args.load:
            sim_load("new", args.max_tokens, args.latency_tokens, host, args.load, args.rate, 0.03)
        runner: Any = StepRunner.__new__(StepRunner)  # only the bucket ladders: no model
        runner.token_buckets, runner.batch_buckets = TOKEN_BUCKETS, BATCH_BUCKETS
        warm = {(k.num_tokens, k.batch, k.frames) for k in runner.serving_keys(args.max_tokens - 1)}
        steps = sum(KEYS.values())
        covered = sum(c for k, c in KEYS.items() if k in warm)
        print(f"{len(KEYS)} distinct buckets over {steps} steps; serving_keys: {len(warm)} buckets, cover "
              f"{covered / steps:.1%} of the steps; buckets hit but not warmed:",
              sorted((k for k in KEYS if k not in warm), key=lambda k: -KEYS[k])[:10])
        return
    print(f"step model {STEP_TABLE}; host per step {base} × scale; max {args.max_tokens}, latency "
          f"{args.latency_tokens} tokens")
    for scale in [float(x) for x in args.host_scale.split(",")]:
        host = base.scaled(scale)
        thread = Host(host.step_ms, host.pack_ms_per_item, host.decode_ms, host.decode_ms_per_item, True)
        print(f"\n## host overhead x{scale:g}")
        print("| policy | N agents | after 1st sentence p50 / p95 ms | underruns | stall ms |")
        print("|---|---|---|---|---|")
        for n in [int(x) for x in args.agents.split(",") if x]:
            for name, policy, threaded, admit in POLICIES:
                r = sim_agents(policy, args.max_tokens, args.latency_tokens, thread if threaded else host, n,
                               admit_interval_s=admit)
                print(f"| {name} | {n} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} | {r['underruns']} "
                      f"| {r['stall_ms']:.0f} |")
        if args.load:
            print(f"\n| policy | load {args.load} @ {args.rate:g}/s: p50 / p95 / p99 s | wall s |")
            print("|---|---|---|")
            for name, policy, threaded, admit in POLICIES:
                r = sim_load(policy, args.max_tokens, args.latency_tokens, thread if threaded else host, args.load,
                             args.rate, admit)
                print(f"| {name} | {r['p50_s']:.3f} / {r['p95_s']:.3f} / {r['p99_s']:.3f} | {r['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
