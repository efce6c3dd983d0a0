"""CPU simulation of one OmniVoice worker under the serving bench's arrival patterns: the real Scheduler
(engine/scheduler.py) on a simulated clock, steps timed by a model fitted to the H200 step times.

No GPU, no model: it answers "what does the scheduling policy do to first audio / latency / underruns",
one change at a time, given a step-time model and a model of the host's work. Default host model: the
slot runner (per-item state on the GPU, no re-pack, no host sync per step): 0.3 ms + 0.01 ms × items per
step, codec decode on its own stream (3 ms + 0.3 ms per item, one decode at a time, never blocking steps).
Steps pay for their CUDA-graph token bucket (runner.TOKEN_BUCKETS), not their exact token count.

The agents follow the service as it is: a reply's segments start as their sentence completes (lookahead 2:
the third waits until the first has been sent); a later segment's deadline is when the audio already sent
runs dry, or none before the first audio (--later-deadline estimate: the service's planned estimate).

    .venv/bin/python bench/omnivoice_sched_sim.py                     # policies × (agents, load)
    .venv/bin/python bench/omnivoice_sched_sim.py --agents 100,110,120 --host-scale 1,2 --model-error 1,1.25
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from realtime_tts.engine.runner import TOKEN_BUCKETS
from realtime_tts.engine.scheduler import Scheduler, StepTimeModel
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
GAP_S = 0.24  # pacing.gap_ms: silence between sentences (playback slack)
LOOKAHEAD = 2  # service._LOOKAHEAD["concurrent"]


def table_ms(tokens: float) -> float:
    xs = [t for t, _ in STEP_TABLE]
    i = min(max(1, bisect.bisect_left(xs, tokens)), len(xs) - 1)
    (x0, y0), (x1, y1) = STEP_TABLE[i - 1], STEP_TABLE[i]
    return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)


BUCKETS = list(TOKEN_BUCKETS)  # --bucket-step replaces it (what finer graph buckets would give)


def bucket(tokens: int) -> int:
    """The CUDA-graph token bucket a step of this many tokens replays (runner.bucket_key)."""
    i = bisect.bisect_left(BUCKETS, tokens)
    return BUCKETS[i] if i < len(BUCKETS) else tokens


def engine_ms(tokens: int) -> float:
    return table_ms(bucket(tokens))


def calibration(host_ms: float) -> tuple[tuple[int, float], ...]:
    """What the worker would hand the scheduler: the bucket staircase of the step table in seconds, plus a
    fixed host guess per step (the per-item host part is left out on purpose: the model is not exact)."""
    return StepTimeModel.from_buckets([(b, table_ms(b) / 1000.0) for b in BUCKETS], host_ms / 1000.0).points


def item_tokens(text: str) -> tuple[int, int]:
    """(tokens per step, frames) of a design segment: cond row (style 6 + text markers 2 + words and
    punctuation, as the bench's word tokenizer counts) + frames, and the uncond row (frames)."""
    frames = estimate_frames(text)
    prefix = 8 + len(text.split()) + sum(c in ",.!?;:" for c in text)
    return prefix + 2 * frames, frames


@dataclass
class Host:
    """Host work in ms: per step (fixed + per item), per decode (fixed + per item). Decode runs on its own
    stream, one at a time, never blocking steps."""

    step_ms: float = 0.3
    step_ms_per_item: float = 0.01
    decode_ms: float = 3.0
    decode_ms_per_item: float = 0.3

    def scaled(self, k: float) -> Host:
        return Host(self.step_ms * k, self.step_ms_per_item * k, self.decode_ms * k, self.decode_ms_per_item * k)


@dataclass(order=True)
class _Arrival:
    t: float
    seq: int
    rid: str = field(compare=False)
    tokens: int = field(compare=False)
    priority: int = field(compare=False)
    deadline: Callable[[float], float | None] = field(compare=False)


class Sim:
    def __init__(self, scheduler: Scheduler, clock: list[float], host: Host, engine_scale: float = 1.0) -> None:
        self.s, self.clock, self.host, self.engine_scale = scheduler, clock, host, engine_scale
        self.arrivals: list[_Arrival] = []
        self.seq = 0
        self.done: dict[str, float] = {}
        self.on_done: dict[str, Callable[[float], None]] = {}
        self.priority: dict[str, int] = {}
        self.decoder_free_s = 0.0
        self.steps = 0
        self.step_tokens = 0
        self.busy_s = 0.0

    def submit(self, t: float, rid: str, tokens: int, priority: int,
               deadline: Callable[[float], float | None] = lambda t: None,
               on_done: Callable[[float], None] | None = None) -> None:
        self.seq += 1
        self.priority[rid] = priority
        heapq.heappush(self.arrivals, _Arrival(t, self.seq, rid, tokens, priority, deadline))
        if on_done is not None:
            self.on_done[rid] = on_done

    def _decode(self, rids: list[str]) -> None:
        h = self.host
        self.decoder_free_s = (max(self.decoder_free_s, self.clock[0])
                               + (h.decode_ms + h.decode_ms_per_item * len(rids)) / 1000.0)
        for rid in rids:
            self.done[rid] = self.decoder_free_s
            cb = self.on_done.pop(rid, None)
            if cb is not None:
                cb(self.decoder_free_s)

    def run(self, until: float = 600.0) -> None:
        """Step until nothing is live or waiting."""
        while self.clock[0] < until:
            while self.arrivals and self.arrivals[0].t <= self.clock[0]:
                a = heapq.heappop(self.arrivals)
                self.s.add(a.rid, num_tokens=a.tokens, num_steps=NUM_STEP, priority=a.priority,
                           deadline_s=a.deadline(a.t))
            plan = self.s.schedule()
            if not plan.batch:
                if not self.arrivals:
                    return
                self.clock[0] = self.arrivals[0].t
                continue
            ms = engine_ms(plan.num_tokens) * self.engine_scale + self.host.step_ms \
                + self.host.step_ms_per_item * len(plan.batch)
            self.clock[0] += ms / 1000.0
            self.steps += 1
            self.step_tokens += plan.num_tokens
            self.busy_s += ms / 1000.0
            finished = self.s.complete_step(plan)
            if finished:  # the worker decodes first segments first, then the rest (worker._retire)
                first = [r for r in finished if self.priority[r] == 0]
                rest = [r for r in finished if self.priority[r] != 0]
                for group in (first, rest):
                    if group:
                        self._decode(group)


def sim_load(make: Callable[[list[float]], Scheduler], host: Host, num: int = 1000, rate: float = 100.0,
             engine_scale: float = 1.0) -> dict[str, float]:
    clock = [0.0]
    sim = Sim(make(clock), clock, host, engine_scale)
    for i in range(num):
        tokens, _ = item_tokens(SHORT_INPUTS[i % len(SHORT_INPUTS)])
        sim.submit(i / rate, f"r{i}", tokens, priority=0)
    sim.run()
    lat = np.array([sim.done[f"r{i}"] - i / rate for i in range(num)])
    return {"p50_s": float(np.percentile(lat, 50)), "p95_s": float(np.percentile(lat, 95)),
            "p99_s": float(np.percentile(lat, 99)), "wall_s": max(sim.done.values()),
            "steps": sim.steps, "tokens_per_step": sim.step_tokens / max(1, sim.steps)}


def sim_agents(make: Callable[[list[float]], Scheduler], host: Host, n: int, words_per_s: float = 30.0,
               later_deadline: str = "today", engine_scale: float = 1.0, sentences: int = 3) -> dict[str, float]:
    clock = [0.0]
    sim = Sim(make(clock), clock, host, engine_scale)
    num_sentences = sentences

    class Agent:
        def __init__(self, a: int) -> None:
            self.a, start = a, a / n  # agents start spread over one second
            sentences = REPLIES[a % len(REPLIES)][:num_sentences]
            self.ready: list[float] = []  # the time each sentence's last word is sent
            words = 0
            for s in sentences:
                words += len(s.split())
                self.ready.append(start + (words - 1) / words_per_s)
            self.segs = [item_tokens(s) for s in sentences]
            self.dur = [f / 25 + GAP_S for _, f in self.segs]  # audio the client plays per segment
            self.done: list[float | None] = [None] * len(sentences)
            self.sent: list[float | None] = [None] * len(sentences)  # emitted in order by the service

        def deadline(self, k: int, t: float) -> float | None:
            if k == 0:
                return None
            first = self.sent[0] if self.sent[0] is not None and self.sent[0] <= t else None
            if later_deadline == "full":  # first audio (or its target), then all the audio before this one
                return (first if first is not None else self.ready[0] + 0.3) + sum(self.dur[:k])
            if first is not None:  # service._segment_request: when the audio sent so far runs dry
                out = sum(d for d, s in zip(self.dur, self.sent) if s is not None and s <= t)
                return t + max(0.0, out - (t - first))
            if later_deadline == "planned":  # before first audio: its target, then the audio before this one
                return self.ready[0] + 0.3 + sum(self.dur[:k])
            return None

        def submit(self, k: int, t: float) -> None:
            sim.submit(t, f"a{self.a}-{k}", self.segs[k][0], priority=0 if k == 0 else 1,
                       deadline=lambda at: self.deadline(k, at), on_done=lambda done_t: self.finished(k, done_t))

        def finished(self, k: int, t: float) -> None:
            self.done[k] = t
            for j in range(len(self.segs)):  # segments are sent in order
                if self.sent[j] is None:
                    if self.done[j] is None:
                        break
                    sent = max(t, self.sent[j - 1] or 0.0) if j else t
                    self.sent[j] = sent
                    # lookahead: segment j + LOOKAHEAD may start once segment j has been sent
                    if j + LOOKAHEAD < len(self.segs):
                        self.submit(j + LOOKAHEAD, max(self.ready[j + LOOKAHEAD], sent))

    agents = [Agent(a) for a in range(n)]
    for ag in agents:
        for k in range(min(LOOKAHEAD, len(ag.segs))):
            ag.submit(k, ag.ready[k])
    sim.run()
    after_clause, underruns, stall_total = [], 0, 0.0
    for ag in agents:
        sent = [s for s in ag.sent if s is not None]
        assert len(sent) == len(ag.segs)
        after_clause.append(sent[0] - ag.ready[0])
        stall, played = 0.0, 0.0
        for k, s in enumerate(sent):
            dry = sent[0] + stall + played
            if k and s > dry + 0.01:
                underruns += 1
                stall += s - dry
            played += ag.dur[k]
        stall_total += stall
    fa = np.array(after_clause) * 1000.0
    return {"p50_ms": float(np.percentile(fa, 50)), "p95_ms": float(np.percentile(fa, 95)),
            "max_ms": float(fa.max()), "underruns": underruns, "stall_ms": stall_total * 1000.0,
            "steps": sim.steps, "tokens_per_step": sim.step_tokens / max(1, sim.steps)}


# (row, Scheduler keyword arguments): one change at a time from the policy the worker runs today
def policies(model: tuple[tuple[int, float], ...], first_s: float) -> list[tuple[str, dict[str, Any]]]:
    now = {"latency_batch_tokens": 4096, "admit_interval_s": 0.03}
    dl = {"step_model": model, "first_deadline_s": first_s, "latency_batch_tokens": 4096}
    return [
        ("1 today: classes + 2 s aging, latency budget 4096, admit every 30 ms", now),
        ("2 today, admit at the next step", {**now, "admit_interval_s": 0.0}),
        ("3 deadline policy (slack order + step budget from the model), admit every 30 ms",
         {**dl, "admit_interval_s": 0.03}),
        ("4 deadline policy, admit at the next step", dl),
        ("5 = 4, busy step for urgency 2048 tokens", {**dl, "latency_batch_tokens": 2048}),
        ("6 = 5 + demand budget (throughput by each deadline)",
         {**dl, "latency_batch_tokens": 2048, "demand_budget": True}),
    ]


def make_factory(kwargs: dict[str, Any], max_tokens: int) -> Callable[[list[float]], Scheduler]:
    # max_batch_items 128: the runner's largest batch bucket (the worker passes it)
    return lambda clock: Scheduler(max_batch_tokens=max_tokens, max_batch_items=128, clock=lambda: clock[0],
                                   **kwargs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agents", default="1,25,50,100")
    p.add_argument("--load", type=int, default=1000)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--max-tokens", type=int, default=16384)
    p.add_argument("--first-s", type=float, default=0.1, help="scheduler first_deadline_s (deadline policy)")
    p.add_argument("--host-scale", default="1", help="comma-separated multipliers of the host work")
    p.add_argument("--model-error", default="1",
                   help="comma-separated true/predicted engine step time ratios (the scheduler's model is off)")
    p.add_argument("--later-deadline", choices=("today", "planned", "full"), default="today",
                   help="deadline of a reply's later segment. today (service now): when the audio already sent "
                        "runs dry, none before the first audio; planned: today plus an estimate before the first "
                        "audio (first audio at 0.3 s, then the earlier segments' audio); full: first audio (or "
                        "0.3 s) + the estimated audio of every earlier segment, sent or still generating")
    p.add_argument("--only", default="", help="comma-separated row numbers (1-based) of the policy table")
    p.add_argument("--bucket-step", type=int, default=0,
                   help="token buckets every this many tokens instead of runner.TOKEN_BUCKETS (what-if)")
    p.add_argument("--bound", action="store_true",
                   help="add a row per N: the agents' first segments alone (no later segments) under policy row 5: "
                        "what first audio is without any other work on this step model")
    args = p.parse_args()
    if args.bucket_step:
        BUCKETS[:] = range(args.bucket_step, 65536 + 1, args.bucket_step)
    host0 = Host()
    model = calibration(host0.step_ms + 0.3)  # fixed host work plus ~30 items' worth
    rows = policies(model, args.first_s)
    bound_policy = rows[4][1]
    if args.only:
        rows = [rows[int(i) - 1] for i in args.only.split(",")]
    print(f"step model {STEP_TABLE} at the token bucket; host {host0} × scale; max {args.max_tokens} tokens; "
          f"later-segment deadline before first audio: {args.later_deadline}")
    for scale in [float(x) for x in args.host_scale.split(",")]:
        for err in [float(x) for x in args.model_error.split(",")]:
            host = host0.scaled(scale)
            print(f"\n## host work x{scale:g}, engine step time x{err:g} of the scheduler's model")
            print("| policy | N agents | after 1st sentence p50 / p95 / max ms | underruns | stall ms | steps "
                  "| tokens/step |")
            print("|---|---|---|---|---|---|---|")
            for n in [int(x) for x in args.agents.split(",") if x]:
                for name, kw in rows:
                    r = sim_agents(make_factory(kw, args.max_tokens), host, n, later_deadline=args.later_deadline,
                                   engine_scale=err)
                    print(f"| {name} | {n} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['max_ms']:.0f} "
                          f"| {r['underruns']} | {r['stall_ms']:.0f} | {r['steps']} | {r['tokens_per_step']:.0f} |",
                          flush=True)
                if args.bound:
                    r = sim_agents(make_factory(bound_policy, args.max_tokens), host, n, engine_scale=err,
                                   sentences=1)
                    print(f"| bound: first segments alone | {n} | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} / "
                          f"{r['max_ms']:.0f} | - | - | {r['steps']} | {r['tokens_per_step']:.0f} |", flush=True)
            if args.load:
                print(f"\n| policy | load {args.load} @ {args.rate:g}/s: p50 / p95 / p99 s | wall s | steps "
                      "| tokens/step |")
                print("|---|---|---|---|---|")
                for name, kw in rows:
                    r = sim_load(make_factory(kw, args.max_tokens), host, args.load, args.rate, err)
                    print(f"| {name} | {r['p50_s']:.3f} / {r['p95_s']:.3f} / {r['p99_s']:.3f} | {r['wall_s']:.1f} "
                          f"| {r['steps']} | {r['tokens_per_step']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
