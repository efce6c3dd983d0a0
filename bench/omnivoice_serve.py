"""Serving benchmark of the OmniVoice engine through the real server (issue 5 item 4, serving tables):

- agents: N simulated voice agents, each streaming a 3-sentence reply word by word at LLM pace into
  WS /v1/stream/text and "playing" the audio in real time → p50/p95 first audio (from the first text sent)
  and underruns (the player ran dry mid-reply) per N. N=1 is the idle-server first-audio figure.
- load: K short /v1/audio/speech requests offered at R req/s → served, p50/p95/p99 latency.
- server side, per run: what the server's /metrics counted during it (steps run, step seconds: mean and
  percentiles read off the histogram, mean batch items per segment, CUDA-graph hits/misses), so a GPU run
  tells where the time went. Tokens per step are not among the metrics.

Starts `realtime-tts serve --model CKPT` itself (or uses --url), prints tables, writes
OUT/<name>.md (command, machine, versions, date), and for the scheduler simulation OUT/<name>.json (the server's
settings, each run's figures and server-side counters, the worker's start-up step times and activity lines read
from the server's log, OUT/<name>.server.log) → `bench/omnivoice_costs.py --serve OUT/<name>.json` makes the
sim's cost file.

    .venv/bin/python bench/omnivoice_serve.py --build tiny --agents 1,4 --load 40 --rate 10   # CPU smoke
    python bench/omnivoice_serve.py --build full --word-tokenizer --agents 1,25,50,100 --load 1000 --rate 100
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import local_server
from load import (  # the load generator (bench/load.py) owns the texts, the runs and the scrapes
    REPLIES,
    SHORT_INPUTS,
    AgentConfig,
    commit,
    device_name,
    measured,
    profile_table,
    raise_fd_limit,
    run_agents,
    run_speech,
    server_table,
    versions,
)
from omnivoice_costs import parse_activity, parse_step_times, run_activity

from realtime_tts.cli import options

REPO = Path(__file__).resolve().parents[1]
__all__ = ["REPLIES", "SHORT_INPUTS"]  # bench/omnivoice_sched_sim.py takes the serving texts from here


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ckpt", help="OmniVoice checkpoint directory")
    p.add_argument("--build", choices=("tiny", "full"), help="build a random checkpoint of this size first")
    p.add_argument("--word-tokenizer", action="store_true",
                   help="with --build: ~1 token per word like Qwen's BPE on English (the byte-level test "
                        "tokenizer gives ~4x more tokens); uses bench/omnivoice_bench.py's tokenizer")
    p.add_argument("--url", help="use a running server instead of starting one")
    p.add_argument("--server-args", default="", help="extra `serve` flags, e.g. '--device cpu'")
    p.add_argument("--agents", default="1,4", help="comma-separated agent counts")
    p.add_argument("--words-per-s", type=float, default=30.0, help="LLM pace (words per second; ~45 tokens/s)")
    p.add_argument("--turns", type=int, default=1, help="turns per agent (each a /v1/stream/text reply)")
    p.add_argument("--gap-s", type=float, default=2.0, help="the user's turn between an agent's replies")
    p.add_argument("--barge-in", type=float, default=0.0, help="fraction of turns the user interrupts")
    p.add_argument("--ramp-s", type=float, default=1.0, help="agents' first turns start spread over this long")
    p.add_argument("--load", default="40", help="requests in the load test, comma-separated runs (0 = skip)")
    p.add_argument("--rate", default="10", help="offered requests per second, one per --load run")
    p.add_argument("--num-step", type=int, default=None,
                   help="num_step on every request (default: none, the server chooses: its num_step, fewer under load)")
    p.add_argument("--protocol", choices=("simple", "session", "auto"), default="simple",
                   help="agents' WS mode (simple: comparable with the earlier runs in bench/results)")
    p.add_argument("--name", default="omnivoice_serve", help="results file stem")
    p.add_argument("--out-dir", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    p.add_argument("--profile-web", action="store_true",
                   help="profile the server's event loop (serve --profile-web) into OUT/<name>.web_profile.txt and "
                        "put its top 30 functions in the report (cProfile slows the loop: a separate run)")
    p.add_argument("--profile-worker", action="store_true",
                   help="the workers sample their threads' stacks over the server's life (serve --profile-worker) "
                        "into OUT/<name>.worker<N>.txt, written when the server stops")
    args = p.parse_args()
    profile = Path(args.out_dir).resolve() / f"{args.name}.web_profile.txt" \
        if args.profile_web and args.url is None else None

    proc = None
    web_pid = None
    ckpt = args.ckpt
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / f"{args.name}.server.log"
    server_log = None
    if args.url is None:
        if args.build:
            from realtime_tts.model.checkpoint import build_random_checkpoint

            ckpt = ckpt or tempfile.mkdtemp(prefix=f"omnivoice-{args.build}-")
            t0 = time.perf_counter()
            import torch  # the bench process, not the server: draw the random weights where it is fast

            build_random_checkpoint(ckpt, size=args.build, seed=0,
                                    device="cuda" if torch.cuda.is_available() else None)
            if args.word_tokenizer:
                sys.path.insert(0, str(REPO / "bench"))
                from omnivoice_bench import write_word_tokenizer

                write_word_tokenizer(Path(ckpt))
            print(f"built {args.build} checkpoint in {time.perf_counter() - t0:.1f} s: {ckpt}", flush=True)
        if not ckpt:
            raise SystemExit("--ckpt DIR or --build tiny|full (or --url) is required")
        t0 = time.perf_counter()
        port = local_server.free_port()
        raise_fd_limit()  # thousands of connections in flight, here and in the server (it inherits the limit)
        server_log = open(log_path, "wb")  # noqa: SIM115 — the server writes it until the end of the run
        proc = local_server.start_server(port, ["--host", "127.0.0.1", "--model", ckpt, *args.server_args.split(),
                                                *(["--profile-web", str(profile)] if profile is not None else []),
                                                *(["--profile-worker", str(out_dir.resolve() / args.name)]
                                                  if args.profile_worker else [])],
                                         output=server_log)
        url = f"http://127.0.0.1:{port}"
        web_pid = proc.pid
        print(f"server healthy in {time.perf_counter() - t0:.1f} s", flush=True)
    else:
        url = args.url.rstrip("/")
    ws_url = url.replace("http", "ws", 1)
    params: dict[str, Any] = {"num_step": args.num_step} if args.num_step is not None else {}
    agent_rows: list[dict[str, Any]] = []
    agent_server: list[tuple[str, dict[str, float]]] = []
    # bench/load.py's agents in this bench's shape: word by word at a fixed pace, simple mode (the shape of the
    # earlier tables and of bench/omnivoice_sched_sim.py), a fixed user turn, barge-ins 0.5-3 s into playback
    conv = AgentConfig(turns=args.turns, pace=args.words_per_s, jitter=False, granularity="word",
                       barge_in=args.barge_in, barge_after_s=(0.5, 3.0), gap_s=(args.gap_s, args.gap_s),
                       protocol=args.protocol, params=params, ramp_s=args.ramp_s)
    warm = AgentConfig(turns=1, pace=args.words_per_s, jitter=False, granularity="word", protocol=args.protocol,
                       params=params, gap_s=(0.0, 0.0))
    loads = [(int(k), float(r)) for k, r in zip(args.load.split(","), args.rate.split(","), strict=True) if int(k)]
    load_rows: list[tuple[dict[str, Any], dict[str, float]]] = []
    windows: list[tuple[float, float]] = []  # each run's wall-clock span, agents then loads (the activity lines')
    try:
        asyncio.run(run_agents(ws_url, 1, warm))  # warm-up: first-use costs
        for n in [int(x) for x in args.agents.split(",") if x]:
            t_run = time.time()
            row, server = measured(url, run_agents(ws_url, n, conv), web_pid)
            windows.append((t_run, time.time()))
            agent_rows.append(row)
            agent_server.append((f"{n} agents", server))
            print("agents", json.dumps(row), "server", json.dumps(server), flush=True)
        for num, rate in loads:
            t_run = time.time()
            load_row, load_server = measured(url, run_speech(url, num, rate, params, shape="short"), web_pid)
            windows.append((t_run, time.time()))
            load_rows.append((load_row, load_server))
            print("load", json.dumps(load_row), "server", json.dumps(load_server), flush=True)
        health = httpx.get(url + "/health", timeout=10).json()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
        if server_log is not None:
            server_log.close()

    lines = [
        "# OmniVoice serving benchmark", "",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPU cores, {device_name()}, Python {platform.python_version()}",
        f"- versions: {versions()}",
        f"- checkpoint: {ckpt or args.url} (random weights); num_step {args.num_step or 'none sent: the server chooses'}; LLM pace {args.words_per_s} words/s",
        f"- workers at the end: {json.dumps(health.get('engines', {}).get('omnivoice', {}).get('workers'))}",
        "", "## Agents streaming 3-sentence replies into WS /v1/stream/text, playing in real time", "",
        (f"{conv.turns} turn(s) per agent, {args.gap_s:g} s of user turn between replies (after the reply has "
         f"played), {100 * conv.barge_in:.0f}% of turns interrupted by the user (the agent sends cancel with "
         f"played_ms 0.5-3 s into playback; a reply the server had already sent in full is stopped locally), "
         f"first turns ramped over {conv.ramp_s:g} s. Underruns count uninterrupted turns only; refused: turns "
         "the server refused at once (overloaded, close 1013)."), "",
        "First audio is timed from the first word sent (includes the LLM's time to write the first sentence) and",
        "from the word that completes the first sentence (the server's share). \"in worker\": the first segment's",
        "queue + generation time inside the engine worker (segment.end's queue_ms + gen_ms).", "",
        ("| agents | turns | ok | refused | interrupted | first audio p50 / p95 ms | after 1st sentence p50 / p95 ms "
         "| 1st segment in worker p50 / p95 ms | underruns | turns with underrun | stall ms total |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agent_rows:
        lines.append(f"| {r['agents']} | {r['turns']} | {r['ok']} | {r['refused']} | {r['barge_ins']} "
                     f"| {r['p50_first_audio_ms']:.0f} / {r['p95_first_audio_ms']:.0f} "
                     f"| {r['p50_after_clause_ms']:.0f} / {r['p95_after_clause_ms']:.0f} "
                     f"| {r.get('p50_first_worker_ms', float('nan')):.0f} / {r.get('p95_first_worker_ms', float('nan')):.0f} "
                     f"| {r['underruns']} | {r['turns_with_underrun']} | {r['stall_ms_total']:.0f} |")
    if agent_server:
        lines += server_table(agent_server)
    if load_rows:
        lines += ["", "## Load: short /v1/audio/speech requests offered at a fixed rate", "",
                  ("Served: 200 with audio (p50/p95/p99 of their latency); refused: 503 overloaded with Retry-After "
                  "(admission control), p95 of the time to that answer (request sent → answer read; each request a "
                  "connection of its own); goodput: seconds of audio served per "
                  "second of wall time."), "",
                  ("| requests | req/s | served | refused | failed | p50 s | p95 s | p99 s | refusal p95 ms | wall s "
                  "| goodput xRT |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, _ in load_rows:
            refusal = f"{r['refusal_p95_ms']:.0f}" if r["refused"] else "-"  # nothing refused: no percentile
            lines.append(f"| {r['requests']} | {r['rate_per_s']:g} | {r['served']} | {r['refused']} | {r['failed']} "
                         f"| {r['p50_s']:.3f} | {r['p95_s']:.3f} | {r['p99_s']:.3f} | {refusal} "
                         f"| {r['wall_s']:.1f} | {r['xrt']:.1f} |")
        lines += server_table([(f"load {r['requests']} @ {r['rate_per_s']:g}/s", srv) for r, srv in load_rows])
    if profile is not None:
        lines += profile_table(profile)
    errors = [e for r in agent_rows for e in r["errors"]] + [e for r, _ in load_rows for e in r["errors"]]
    if errors:
        lines += ["", "Errors (first few): " + "; ".join(errors[:5])]
    log = log_path.read_text(errors="replace") if server_log is not None else ""
    activity = parse_activity(log)
    names = [f"{r['agents']} agents" for r in agent_rows] + [f"load {r['requests']} @ {r['rate_per_s']:g}/s"
                                                             for r, _ in load_rows]
    per_run = [(name, run_activity(activity, *span)) for name, span in zip(names, windows, strict=True)]
    if any(a and a.get("segments_admitted") for _, a in per_run):
        lines += ["", ("Segments admitted by the workers and their mean tokens per step (cond + uncond rows: text, "
                       "the continuity prompt where there is one, the frames to generate), from the workers' "
                       "activity lines:"), "", "| run | segments admitted | tokens per segment |", "|---|---|---|"]
        lines += [f"| {name} | {a['segments_admitted']:.0f} | {a['tokens_per_segment']:.0f} |"
                  for name, a in per_run if a and a.get("segments_admitted")]
    report = "\n".join(lines) + "\n"
    print(report)
    (out_dir / f"{args.name}.md").write_text(report)
    for line in log.splitlines():  # what bench/h200_run.sh greps from its run.log
        if "serving graph buckets" in line or "step times" in line:
            print(line)
    (out_dir / f"{args.name}.json").write_text(json.dumps(run_json(
        args, conv, agent_rows, agent_server, load_rows, windows, log, ckpt, health), indent=1, default=str) + "\n")


def server_settings(server_args: str) -> dict[str, Any]:
    """The scheduler settings the server ran with: its config as `serve` builds it from --server-args (defaults,
    env, flags; a config file the flags name is read too)."""
    parser = argparse.ArgumentParser(add_help=False)
    options.add_config_flags(parser)
    known, _ = parser.parse_known_args(server_args.split())
    cfg = options.load(known)
    if cfg is None:
        raise SystemExit(f"--server-args {server_args!r}: not a valid server config")
    o = cfg.omnivoice
    return {"max_batch_tokens": o.max_batch_tokens, "latency_batch_tokens": o.latency_batch_tokens,
            "admit_interval_ms": o.admit_interval_ms, "admission_wait_ms": o.admission_wait_ms,
            "scheduler_policy": o.scheduler_policy, "target_chars": cfg.text.target_chars,
            "codec_graph_frames": o.codec_graph_frames, "voice_continuity": o.voice_continuity}


def run_json(args: argparse.Namespace, conv: AgentConfig, agent_rows: list[dict[str, Any]],
             agent_server: list[tuple[str, dict[str, float]]], load_rows: list[tuple[dict[str, Any], dict[str, float]]],
             windows: list[tuple[float, float]], log: str, ckpt: str | None, health: dict[str, Any]) -> dict[str, Any]:
    """What bench/omnivoice_costs.py and bench/omnivoice_sched_predict.py read from this run."""
    activity = parse_activity(log)
    spans = iter(windows)
    agents = [{"agents": r["agents"], "row": r, "server": srv, "activity": run_activity(activity, *next(spans))}
              for r, (_, srv) in zip(agent_rows, agent_server, strict=True)]
    loads = [{"requests": r["requests"], "rate_per_s": r["rate_per_s"], "row": r, "server": srv,
              "activity": run_activity(activity, *next(spans))} for r, srv in load_rows]
    return {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "commit": commit(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "device": device_name(),
            "machine": f"{platform.node()}, {os.cpu_count()} CPU cores", "versions": versions(), "checkpoint": ckpt,
            "server_args": args.server_args, "server": server_settings(args.server_args),
            "bench": {"turns": conv.turns, "gap_s": args.gap_s, "barge_in": conv.barge_in, "ramp_s": conv.ramp_s,
                      "words_per_s": args.words_per_s, "num_step": args.num_step, "protocol": args.protocol},
            "step_points_ms": parse_step_times(log), "workers": health.get("engines", {}).get("omnivoice", {}),
            "agents": agents, "loads": loads, "activity": activity}


if __name__ == "__main__":
    main()
