"""Can any scheduler on this card serve the serving bench's agents? A lower bound on the work their deadlines need.

The agents are bench/omnivoice_serve.py's (each reply streamed word by word, the units cut by the real
SentenceBuffer, tokens as the worker counts them: omnivoice_sched_sim.reply_units / item_tokens). Only their first
turns are counted (arrivals ramped over --ramp-s, all of them speaking at once), a subset of the run's work, so
whatever they alone cannot fit, the whole run cannot either.

Every segment is a job: released when its text is complete; due when the bench's player needs it (the first
segment: the first sentence's end + --first-audio-ms, the latest the target allows; segment k: that first audio +
the estimated audio of the segments before it + the player's jitter); its work is its tokens × the diffusion
steps, in token-steps. Everything else is relaxed in the scheduler's favour: the card turns token-steps out at the
best rate its step staircase reaches (the cost file's bucket times, device time only: no host gaps, no codec, no
wait for a continuity prompt's codes), and a job may take any share of it at any moment. On such a card the
deadlines can all be met only if, for every window [r, d], the work released at or after r and due by d is at most
rate × (d − r). The table prints the largest such need over all windows against the rate: above 1.00x no
scheduler meets every deadline; at or below it the relaxed card could, the real one perhaps not.

A p95 target leaves 5% of the turns free to start late: --late-share drops, in each window, the turns with the
most work in it (their work entirely: the most lenient reading).

    .venv/bin/python bench/omnivoice_capacity_bound.py                  # 200, 250, 300 agents; writes results
    .venv/bin/python bench/omnivoice_capacity_bound.py --agents 250 --first-audio-ms 1000 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, git_commit, history_rows
from omnivoice_costs import CostFileError, load_costs
from omnivoice_sched_sim import JITTER_S, NUM_STEP, item_tokens, reply_units
from omnivoice_serve import REPLIES

from realtime_tts.service import estimate_audio_s

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Jobs:
    """One array entry per segment: release and due times (s), work (token-steps), the turn it belongs to."""

    release: np.ndarray
    due: np.ndarray
    work: np.ndarray
    turn: np.ndarray
    audio_s: float


def first_turns(n: int, *, continuity: bool, ramp_s: float = 4.0, words_per_s: float = 12.0,
                first_audio_s: float = 0.3, target_chars: int = 60, num_step: int = NUM_STEP) -> Jobs:
    """The first turns of n agents as the bench starts them (agent a at a × ramp_s / n, its reply
    REPLIES[a % len])."""
    shapes = [reply_units(r, words_per_s, target_chars) for r in REPLIES]
    release, due, work, turn = [], [], [], []
    audio = 0.0
    for a in range(n):
        start = a * ramp_s / n
        clause, units = shapes[a % len(shapes)]
        first_audio = start + clause + first_audio_s
        first_tokens, first_frames = item_tokens(units[0][1])
        played = 0.0
        for k, (at, text) in enumerate(units):
            ref = (units[0][1], first_frames) if continuity and k else None
            tokens = first_tokens if k == 0 else item_tokens(text, ref)[0]
            release.append(start + at)
            due.append(first_audio if k == 0 else first_audio + played + JITTER_S)
            work.append(tokens * num_step)
            turn.append(a)
            seconds = estimate_audio_s(text, engine="omnivoice")
            played += seconds
            audio += seconds
    return Jobs(np.array(release), np.array(due), np.array(work, dtype=float), np.array(turn), audio)


def peak_need(jobs: Jobs, late_turns: int = 0) -> tuple[float, float, float]:
    """The largest (work released in [r, d] and due by d) / (d − r) over every window, in token-steps per second,
    with the late_turns turns of most work in each window left out: (need, r, d)."""
    best = (0.0, 0.0, 0.0)
    num_turns = int(jobs.turn.max()) + 1
    for r in np.unique(jobs.release):
        released = jobs.release >= r
        for d in np.unique(jobs.due[jobs.due > r]):
            inside = released & (jobs.due <= d)
            if not inside.any():
                continue
            per_turn = np.bincount(jobs.turn[inside], weights=jobs.work[inside], minlength=num_turns)
            if late_turns:
                per_turn = np.sort(per_turn)[:-late_turns]
            need = float(per_turn.sum()) / (d - r)
            if need > best[0]:
                best = (need, float(r), float(d))
    return best


def rates(bucket_ms: tuple[tuple[int, float], ...], budget: int) -> dict[str, float]:
    """Token-steps per second of the card: the best bucket within the budget, the best of all, and the 2048
    bucket (the serving runs' mean step: latency_batch_tokens 1024 raised to its bucket)."""
    per = {tokens: 1000.0 * tokens / ms for tokens, ms in bucket_ms}
    return {f"best bucket <= {budget}": max(v for t, v in per.items() if t <= budget),
            "best bucket of all": max(per.values()),
            "2048 bucket": per[2048]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--costs", default=str(RESULTS / "h200_costs.json"), help="cost file (bench/omnivoice_costs.py)")
    p.add_argument("--agents", default="200,250,300")
    p.add_argument("--ramp-s", type=float, default=4.0)
    p.add_argument("--words-per-s", type=float, default=12.0)
    p.add_argument("--first-audio-ms", type=float, default=300.0, help="first audio after the first sentence")
    p.add_argument("--late-share", type=float, default=0.05, help="share of turns a p-quantile target lets start late")
    p.add_argument("--budget", type=int, default=4096, help="max_batch_tokens")
    p.add_argument("--out", default=str(RESULTS / "omnivoice_capacity_bound.md"))
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    try:
        model = load_costs(args.costs)
    except CostFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    card = rates(model.step.bucket_ms, args.budget)
    # the bench's p95 runs over both turns of every agent; all of the late ones may be first turns
    head = ("| agents | voice continuity | token-steps per s of audio | late turns left out | peak need, k token-steps/s "
            "(window s) | " + " | ".join(f"× {name} ({v / 1e3:.0f}k)" for name, v in card.items()) + " |")
    lines = [head, "|---" * (5 + len(card)) + "|"]
    summary = []
    for n in [int(x) for x in args.agents.split(",") if x]:
        for continuity in (False, True):
            jobs = first_turns(n, continuity=continuity, ramp_s=args.ramp_s, words_per_s=args.words_per_s,
                               first_audio_s=args.first_audio_ms / 1000.0)
            for late in sorted({0, int(args.late_share * 2 * n)}):
                need, r, d = peak_need(jobs, late)
                ratios = [need / v for v in card.values()]
                lines.append(f"| {n} | {'on' if continuity else 'off'} | {jobs.work.sum() / jobs.audio_s:.0f} | {late} "
                             f"| {need / 1e3:.0f} ({r:.2f}-{d:.2f}) | "
                             + " | ".join(f"**{x:.2f}x**" if x > 1 else f"{x:.2f}x" for x in ratios) + " |")
                print(lines[-1], flush=True)
                if n == 250 and late == 0:
                    summary.append(f"{'on' if continuity else 'off'} {ratios[0]:.2f}x")
    if args.no_write:
        return
    out = Path(args.out)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = git_commit(RESULTS.parents[1])
    cmd = "python bench/omnivoice_capacity_bound.py " + " ".join(sys.argv[1:])
    history = [*history_rows(out), f"| {when} | {commit} | {args.first_audio_ms:.0f} | {', '.join(summary)} |"]
    out.write_text(
        "# Capacity bound: the work the serving bench's agents need by their deadlines, against the card's rate\n\n"
        f"- command: `{cmd.strip()}`\n- machine: {cpu_model()} (a CPU computation; the rates are the H200's)\n"
        f"- costs: {Path(args.costs).name} ({model.device}, made at {model.provenance.get('commit')}, "
        f"{model.provenance.get('date')})\n- commit: {commit}\n- date: {when}\n"
        f"- workload: first turns only, ramp {args.ramp_s:g} s, {args.words_per_s:g} words/s, first audio "
        f"{args.first_audio_ms:.0f} ms after the first sentence, {NUM_STEP} steps\n\n"
        "How to read it (the script's docstring has the argument): each cell is the peak work needed per second "
        "over some window divided by a token-step rate of the card. Against its best bucket within the budget, or "
        "of any size: above 1.00x (bold) no scheduler meets every deadline on the card, however it orders or sizes "
        "its steps; at or below it a relaxed card (no host gaps, no codec, any share of it for any job) could, the "
        "real one perhaps not (the scheduler simulation, which reproduces the card's underruns, needs about 25% "
        "more than this bound at 250 agents with continuity). The 2048 column is the rate of steps that size, "
        "where the serving runs' mean step sits: above 1.00x there, steps that small cannot keep up.\n\n"
        + "\n".join(lines) + "\n\n## History\n\n| date | commit | first audio ms | 250 agents, no late turns: × best bucket "
        "<= budget |\n|---|---|---|---|\n" + "\n".join(history) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
