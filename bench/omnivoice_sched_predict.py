"""The scheduler simulation's prediction of a serving run from measured costs, nothing fitted, beside the card's
figures; and the defaults table it is used for (candidates of the server's scheduler knobs at the agents and
loads of issue 16). The sim itself: bench/omnivoice_sched_sim.py; the cost file: bench/omnivoice_costs.py.

    .venv/bin/python bench/omnivoice_sched_predict.py                    # prediction vs the H200 run (~15 s)
    .venv/bin/python bench/omnivoice_sched_predict.py --defaults         # + the candidates table (~3 min)
    .venv/bin/python bench/omnivoice_sched_predict.py --costs X.json --measured OUT/omnivoice_serve_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from omnivoice_costs import CostFileError, load_costs
from omnivoice_sched_sim import Cost, Knobs, sim_conversations, sim_load

from realtime_tts.config import load_config

RESULTS = Path(__file__).resolve().parent / "results"


def shown(path: str) -> str:
    """A path as the tables print it: relative to the repository when inside it."""
    p = Path(path).resolve()
    return str(p.relative_to(RESULTS.parents[1])) if p.is_relative_to(RESULTS.parents[1]) else str(p)


def knobs_of(server: dict[str, Any]) -> Knobs:
    """The serving run's server settings (its JSON's "server") as the sim's knobs."""
    return Knobs(policy=server.get("scheduler_policy", "class"), admit_ms=float(server.get("admit_interval_ms", 0)),
                 latency_batch_tokens=int(server.get("latency_batch_tokens", 1024)),
                 max_batch_tokens=int(server.get("max_batch_tokens", 6144)),
                 target_chars=server.get("target_chars"), admission_wait_ms=float(server.get("admission_wait_ms", 0)),
                 continuity=bool(server.get("voice_continuity", False)))


def conversations(knobs: Knobs, cost: Cost, n: int, bench: dict[str, Any]) -> dict[str, float]:
    return sim_conversations(knobs, cost, n, turns=int(bench.get("turns", 2)), gap_s=float(bench.get("gap_s", 2.0)),
                             barge_in=float(bench.get("barge_in", 0.2)), ramp_s=float(bench.get("ramp_s", 4.0)),
                             words_per_s=float(bench.get("words_per_s", 12.0)))


def _err(sim: float, card: float) -> str:
    return f"{100 * (sim / card - 1):+.0f}%" if card else "-"


def predict(cost: Cost, measured: dict[str, Any]) -> None:
    knobs = knobs_of(measured["server"])
    bench = measured.get("bench", {})
    print(f"Knobs (the run's server settings): {knobs}\n")
    print("| N agents | source | after 1st sentence p50 / p95 ms | p95 error | turns with underrun | refused turns "
          "| steps | GPU in steps s | codec GPU s | segments |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in measured["agents"]:
        n, row, srv = run["agents"], run["row"], run["server"]
        r = conversations(knobs, cost, n, bench)
        print(f"| {n} | card | {row['p50_after_clause_ms']:.0f} / {row['p95_after_clause_ms']:.0f} | "
              f"| {row['turns_with_underrun']} | {row.get('refused', 0)} | {srv['steps']:.0f} | {srv['gpu_busy_s']:.2f} "
              f"| {srv['codec_s']:.2f} | {srv['segments']:.0f} |")
        print(f"| {n} | sim | {r['p50_ms']:.0f} / {r['p95_ms']:.0f} | **{_err(r['p95_ms'], row['p95_after_clause_ms'])}** "
              f"| {r['turns_with_underrun']} | {r['refused_turns']} | {r['steps']} ({_err(r['steps'], srv['steps'])}) "
              f"| {r['gpu_s']:.2f} ({_err(r['gpu_s'], srv['gpu_busy_s'])}) "
              f"| {r['codec_s']:.2f} ({_err(r['codec_s'], srv['codec_s'])}) | {r['segments']} |", flush=True)
    print("\n| load | source | served / refused | p50 / p95 s | p95 error | steps | GPU in steps s | codec GPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for run in measured["loads"]:
        num, rate, row, srv = run["requests"], run["rate_per_s"], run["row"], run["server"]
        r = sim_load(knobs, cost, num, rate)
        print(f"| {num} @ {rate:g}/s | card | {row['served']} / {row['refused']} | {row['p50_s']:.3f} / "
              f"{row['p95_s']:.3f} | | {srv['steps']:.0f} | {srv['gpu_busy_s']:.2f} | {srv['codec_s']:.2f} |")
        print(f"| {num} @ {rate:g}/s | sim | {r['served']} / {r['refused']} | {r['p50_s']:.3f} / {r['p95_s']:.3f} "
              f"| **{_err(r['p95_s'], row['p95_s'])}** | {r['steps']} ({_err(r['steps'], srv['steps'])}) "
              f"| {r['gpu_s']:.2f} ({_err(r['gpu_s'], srv['gpu_busy_s'])}) "
              f"| {r['codec_s']:.2f} ({_err(r['codec_s'], srv['codec_s'])}) |", flush=True)


def sensitivity(cost: Cost, measured: dict[str, Any], scales: list[float]) -> None:
    """The prediction with the step-time model off by a few percent (its own measurement error): how much of a
    miss a small cost error explains."""
    knobs = knobs_of(measured["server"])
    bench = measured.get("bench", {})
    ns = [run["agents"] for run in measured["agents"]]
    loads = [(run["requests"], run["rate_per_s"]) for run in measured["loads"]]
    print("| step times × | " + " | ".join(f"N={n}: p95 ms, underrun turns" for n in ns) + " | "
          + " | ".join(f"{k} @ {r:g}/s: p95 s (refused)" for k, r in loads) + " |")
    print("|---" * (1 + len(ns) + len(loads)) + "|")
    for s in scales:
        c = replace(cost, engine_scale=s)
        cells = [f"{r['p95_ms']:.0f}, {r['turns_with_underrun']}" for r in
                 (conversations(knobs, c, n, bench) for n in ns)]
        cells += [f"{r['p95_s']:.2f} ({r['refused']})" for r in (sim_load(knobs, c, k, rt) for k, rt in loads)]
        print(f"| {s:g} | " + " | ".join(cells) + " |", flush=True)


# Candidates for the server's defaults at 250 agents (one change at a time from today's, then combinations);
# each is (label, changes to the knobs). Today's: the server's config defaults (today_knobs).
CANDIDATES: list[tuple[str, dict[str, Any]]] = [
    ("today's defaults", {}),
    ("max_batch_tokens 3072", {"max_batch_tokens": 3072}),
    ("max_batch_tokens 3584", {"max_batch_tokens": 3584}),
    ("max_batch_tokens 4096", {"max_batch_tokens": 4096}),
    ("max_batch_tokens 5120", {"max_batch_tokens": 5120}),
    ("max_batch_tokens 8192", {"max_batch_tokens": 8192}),
    ("latency_batch_tokens 512", {"latency_batch_tokens": 512}),
    ("latency_batch_tokens 2048", {"latency_batch_tokens": 2048}),
    ("latency_batch_tokens 0 (off)", {"latency_batch_tokens": 0}),
    ("admit_interval_ms 10", {"admit_ms": 10.0}),
    ("deadline policy (first_deadline 0.1 s)", {"policy": "deadline"}),
    ("deadline policy + first_deadline 0.2 s", {"policy": "deadline", "first_deadline_s": 0.2}),
    ("target_chars 40", {"target_chars": 40}),
    ("target_chars 100", {"target_chars": 100}),
    ("admission_wait_ms 500", {"admission_wait_ms": 500.0}),
    ("max 4096 + latency 2048", {"max_batch_tokens": 4096, "latency_batch_tokens": 2048}),
    ("max 5120 + latency 2048", {"max_batch_tokens": 5120, "latency_batch_tokens": 2048}),
    ("max 4096 + latency 512", {"max_batch_tokens": 4096, "latency_batch_tokens": 512}),
]


def today_knobs() -> Knobs:
    """The server's defaults as the sim's knobs (read from config.py, so they cannot go stale: this was a literal
    that still said max_batch_tokens 6144 after session 8 made it 4096)."""
    cfg = load_config({})
    o = cfg.omnivoice
    return Knobs(policy=o.scheduler_policy, admit_ms=float(o.admit_interval_ms), latency_batch_tokens=o.latency_batch_tokens,
                 max_batch_tokens=o.max_batch_tokens, target_chars=cfg.text.target_chars,
                 admission_wait_ms=float(o.admission_wait_ms), continuity=o.voice_continuity)


def defaults(cost: Cost, bench: dict[str, Any], ns: list[int], loads: list[tuple[int, float]],
             base: Knobs, only: list[str] | None = None) -> None:
    print(f"Base: {base}\n")
    print("| candidate | " + " | ".join(f"N={n}: p50 / p95 ms, underrun turns" for n in ns) + " | "
          + " | ".join(f"{k} @ {r:g}/s: p95 s (refused)" for k, r in loads) + " |")
    print("|---" * (1 + len(ns) + len(loads)) + "|")
    for label, changes in CANDIDATES:
        if only and label not in only:
            continue
        k = replace(base, **changes)
        cells = [f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f}, {r['turns_with_underrun']}"
                 + (f" ({r['refused_turns']} refused)" if r["refused_turns"] else "")
                 for r in (conversations(k, cost, n, bench) for n in ns)]
        cells += [f"{r['p95_s']:.2f} ({r['refused']})" for r in (sim_load(k, cost, num, rate) for num, rate in loads)]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--costs", default=str(RESULTS / "h200_costs.json"), help="cost file (bench/omnivoice_costs.py)")
    p.add_argument("--measured", default=str(RESULTS / "omnivoice_serve_h200.json"),
                   help="the serving run's JSON (bench/omnivoice_serve.py) to compare with")
    p.add_argument("--no-predict", action="store_true", help="skip the comparison with the card")
    p.add_argument("--sensitivity", default="0.95,1,1.05", help="step-time scales for the sensitivity table ('' = skip)")
    p.add_argument("--defaults", action="store_true", help="the candidates table for the server's defaults")
    p.add_argument("--continuity", choices=("on", "off"), default="on",
                   help="--defaults: voice continuity as today's server (on) or as issue 16's H200 run (off)")
    p.add_argument("--agents", default="200,250,300")
    p.add_argument("--loads", default="1500@150,2000@200")
    p.add_argument("--only", default="", help="--defaults: comma-separated candidate labels")
    p.add_argument("--engine-scale", type=float, default=1.0,
                   help="--defaults: step times × this (robustness: the card's steps ran 2-6%% longer than the "
                        "cost file's in issue 16's run)")
    args = p.parse_args()
    try:
        model = load_costs(args.costs)
    except CostFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    cost = Cost.measured(model)
    measured = json.loads(Path(args.measured).read_text())
    print(f"Costs: {shown(args.costs)} ({model.device}; made by `{model.provenance['command']}` at "
          f"{model.provenance['commit']}, {model.provenance['date']}). Measured: {shown(args.measured)} "
          f"({measured.get('date')}, {measured.get('commit')}).\n")
    if not args.no_predict:
        predict(cost, measured)
        scales = [float(x) for x in args.sensitivity.split(",") if x]
        if scales:
            print("\nSensitivity: the same runs with the step-time model scaled\n")
            sensitivity(cost, measured, scales)
    if args.defaults:
        ns = [int(x) for x in args.agents.split(",") if x]
        loads = [(int(a), float(b)) for a, b in (x.split("@") for x in args.loads.split(",") if x)]
        base = replace(today_knobs(), continuity=args.continuity == "on")
        print(f"\n### Candidates (sim, measured costs, step times x{args.engine_scale:g}; voice continuity "
              f"{args.continuity})\n")
        defaults(replace(cost, engine_scale=args.engine_scale), measured.get("bench", {}), ns, loads, base,
                 [x for x in args.only.split(",") if x] or None)


if __name__ == "__main__":
    main()
