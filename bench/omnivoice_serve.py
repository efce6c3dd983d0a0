"""Serving benchmark of the OmniVoice engine through the real server (issue 5 item 4, serving tables):

- agents: N simulated voice agents, each streaming a 3-sentence reply word by word at LLM pace into
  WS /v1/stream/text and "playing" the audio in real time → p50/p95 first audio (from the first text sent)
  and underruns (the player ran dry mid-reply) per N. N=1 is the idle-server first-audio figure.
- load: K short /v1/audio/speech requests offered at R req/s → served, p50/p95/p99 latency.
- server side, per run: what the server's /metrics counted during it (steps run, step seconds: mean and
  percentiles read off the histogram, mean batch items per segment, CUDA-graph hits/misses), so a GPU run
  tells where the time went. Tokens per step are not among the metrics.

Starts `realtime-tts serve --model CKPT` itself (or uses --url), prints tables, writes
OUT/<name>.md (command, machine, versions, date).

    .venv/bin/python bench/omnivoice_serve.py --build tiny --agents 1,4 --load 40 --rate 10   # CPU smoke
    python bench/omnivoice_serve.py --build full --word-tokenizer --agents 1,25,50,100 --load 1000 --rate 100
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import local_server  # bench/local_server.py (the script's own folder is on sys.path)
import numpy as np
import websockets
from local_server import free_port

REPO = Path(__file__).resolve().parents[1]
SR = 24_000
# Three-sentence agent replies (data). The first clause has six words: the first-audio figure.
REPLIES = (
    ("Sure, I can help with that. Your order shipped this morning and should arrive on Thursday. "
    "Is there anything else you would like to know?"),
    ("Good question, let me check. The museum opens at nine and closes at six on weekdays. "
    "Tickets are cheaper if you book them online."),
    ("Thanks for waiting, I found it. The meeting moved to the larger room on the third floor. "
    "I have already sent the new invitation to everyone."),
)
SHORT_INPUTS = ("Hello there, how are you today?", "Your table is ready now.", "Please hold on a moment.",
                "The train leaves at five.", "Thank you for calling us.")


@dataclass
class AgentResult:
    first_audio_ms: float | None = None  # from the first word sent
    after_clause_ms: float | None = None  # from the word that completes the first sentence
    first_worker_ms: float | None = None  # the first segment's time inside the worker (queue + generation)
    underruns: int = 0
    stall_ms: float = 0.0
    audio_s: float = 0.0
    error: str | None = None
    barged: bool = False  # the user interrupted this turn (the agent closed the socket mid-reply)
    refused: bool = False  # the server refused the turn at once (overloaded: error frame, close 1013)
    arrivals: list[tuple[float, int]] = field(default_factory=list)


def start_server(ckpt: str, port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    return local_server.start_server(port, ["--model", ckpt, *extra])


def playback(arrivals: list[tuple[float, int]], jitter_s: float = 0.01) -> tuple[int, float]:
    """Real-time player fed by (arrival time, samples): → (underruns, total stall seconds). Playback starts
    at the first arrival; whenever a chunk arrives after the buffer ran dry, that is one underrun."""
    if not arrivals:
        return 0, 0.0
    start = arrivals[0][0]
    received = 0
    stall = 0.0
    underruns = 0
    for t, n in arrivals:
        empty_at = start + stall + received / SR
        if received and t > empty_at + jitter_s:
            underruns += 1
            stall += t - empty_at
        received += n
    return underruns, stall


async def agent(url: str, index: int, words_per_s: float, params: dict[str, Any],
                barge_after_s: float | None = None) -> AgentResult:
    """One agent turn: stream a reply word by word, play the audio in real time. barge_after_s: the user
    interrupts after this much playback (the agent closes the socket: the server must cancel the rest)."""
    out = AgentResult()
    words = REPLIES[index % len(REPLIES)].split(" ")
    t_first_text = 0.0
    t_clause = 0.0
    try:
        async with websockets.connect(url + "/v1/stream/text", max_size=None, open_timeout=30) as ws:
            # events: segment.end reports each segment's queue_ms and gen_ms inside the engine worker, which
            # splits first audio into the worker's share and the rest (web process, IPC, pacing, client)
            await ws.send(json.dumps({**params, "seed": index, "events": True}))

            async def feed() -> None:
                nonlocal t_first_text, t_clause
                for i, word in enumerate(words):
                    await ws.send(json.dumps({"text": word + (" " if i < len(words) - 1 else "")}))
                    if i == 0:
                        t_first_text = time.perf_counter()
                    if not t_clause and word[-1] in ".!?":
                        t_clause = time.perf_counter()
                    await asyncio.sleep(1.0 / words_per_s)
                await ws.send(json.dumps({"end": True}))

            feeder = asyncio.create_task(feed())
            while True:
                # the user barges in barge_after_s into playback (whether or not audio is arriving then)
                timeout = None
                if barge_after_s is not None and out.arrivals:
                    timeout = max(0.0, out.arrivals[0][0] + barge_after_s - time.perf_counter())
                try:
                    msg = await asyncio.wait_for(ws.recv(), timeout)
                except TimeoutError:
                    out.barged = True
                    feeder.cancel()
                    break
                if isinstance(msg, bytes):
                    out.arrivals.append((time.perf_counter(), len(msg) // 2))
                else:
                    frame = json.loads(msg)
                    if frame.get("type") == "segment.end" and frame.get("segment_index") == 0:
                        out.first_worker_ms = float(frame.get("queue_ms", 0.0)) + float(frame.get("gen_ms", 0.0))
                    if frame.get("done") or frame.get("type") == "error" or "error" in frame:
                        if not frame.get("done"):
                            out.error = json.dumps(frame)[:200]
                            out.refused = "overloaded" in out.error
                        break
            if not feeder.cancelled():
                with contextlib.suppress(asyncio.CancelledError):
                    await feeder
    except Exception as e:  # noqa: BLE001 — a failed agent is a result, not a crash of the bench
        out.error = f"{type(e).__name__}: {e}"
    if out.arrivals:
        out.first_audio_ms = (out.arrivals[0][0] - t_first_text) * 1000.0
        out.after_clause_ms = (out.arrivals[0][0] - t_clause) * 1000.0
        out.underruns, stall = playback(out.arrivals)
        out.stall_ms = stall * 1000.0
        out.audio_s = sum(n for _, n in out.arrivals) / SR
    return out


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The server's /metrics as {(sample name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    return {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
            for fam in text_string_to_metric_families(text) for smp in fam.samples}


def hist_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """q-quantile from cumulative histogram buckets [(le, count)], linear within the bucket (Prometheus'
    histogram_quantile); nan when empty, the last finite bound when it falls in +Inf."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    prev_le, prev_n = 0.0, 0.0
    for le, n in buckets:
        if n >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_n) / max(n - prev_n, 1e-12)
        prev_le, prev_n = le, n
    return prev_le


def server_delta(before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
                 after: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """What the server counted between two scrapes (counters and histograms only grow)."""
    def d(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    p = "realtime_tts_"
    steps = d(p + "step_seconds_count")
    buckets = sorted((float(dict(lb)["le"]), after[(n, lb)] - before.get((n, lb), 0.0))
                     for (n, lb) in after if n == p + "step_seconds_bucket")
    segments = d(p + "batch_size_count")

    def per_worker(name: str) -> float:  # summed over the worker label
        return sum(v - before.get((n, lb), 0.0) for (n, lb), v in after.items() if n == p + name)

    return {"steps": steps, "step_mean_ms": 1000.0 * d(p + "step_seconds_sum") / steps if steps else float("nan"),
            "step_p50_ms": 1000.0 * hist_quantile(buckets, 0.5), "step_p95_ms": 1000.0 * hist_quantile(buckets, 0.95),
            "step_busy_s": d(p + "step_seconds_sum"), "segments": segments,
            "batch_items_mean": d(p + "batch_size_sum") / segments if segments else float("nan"),
            "graph_hits": d(p + "cuda_graph_hits_total"), "graph_misses": d(p + "cuda_graph_misses_total"),
            "host_s": per_worker("worker_host_seconds_total"), "gpu_busy_s": per_worker("gpu_busy_seconds_total"),
            "gpu_gap_s": per_worker("gpu_gap_seconds_total"), "codec_s": per_worker("codec_seconds_total"),
            "refused": per_worker("admission_refusals_total")}


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) the process has used so far (Linux /proc; nan elsewhere or without a pid)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


def measured(url: str, run: Any, web_pid: int | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """Run one table row between two /metrics scrapes → (row, server-side figures of that run). web_pid: the
    server's web process (not its workers), whose CPU seconds over the run are reported as web_cpu_s."""
    before, cpu0 = scrape(url), cpu_seconds(web_pid)
    row = asyncio.run(run)
    time.sleep(0.6)  # workers report step times every 0.25 s: let the last report land
    server = server_delta(before, scrape(url))
    server["web_cpu_s"] = cpu_seconds(web_pid) - cpu0
    return row, server


def server_table(rows: list[tuple[str, dict[str, float]]]) -> list[str]:
    lines = ["", ("Server side (the server's /metrics, difference over each run; step seconds as the worker times "
                  "`backend.step`; percentiles interpolated in the histogram's buckets; batch items: mean over "
                  "segments of each segment's mean batch size; host ms/step: the step loop's host work less its "
                  "waits for the GPU; GPU in steps / idle gaps: device time of the steps and the device's idle time "
                  "between back-to-back steps; codec GPU s: device time of codec decodes, its share of the card = "
                  "codec s / the run's wall time; refused: admission refusals; web CPU s: CPU time of the server's "
                  "web process over the run, from /proc — near the run's wall time means its one event loop "
                  "was saturated):"), "",
             ("| run | steps | step mean / p50 / p95 ms | busy s | segments | batch items | CUDA graph hits / misses "
              "| host ms/step | GPU in steps s | GPU idle gaps ms/step | codec GPU s | refused | web CPU s |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['steps']:.0f} | {r['step_mean_ms']:.2f} / {r['step_p50_ms']:.2f} / "
                     f"{r['step_p95_ms']:.2f} | {r['step_busy_s']:.2f} | {r['segments']:.0f} | "
                     f"{r['batch_items_mean']:.1f} | {r['graph_hits']:.0f} / {r['graph_misses']:.0f} "
                     f"| {1000 * r['host_s'] / max(1, r['steps']):.2f} | {r['gpu_busy_s']:.2f} "
                     f"| {1000 * r['gpu_gap_s'] / max(1, r['steps']):.3f} | {r['codec_s']:.2f} | {r['refused']:.0f} "
                     f"| {r.get('web_cpu_s', float('nan')):.2f} |")
    return lines


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


@dataclass(frozen=True)
class Conversation:
    """How the agents talk: turns per agent, the user's listening/talking gap between turns (after the reply
    has played, or after a barge-in), the fraction of turns the user interrupts, arrivals ramped over ramp_s."""

    turns: int = 1
    gap_s: float = 2.0
    barge_in: float = 0.0
    ramp_s: float = 1.0


async def conversation(url: str, index: int, words_per_s: float, params: dict[str, Any],
                       conv: Conversation) -> list[AgentResult]:
    """One agent's conversation: its turns, each a /v1/stream/text reply, separated by the user's turn."""
    import random

    rng = random.Random(index)
    results = []
    for turn in range(conv.turns):
        barge = rng.uniform(0.5, 3.0) if rng.random() < conv.barge_in else None
        r = await agent(url, index + 7 * turn, words_per_s, params, barge_after_s=barge)
        results.append(r)
        if turn + 1 < conv.turns:
            # the user listens to the rest of the reply (what was sent but not yet played), then talks
            played_to = (r.arrivals[0][0] + r.stall_ms / 1000.0 + r.audio_s) if r.arrivals and not r.barged \
                else time.perf_counter()
            await asyncio.sleep(max(0.0, played_to - time.perf_counter()) + conv.gap_s)
    return results


async def run_agents(url: str, n: int, words_per_s: float, params: dict[str, Any],
                     conv: Conversation = Conversation()) -> dict[str, Any]:
    # Agents' first turns start spread over ramp_s, as a fleet of calls ramps up in practice.
    async def delayed(i: int) -> list[AgentResult]:
        await asyncio.sleep(i * conv.ramp_s / max(1, n))
        return await conversation(url, i, words_per_s, params, conv)

    sessions = await asyncio.gather(*(delayed(i) for i in range(n)))
    results = [r for turns in sessions for r in turns]
    played = [r for r in results if not r.barged]  # underruns of interrupted turns would count the cut
    fa = [r.first_audio_ms for r in results if r.first_audio_ms is not None]
    fc = [r.after_clause_ms for r in results if r.after_clause_ms is not None]
    fw = [r.first_worker_ms for r in results if r.first_worker_ms is not None]
    return {"agents": n, "turns": len(results), "ok": sum(r.error is None for r in results),
            "refused": sum(r.refused for r in results), "barged": sum(r.barged for r in results),
            "p50_first_audio_ms": pct(fa, 50),
            "p95_first_audio_ms": pct(fa, 95), "p50_after_clause_ms": pct(fc, 50), "p95_after_clause_ms": pct(fc, 95),
            "underruns": sum(r.underruns for r in played),
            "agents_with_underrun": sum(r.underruns > 0 for r in played),
            "p50_first_worker_ms": pct(fw, 50), "p95_first_worker_ms": pct(fw, 95),
            "stall_ms_total": sum(r.stall_ms for r in played), "audio_s": sum(r.audio_s for r in results),
            "errors": [r.error for r in results if r.error][:3]}


async def run_load(url: str, num: int, rate: float, params: dict[str, Any]) -> dict[str, Any]:
    latencies: list[float] = []
    refusals: list[float] = []  # seconds to a 503 (admission control: should come at once)
    audio_s = [0.0]
    failures: list[str] = []
    limits = httpx.Limits(max_connections=num, max_keepalive_connections=num)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def one(i: int) -> None:
            await asyncio.sleep(i / rate)
            body = {"input": SHORT_INPUTS[i % len(SHORT_INPUTS)], "voice": "auto", "response_format": "pcm",
                    "stream": False, "seed": i, **params}
            t0 = time.perf_counter()
            try:
                r = await client.post("/v1/audio/speech", json=body)
                if r.status_code == 200 and r.content:
                    latencies.append(time.perf_counter() - t0)
                    audio_s[0] += len(r.content) / 2 / SR
                elif r.status_code == 503 and "overloaded" in r.text and r.headers.get("retry-after"):
                    refusals.append(time.perf_counter() - t0)
                else:
                    failures.append(f"{r.status_code} {r.text[:120]}")
            except httpx.HTTPError as e:
                failures.append(f"{type(e).__name__}: {e}")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(num)))
        wall = time.perf_counter() - t0
    return {"requests": num, "rate_per_s": rate, "served": len(latencies), "refused": len(refusals),
            "failed": len(failures), "p50_s": pct(latencies, 50), "p95_s": pct(latencies, 95),
            "p99_s": pct(latencies, 99), "refusal_p95_ms": 1000 * pct(refusals, 95), "wall_s": wall,
            "audio_s": audio_s[0], "goodput_xrt": audio_s[0] / wall if wall else float("nan"),
            "errors": failures[:3]}


def versions() -> str:
    out = []
    for pkg in ("torch", "transformers", "triton", "realtime-tts"):
        try:
            out.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(out)


def device_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10, check=False).stdout.strip().replace("\n", " + ") or "no GPU"
    except OSError:
        return "no GPU"


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
    p.add_argument("--num-step", type=int, default=32)
    p.add_argument("--name", default="omnivoice_serve", help="results file stem")
    p.add_argument("--out-dir", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    args = p.parse_args()

    proc = None
    web_pid = None
    ckpt = args.ckpt
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
        port = free_port()
        t0 = time.perf_counter()
        proc = start_server(ckpt, port, args.server_args.split())
        web_pid = proc.pid
        print(f"server healthy in {time.perf_counter() - t0:.1f} s", flush=True)
        url = f"http://127.0.0.1:{port}"
    else:
        url = args.url.rstrip("/")
    ws_url = url.replace("http", "ws", 1)
    params = {"num_step": args.num_step}
    agent_rows: list[dict[str, Any]] = []
    agent_server: list[tuple[str, dict[str, float]]] = []
    conv = Conversation(args.turns, args.gap_s, args.barge_in, args.ramp_s)
    loads = [(int(k), float(r)) for k, r in zip(args.load.split(","), args.rate.split(","), strict=True) if int(k)]
    load_rows: list[tuple[dict[str, Any], dict[str, float]]] = []
    try:
        asyncio.run(run_agents(ws_url, 1, args.words_per_s, params))  # warm-up: first-use costs
        for n in [int(x) for x in args.agents.split(",") if x]:
            row, server = measured(url, run_agents(ws_url, n, args.words_per_s, params, conv), web_pid)
            agent_rows.append(row)
            agent_server.append((f"{n} agents", server))
            print("agents", json.dumps(row), "server", json.dumps(server), flush=True)
        for num, rate in loads:
            load_row, load_server = measured(url, run_load(url, num, rate, params), web_pid)
            load_rows.append((load_row, load_server))
            print("load", json.dumps(load_row), "server", json.dumps(load_server), flush=True)
        health = httpx.get(url + "/health", timeout=10).json()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)

    lines = [
        "# OmniVoice serving benchmark", "",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}",
        f"- machine: {platform.node()}, {os.cpu_count()} CPU cores, {device_name()}, Python {platform.python_version()}",
        f"- versions: {versions()}",
        f"- checkpoint: {ckpt or args.url} (random weights); num_step {args.num_step}; LLM pace {args.words_per_s} words/s",
        f"- workers at the end: {json.dumps(health.get('engines', {}).get('omnivoice', {}).get('workers'))}",
        "", "## Agents streaming 3-sentence replies into WS /v1/stream/text, playing in real time", "",
        (f"{conv.turns} turn(s) per agent, {conv.gap_s:g} s of user turn between replies (after the reply has "
         f"played), {100 * conv.barge_in:.0f}% of turns interrupted by the user (the agent closes the socket "
         f"0.5-3 s into playback), first turns ramped over {conv.ramp_s:g} s. Underruns count uninterrupted "
         "turns only; refused: turns the server refused at once (overloaded, close 1013)."), "",
        "First audio is timed from the first word sent (includes the LLM's time to write the first sentence) and",
        "from the word that completes the first sentence (the server's share). \"in worker\": the first segment's",
        "queue + generation time inside the engine worker (segment.end's queue_ms + gen_ms).", "",
        ("| agents | turns | ok | refused | interrupted | first audio p50 / p95 ms | after 1st sentence p50 / p95 ms "
         "| 1st segment in worker p50 / p95 ms | underruns | turns with underrun | stall ms total |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in agent_rows:
        lines.append(f"| {r['agents']} | {r['turns']} | {r['ok']} | {r['refused']} | {r['barged']} "
                     f"| {r['p50_first_audio_ms']:.0f} / {r['p95_first_audio_ms']:.0f} "
                     f"| {r['p50_after_clause_ms']:.0f} / {r['p95_after_clause_ms']:.0f} "
                     f"| {r.get('p50_first_worker_ms', float('nan')):.0f} / {r.get('p95_first_worker_ms', float('nan')):.0f} "
                     f"| {r['underruns']} | {r['agents_with_underrun']} | {r['stall_ms_total']:.0f} |")
    if agent_server:
        lines += server_table(agent_server)
    if load_rows:
        lines += ["", "## Load: short /v1/audio/speech requests offered at a fixed rate", "",
                  ("Served: 200 with audio (p50/p95/p99 of their latency); refused: 503 overloaded with Retry-After "
                  "(admission control), p95 of the time to that answer; goodput: seconds of audio served per "
                  "second of wall time."), "",
                  ("| requests | req/s | served | refused | failed | p50 s | p95 s | p99 s | refusal p95 ms | wall s "
                  "| goodput xRT |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r, _ in load_rows:
            lines.append(f"| {r['requests']} | {r['rate_per_s']:g} | {r['served']} | {r['refused']} | {r['failed']} "
                         f"| {r['p50_s']:.3f} | {r['p95_s']:.3f} | {r['p99_s']:.3f} | {r['refusal_p95_ms']:.0f} "
                         f"| {r['wall_s']:.1f} | {r['goodput_xrt']:.1f} |")
        lines += server_table([(f"load {r['requests']} @ {r['rate_per_s']:g}/s", srv) for r, srv in load_rows])
    errors = [e for r in agent_rows for e in r["errors"]] + [e for r, _ in load_rows for e in r["errors"]]
    if errors:
        lines += ["", "Errors (first few): " + "; ".join(errors[:5])]
    report = "\n".join(lines) + "\n"
    print(report)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.name}.md").write_text(report)


if __name__ == "__main__":
    main()
