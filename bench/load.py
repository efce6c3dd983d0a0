"""The load generator every serving performance claim uses: what users feel, measured through the public API.

(a) speech: N requests offered at R req/s to POST /v1/audio/speech (omnivoice-triton-server's load-test shape),
    inputs "short" or "mixed" (short / medium / long, plus clone through POST /v1/audio/clone where the engine
    can clone) → completed req/s, audio seconds, xRT (audio seconds per wall second), latency mean/p50/p95/p99.
(b) agents: N voice agents, each a multi-turn conversation: every turn streams an LLM-paced reply word by word
    into WS /v1/stream/text (session mode, one context per turn, when the server has it; else simple mode, one
    socket per turn), "plays" the audio in real time, barges in on some turns (cancel with played_ms at a random
    point of playback), then listens for a gap before the next turn → first audio p50/p95/p99 (from the turn's
    first text message), underruns (the player ran dry mid-reply) and their duration, cancel latency (cancel sent →
    context.done / terminal frame), audio received after the cancel was sent but before the done (in flight: sent
    before the server read the cancel) and any audio after the done (the contract: none).
(c) sweeps: the levels of (a) or (b) in increasing order until the latency target is missed → the largest N
    (agents) or rate (speech) that meets it.

Writes bench/results/<name>.md (command, machine, versions, commit, date, the tables, a history table that
keeps one row per run) and <name>.png (latency and underruns vs load; matplotlib, the `bench` extra).
Starts `realtime-tts serve` itself on a free loopback port (the CPU voice unless --server-args say otherwise),
or uses --url (loopback only unless --allow-remote). Every run is bounded (--max-requests, --max-agents,
--run-timeout-s).

    python bench/load.py --speech 40@8 --shape mixed --agents 4 --turns 2              # one of each
    python bench/load.py --sweep-agents 1,2,4,8 --agent-target-ms 1000 --sweep-rate 2,4,8,16 --rate-target-s 2
    python bench/load.py --url http://127.0.0.1:8000 --agents 16 --turns 3 --barge-in 0.3

bench/omnivoice_serve.py (OmniVoice checkpoints, server-side step metrics) runs its agents and load through this
module; bench/omnivoice_sched_sim.py takes the texts (REPLIES, SHORT_INPUTS) from here through it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import io
import ipaddress
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import time
import urllib.parse
import wave
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import websockets

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: local_server, machine
import local_server

REPO = Path(__file__).resolve().parents[1]
try:
    import realtime_tts_client as rtc
except ImportError:  # a checkout without `make serve`'s install: the client package from its source folder
    sys.path.insert(0, str(REPO / "clients" / "python"))
    import realtime_tts_client as rtc

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
MEDIUM_INPUTS = REPLIES
LONG_INPUTS = (
    ("Welcome back to the program. Today we look at how cities plan for heavy rain. Engineers used to build "
     "bigger pipes, but the newer approach is to let water soak into parks, green roofs and porous streets. "
     "It costs less, it cools the city in summer, and it gives neighbourhoods more places to walk. The hard "
     "part is coordination, because every street belongs to a different department."),
    ("Here is the summary of your account. You have three open orders, two of which will ship tomorrow. "
     "The third is waiting for a part that arrives next week, and we will email you as soon as it leaves the "
     "warehouse. Your loyalty points were updated this morning, and you can use them on any purchase over "
     "twenty dollars until the end of the year."),
)
CLONE_REF_TEXT = "This is the reference voice for the cloning requests of the load test."
MIX = (("short", 0.4), ("medium", 0.3), ("long", 0.2), ("clone", 0.1))  # the mixed shape's request kinds


# ------------------------------------------------------------------------------------------------ helpers ---

def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def start_server(args: list[str], timeout_s: float = 900.0) -> tuple[subprocess.Popen[bytes], str]:
    """`realtime-tts serve` on a free loopback port (bench/local_server.py) → (process, base URL)."""
    port = local_server.free_port()
    raise_fd_limit()
    proc = local_server.start_server(port, ["--host", "127.0.0.1", *args], timeout_s=timeout_s)
    return proc, f"http://127.0.0.1:{port}"


def playback(arrivals: list[tuple[float, int]], rate: int = SR, jitter_s: float = 0.01) -> tuple[int, float]:
    """Real-time player fed by (arrival time, samples) → (underruns, total stall seconds). Playback starts at the
    first arrival; whenever a chunk arrives after the buffer ran dry, that is one underrun."""
    if not arrivals:
        return 0, 0.0
    start = arrivals[0][0]
    received = 0
    stall = 0.0
    underruns = 0
    for t, n in arrivals:
        empty_at = start + stall + received / rate
        if received and t > empty_at + jitter_s:
            underruns += 1
            stall += t - empty_at
        received += n
    return underruns, stall


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
                 after: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, Any]:
    """What the server counted between two scrapes (counters and histograms only grow)."""
    def d(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    p = "realtime_tts_"
    steps = d(p + "step_seconds_count")
    buckets = sorted((float(dict(lb)["le"]), after[(n, lb)] - before.get((n, lb), 0.0))
                     for (n, lb) in after if n == p + "step_seconds_bucket")
    segments = d(p + "batch_size_count")
    # segments per diffusion step count (realtime_tts_segment_steps buckets: one per count from 16 to 32)
    steps_cum = sorted((float(dict(lb)["le"]), after[(n, lb)] - before.get((n, lb), 0.0))
                       for (n, lb) in after if n == p + "segment_steps_bucket")
    step_counts: dict[str, float] = {}
    prev = 0.0
    for le, n in steps_cum:
        if n > prev and le != float("inf"):
            step_counts[f"{le:g}"] = n - prev
        prev = n

    def per_worker(name: str, **labels: str) -> float:  # summed over the worker label
        return sum(v - before.get((n, lb), 0.0) for (n, lb), v in after.items()
                   if n == p + name and labels.items() <= dict(lb).items())

    return {"steps": steps, "step_mean_ms": 1000.0 * d(p + "step_seconds_sum") / steps if steps else float("nan"),
            "step_p50_ms": 1000.0 * hist_quantile(buckets, 0.5), "step_p95_ms": 1000.0 * hist_quantile(buckets, 0.95),
            "step_busy_s": d(p + "step_seconds_sum"), "segments": segments,
            "batch_items_mean": d(p + "batch_size_sum") / segments if segments else float("nan"),
            "graph_hits": d(p + "cuda_graph_hits_total"), "graph_misses": d(p + "cuda_graph_misses_total"),
            "host_s": per_worker("worker_host_seconds_total"), "gpu_busy_s": per_worker("gpu_busy_seconds_total"),
            "gpu_gap_s": per_worker("gpu_gap_seconds_total"), "codec_s": per_worker("codec_seconds_total"),
            "refused": per_worker("admission_refusals_total", side="worker"),
            "refused_web": per_worker("admission_refusals_total", side="web"),
            "segment_steps": step_counts}


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) the process has used so far (Linux /proc; nan elsewhere or without a pid)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return float("nan")


def children(pid: int | None) -> list[int]:
    """The live child processes of pid (its engine workers), from /proc; none elsewhere."""
    if pid is None:
        return []
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                if int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


def cpu_usage(web_pid: int | None) -> dict[int | str, float]:
    """CPU seconds so far of the server's web process ("web"), each of its children (by pid) and this load
    client ("client")."""
    own = os.times()
    usage: dict[int | str, float] = {"web": cpu_seconds(web_pid), "client": own.user + own.system}
    for child in children(web_pid):
        usage[child] = cpu_seconds(child)
    return usage


def measured(url: str, run: Coroutine[Any, Any, dict[str, Any]],
             web_pid: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run one table row between two /metrics scrapes → (row, server-side figures of that run). web_pid: the
    server's web process, whose CPU seconds over the run are reported as web_cpu_s, its children's (the engine
    workers; one that started during the run counts from 0) as workers_cpu_s, and this client's as
    client_cpu_s (nan without a pid: a server the script did not start)."""
    before, cpu0, t0 = scrape(url), cpu_usage(web_pid), time.perf_counter()
    row = asyncio.run(run)
    time.sleep(0.6)  # GPU workers report step times every 0.25 s: let the last report land
    server = server_delta(before, scrape(url))
    cpu1, span = cpu_usage(web_pid), time.perf_counter() - t0
    server["web_cpu_s"] = cpu1["web"] - cpu0["web"]
    server["client_cpu_s"] = cpu1["client"] - cpu0["client"]
    workers = [v - cpu0.get(k, 0.0) for k, v in cpu1.items() if isinstance(k, int)]
    server["workers_cpu_s"] = sum(workers) if web_pid is not None else float("nan")
    server["span_s"] = span
    return row, server


def profile_table(path: Path, num: int = 30) -> list[str]:
    """A results-file section from the server's event loop profile (`serve --profile-web PATH`, written at its
    shutdown): its summary line and the first `num` rows of its own-time table; none when there is no file."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), None)
    if start is None:
        return []
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.strip():
            rows.append(line)
    return ["", f"## Event loop profile of the server's web process (`serve --profile-web`, top {num} by own time)",
            "", f"{lines[0].lstrip('# ')}; cProfile slows the loop down. Full report: {path.name} (and .pstats).",
            "", "```", lines[start], *rows[:num], "```"]


def raise_fd_limit() -> None:
    """Every request of a run is a connection of its own: thousands in flight need as many descriptors, here and
    in the server this process starts (it inherits the limit)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server_table(rows: list[tuple[str, dict[str, Any]]]) -> list[str]:
    nan = float("nan")
    lines = ["", ("Server side (the server's /metrics, difference over each run; step seconds as the worker times "
                  "`backend.step`; percentiles interpolated in the histogram's buckets; batch items: mean over "
                  "segments of each segment's mean batch size; host ms/step: the step loop's host work less its "
                  "waits for the GPU; GPU in steps / idle gaps: device time of the steps and the device's idle time "
                  "between back-to-back steps; codec GPU s: device time of codec decodes, its share of the card = "
                  "codec s / the run's wall time; refused: admission refusals, on arrival by the web process + by "
                  "the worker; CPU s: CPU time over the run (from /proc) of the server's web process — near the "
                  "run's wall time means its one event loop was saturated —, of its worker processes, and of "
                  "this load client, over the run's span incl. a 0.6 s settle):"), "",
             ("| run | steps | step mean / p50 / p95 ms | busy s | segments | batch items | CUDA graph hits / misses "
              "| host ms/step | GPU in steps s | GPU idle gaps ms/step | codec GPU s | refused web + worker "
              "| CPU s web / workers / client | over s |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['steps']:.0f} | {r['step_mean_ms']:.2f} / {r['step_p50_ms']:.2f} / "
                     f"{r['step_p95_ms']:.2f} | {r['step_busy_s']:.2f} | {r['segments']:.0f} | "
                     f"{r['batch_items_mean']:.1f} | {r['graph_hits']:.0f} / {r['graph_misses']:.0f} "
                     f"| {1000 * r['host_s'] / max(1, r['steps']):.2f} | {r['gpu_busy_s']:.2f} "
                     f"| {1000 * r['gpu_gap_s'] / max(1, r['steps']):.3f} | {r['codec_s']:.2f} "
                     f"| {r.get('refused_web', 0):.0f} + {r['refused']:.0f} "
                     f"| {r.get('web_cpu_s', nan):.2f} / {r.get('workers_cpu_s', nan):.2f} / "
                     f"{r.get('client_cpu_s', nan):.2f} | {r.get('span_s', nan):.1f} |")
    if any(r.get("segment_steps") for _, r in rows):
        lines += ["", ("Diffusion steps per segment (the server's realtime_tts_segment_steps histogram over the run): "
                       "the share of segments at each step count; fewer than the default only where load-adaptive "
                       "steps cut them."), "", "| run | segments | share by steps |", "|---|---|---|"]
        for name, r in rows:
            counts = r.get("segment_steps") or {}
            total = sum(counts.values())
            share = ", ".join(f"{k}: {100 * v / total:.1f}%" for k, v in
                              sorted(counts.items(), key=lambda kv: -float(kv[0]))) if total else "-"
            lines.append(f"| {name} | {total:.0f} | {share} |")
    return lines


def versions() -> str:
    out = []
    for pkg in ("torch", "transformers", "triton", "hibari-tts", "realtime-tts"):
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


def commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        # results files written by this very run do not make the code dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)bench/results"], cwd=REPO,
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# ------------------------------------------------------------------------------------- (a) speech requests ---

@dataclass(frozen=True)
class Request:
    kind: str  # short | medium | long | clone
    text: str


def speech_requests(n: int, shape: str, *, can_clone: bool, seed: int = 0) -> list[Request]:
    """n requests of the shape: "short" only, or the mixed kinds drawn by MIX's weights (clone only where the
    engine can clone: elsewhere its weight goes to the other kinds)."""
    rng = random.Random(seed)
    kinds = [(k, w) for k, w in MIX if k != "clone" or can_clone] if shape == "mixed" else [("short", 1.0)]
    texts = {"short": SHORT_INPUTS, "medium": MEDIUM_INPUTS, "long": LONG_INPUTS, "clone": MEDIUM_INPUTS}
    out = []
    for i in range(n):
        kind = rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        pool = texts[kind]
        out.append(Request(kind, pool[i % len(pool)]))
    return out


def wav_seconds(body: bytes) -> float:
    with wave.open(io.BytesIO(body)) as w:
        return float(w.getnframes() / w.getframerate())


async def run_speech(url: str, num: int, rate: float, params: dict[str, Any], *, shape: str = "short",
                     can_clone: bool = False, ref_wav: bytes | None = None, timeout_s: float = 600.0,
                     response_format: str = "pcm") -> dict[str, Any]:
    """num requests offered at `rate` req/s (evenly spaced, each one its own connection as a load tester's
    clients are) → completed req/s, audio seconds, xRT, latency percentiles (request sent → whole body)."""
    reqs = speech_requests(num, shape, can_clone=can_clone and ref_wav is not None)
    latencies: list[float] = []
    by_kind: dict[str, list[float]] = {}
    audio_s = 0.0
    failures: list[str] = []
    refusals: list[float] = []  # seconds to a 503 overloaded (admission control: should come at once)
    ends: list[float] = []
    # aiohttp, not httpx: the client must not be the bottleneck it measures. httpx's connection pool costs CPU that
    # grows with the connections open: 1000 requests at 200 new connections/s against a 0.5 s sleep endpoint took
    # 27 ms of client CPU each and queued for 10 s (p50) on a 2-core box, and H200 runs of 2000 @ 200/s reported
    # 15 s latencies with the server's web process at 13% CPU and the GPU worker half idle; aiohttp: 2.3 ms each,
    # p95 21 ms over the sleep (bench/results/HISTORY.md, session 8).
    import aiohttp

    connector = aiohttp.TCPConnector(limit=0, force_close=True)  # a connection per request, no pool limit
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(url, connector=connector, timeout=timeout) as client:
        async def one(i: int, req: Request) -> None:
            nonlocal audio_s
            await asyncio.sleep(i / rate)
            t0 = time.perf_counter()
            try:
                if req.kind == "clone":
                    assert ref_wav is not None
                    form = aiohttp.FormData({"text": req.text, "ref_text": CLONE_REF_TEXT, "response_format": "wav",
                                             "stream": "false", "seed": str(i),
                                             **{k: str(v) for k, v in params.items()}})
                    form.add_field("ref_audio", ref_wav, filename="ref.wav", content_type="audio/wav")
                    post = client.post("/v1/audio/clone", data=form)
                else:
                    body = {"input": req.text, "voice": "auto", "response_format": response_format,
                            "stream": False, "seed": i, **params}
                    post = client.post("/v1/audio/speech", json=body)
                async with post as r:
                    content = await r.read()
                    status, headers = r.status, r.headers
                if status == 200 and content:
                    t = time.perf_counter()
                    latencies.append(t - t0)
                    by_kind.setdefault(req.kind, []).append(t - t0)
                    ends.append(t)
                    rate_hz = int(headers.get("x-audio-sample-rate", SR))
                    audio_s += (wav_seconds(content) if content[:4] == b"RIFF"
                                else len(content) / 2 / rate_hz)
                elif status == 503 and b"overloaded" in content and headers.get("retry-after"):
                    refusals.append(time.perf_counter() - t0)
                else:
                    failures.append(f"{req.kind}: {status} {content[:120]!r}")
            except (TimeoutError, aiohttp.ClientError) as e:
                failures.append(f"{req.kind}: {type(e).__name__}: {e}")

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs)))
        wall = (max(ends) if ends else time.perf_counter()) - t0
    kinds = {k: sum(r.kind == k for r in reqs) for k, _ in MIX}
    return {"requests": num, "rate_per_s": rate, "shape": shape, "kinds": {k: v for k, v in kinds.items() if v},
            "served": len(latencies), "refused": len(refusals), "failed": len(failures),
            "refusal_p95_ms": 1000 * pct(refusals, 95), "completed_per_s": len(latencies) / wall if wall else 0,
            "audio_s": audio_s, "xrt": audio_s / wall if wall else 0.0, "wall_s": wall,
            "mean_s": float(np.mean(latencies)) if latencies else float("nan"),
            "p50_s": pct(latencies, 50), "p95_s": pct(latencies, 95), "p99_s": pct(latencies, 99),
            "p95_by_kind_s": {k: pct(v, 95) for k, v in sorted(by_kind.items())}, "errors": failures[:3]}


# ------------------------------------------------------------------------------------------ (b) agents ---

@dataclass
class AgentConfig:
    turns: int = 2
    pace: float = 45.0  # LLM pace, pieces per second
    jitter: bool = True  # each gap drawn uniformly in [0.5, 1.5] x the mean (else exactly the mean)
    granularity: str = "token"  # pieces: "token" (BPE-sized, ~4 characters) or "word"
    ramp_s: float = 1.0  # the agents' first turns start spread over this long
    barge_in: float = 0.0  # probability that the user interrupts a turn
    barge_after_s: tuple[float, float] = (0.2, 2.0)  # ...after this much of it was played (uniform)
    gap_s: tuple[float, float] = (0.5, 1.5)  # the user's turn: listening before the next reply (uniform)
    protocol: str = "auto"  # session | simple | auto (session when the server has it)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    first_audio_ms: float | None = None  # from the turn's first text message sent
    after_clause_ms: float | None = None  # from the word that completes the first sentence
    first_worker_ms: float | None = None  # the first segment's queue + generation time (segment.end)
    underruns: int = 0
    stall_ms: float = 0.0
    audio_s: float = 0.0
    barged: bool = False  # the user interrupted this turn...
    barged_after_done: bool = False  # ...after the server had sent all of it (nothing left to cancel there)
    cancel_ms: float | None = None  # cancel sent → Done
    # audio that reached the client after it sent its cancel and before the server's done: sent before the server
    # read the cancel (PROTOCOL §1 allows it; a player drops it)
    bytes_in_flight_at_cancel: int = 0
    # audio after the done of a cancelled turn (the contract: none): on its connection in simple mode, for no live
    # context of the session in session mode, within 100 ms; None: not read
    bytes_after_done: int | None = None
    text_spoken: str | None = None
    reason: str | None = None
    protocol: str | None = None
    refused: bool = False  # the server refused the turn at once (overloaded)
    play_end: float | None = None  # perf_counter() time the listener hears the end of the reply (or the cut)
    error: str | None = None


async def _open_turn(ws_base: str, cfg: AgentConfig, session: Any, seed: int) -> tuple[Any, Any]:
    """(speaker, its own connection or None): a context of the agent's session, or a simple-mode socket."""
    if session is not None:
        return session.context(), None
    stream = await rtc.SimpleStream.open(ws_base, incremental=True, seed=seed, events=True, **cfg.params)
    return stream, stream


def split_reply(text: str, granularity: str) -> list[str]:
    """The reply as an LLM streams it: BPE-sized pieces (a leading space stays with its word, long words split
    every 4 characters, punctuation apart) or whole words with their trailing space."""
    if granularity == "word":
        words = text.split(" ")
        return [w + " " for w in words[:-1]] + words[-1:]
    return re.findall(r" ?[A-Za-z0-9']{1,4}| ?[^\sA-Za-z0-9']", text)


async def run_turn(speaker: Any, pieces: list[str], cfg: AgentConfig, barge_after: float | None, rate: int,
                   pace_rng: random.Random) -> Turn:
    """One reply: its pieces at LLM pace, the audio "played" as it arrives; the user interrupts `barge_after`
    seconds into playback (None: never)."""
    out = Turn()
    arrivals: list[tuple[float, int]] = []
    t_first_text = t_clause = 0.0
    t_cancel: float | None = None
    received = 0

    async def feed() -> None:
        nonlocal t_first_text, t_clause
        for i, piece in enumerate(pieces):
            await speaker.text(piece)
            if i == 0:
                t_first_text = time.perf_counter()
            if not t_clause and piece.rstrip()[-1:] in (".", "!", "?"):
                t_clause = time.perf_counter()
            await asyncio.sleep((pace_rng.uniform(0.5, 1.5) if cfg.jitter else 1.0) / cfg.pace)
        await speaker.end()

    async def barge(after_s: float) -> None:
        nonlocal t_cancel
        await asyncio.sleep(after_s)  # playback started at the first arrival
        played_ms = 1000.0 * min(after_s, received / rate)
        feeder.cancel()
        t_cancel = time.perf_counter()
        out.barged = True
        await speaker.cancel(played_ms, wait=False)

    feeder = asyncio.create_task(feed())
    barger: asyncio.Task[None] | None = None
    try:
        async for ev in speaker.events():
            now = time.perf_counter()
            if isinstance(ev, rtc.Audio):
                if t_cancel is not None:
                    out.bytes_in_flight_at_cancel += len(ev.data)
                    continue
                n = len(ev.data) // 2
                received += n
                arrivals.append((now, n))
                if barge_after is not None and barger is None:
                    barger = asyncio.create_task(barge(barge_after))
            elif isinstance(ev, rtc.SegmentEnd) and ev.segment_index == 0:
                out.first_worker_ms = ev.queue_ms + ev.gen_ms
            elif isinstance(ev, rtc.ServerError):
                out.error = f"{ev.code}: {ev.message}"[:200]
                out.refused = ev.code == "overloaded" and not arrivals
            elif isinstance(ev, rtc.Done):
                out.reason = ev.reason
                out.text_spoken = ev.text_spoken
                if t_cancel is not None:
                    out.cancel_ms = 1000.0 * (now - t_cancel)
                break
    except Exception as e:  # noqa: BLE001 — a failed turn is a result, not a crash of the bench
        out.error = f"{type(e).__name__}: {e}"[:200]
        out.refused = "overloaded" in out.error and not arrivals
    finally:
        feeder.cancel()
        if barger is not None and t_cancel is None:
            barger.cancel()  # the reply ended before the user would have interrupted it
    if barge_after is not None and t_cancel is None and arrivals and out.error is None \
            and barge_after < received / rate:
        # the server sent the whole reply before the user interrupted its playback: the player stops locally
        # (a session context is done: its cancel would only answer already_done)
        await asyncio.sleep(max(0.0, arrivals[0][0] + barge_after - time.perf_counter()))
        out.barged = out.barged_after_done = True
        received = int(barge_after * rate)  # what was heard
    if arrivals:
        out.first_audio_ms = 1000.0 * (arrivals[0][0] - t_first_text)
        out.after_clause_ms = 1000.0 * (arrivals[0][0] - t_clause) if t_clause else None
        out.underruns, stall = playback(arrivals, rate)
        out.stall_ms = 1000.0 * stall
        out.audio_s = received / rate
        out.play_end = time.perf_counter() if out.barged else arrivals[0][0] + stall + out.audio_s
    out.protocol = "simple" if isinstance(speaker, rtc.SimpleStream) else "session"
    return out


AFTER_DONE_S = 0.1  # how long a cancelled turn's connection or session is watched for audio after its done


async def audio_after_done(ws: Any, wait_s: float = AFTER_DONE_S) -> int:
    """Bytes of audio a simple-mode connection carries after its terminal frame (the contract: none), read until
    the server closes it or wait_s passes."""
    received = 0
    deadline = time.perf_counter() + wait_s
    with contextlib.suppress(TimeoutError, websockets.ConnectionClosed):
        while (left := deadline - time.perf_counter()) > 0:
            msg = await asyncio.wait_for(ws.recv(), left)
            if isinstance(msg, bytes):
                received += len(msg)
    return received


async def agent(ws_base: str, index: int, cfg: AgentConfig) -> list[Turn]:
    """One agent's conversation. Who barges in and when are drawn as bench/omnivoice_sched_sim.py draws them
    (random.Random(index): per turn, random() < barge_in, then uniform(barge_after_s)); the reply of turn k is
    REPLIES[(index + 7k) % 3] with seed index + 7k (simple mode; session mode: the agent's index)."""
    rng = random.Random(index)
    pace_rng = random.Random(10_000 + index)
    turns: list[Turn] = []
    session = None
    rate = SR
    try:
        if cfg.protocol in ("auto", "session"):
            try:
                session = await rtc.Session.connect(ws_base, seed=index, **cfg.params)
                rate = session.audio.sample_rate
            except rtc.SessionModeUnavailable:
                if cfg.protocol == "session":
                    raise
        for t in range(cfg.turns):
            barge_after = rng.uniform(*cfg.barge_after_s) if rng.random() < cfg.barge_in else None
            pieces = split_reply(REPLIES[(index + 7 * t) % len(REPLIES)], cfg.granularity)
            speaker, conn = await _open_turn(ws_base, cfg, session, index + 7 * t)
            stray = session.stray_audio_bytes if session is not None else 0
            turn = await run_turn(speaker, pieces, cfg, barge_after, rate, pace_rng)
            turns.append(turn)
            # the listener hears the rest of the reply (or was cut off by their barge-in), then talks
            next_at = (turn.play_end or time.perf_counter()) + pace_rng.uniform(*cfg.gap_s)
            if turn.cancel_ms is not None and conn is not None:
                turn.bytes_after_done = await audio_after_done(conn.ws)
            elif turn.cancel_ms is not None and session is not None:
                await asyncio.sleep(AFTER_DONE_S)
                turn.bytes_after_done = session.stray_audio_bytes - stray
            if conn is not None:
                await conn.close()
            if t + 1 < cfg.turns:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    except Exception as e:  # noqa: BLE001 — e.g. connection refused: the agent's remaining turns failed
        turns.append(Turn(error=f"{type(e).__name__}: {e}"[:200]))
    finally:
        if session is not None:
            await session.close()
    return turns


async def run_agents(ws_base: str, n: int, cfg: AgentConfig, *, timeout_s: float = 600.0) -> dict[str, Any]:
    """n agents, first turns spread over cfg.ramp_s as a fleet of calls ramps up → one table row. Underruns
    count the turns the user heard to the end (an interrupted turn's underruns would count the cut)."""
    async def delayed(i: int) -> list[Turn]:
        await asyncio.sleep(i * cfg.ramp_s / max(1, n))
        return await agent(ws_base, i, cfg)

    t0 = time.perf_counter()
    try:
        results = await asyncio.wait_for(asyncio.gather(*(delayed(i) for i in range(n))), timeout_s)
    except TimeoutError:
        results = [[Turn(error=f"run timed out after {timeout_s:.0f} s")]]
    turns = [t for r in results for t in r]
    played = [t for t in turns if not t.barged]
    fa = [t.first_audio_ms for t in turns if t.first_audio_ms is not None]
    fc = [t.after_clause_ms for t in turns if t.after_clause_ms is not None]
    fw = [t.first_worker_ms for t in turns if t.first_worker_ms is not None]
    cancels = [t.cancel_ms for t in turns if t.cancel_ms is not None]
    return {"agents": n, "turns": len(turns), "ok": sum(t.error is None for t in turns),
            "protocol": "/".join(sorted({t.protocol for t in turns if t.protocol})) or cfg.protocol,
            "wall_s": time.perf_counter() - t0,
            "p50_first_audio_ms": pct(fa, 50), "p95_first_audio_ms": pct(fa, 95), "p99_first_audio_ms": pct(fa, 99),
            "p50_after_clause_ms": pct(fc, 50), "p95_after_clause_ms": pct(fc, 95),
            "p50_first_worker_ms": pct(fw, 50), "p95_first_worker_ms": pct(fw, 95),
            "refused": sum(t.refused for t in turns),
            "underruns": sum(t.underruns for t in played), "turns_with_underrun": sum(t.underruns > 0 for t in played),
            "stall_ms_total": sum(t.stall_ms for t in played), "audio_s": sum(t.audio_s for t in turns),
            "barge_ins": sum(t.barged for t in turns), "cancels": len(cancels),
            "barge_ins_after_done": sum(t.barged_after_done for t in turns),
            "p50_cancel_ms": pct(cancels, 50), "p95_cancel_ms": pct(cancels, 95),
            "max_cancel_ms": max(cancels) if cancels else float("nan"),
            "bytes_in_flight_at_cancel": sum(t.bytes_in_flight_at_cancel for t in turns),
            "bytes_after_done": sum(t.bytes_after_done or 0 for t in turns),
            "after_done_read": sum(t.bytes_after_done is not None for t in turns),
            "text_spoken_reported": sum(t.text_spoken is not None for t in turns if t.cancel_ms is not None),
            "errors": [t.error for t in turns if t.error][:3]}


# ------------------------------------------------------------------------------------------- (c) sweeps ---

def sweep(levels: list[float], run: Callable[[float], dict[str, Any]], meets: Callable[[dict[str, Any]], bool],
          *, deadline: float) -> tuple[list[dict[str, Any]], float | None]:
    """Run each level in increasing order until one misses the target (or time runs out) → (rows, the largest
    level that met it, None if none did). Each row gets "meets"."""
    rows: list[dict[str, Any]] = []
    best: float | None = None
    for level in sorted(levels):
        if time.monotonic() > deadline:
            break
        row = run(level)
        row["meets"] = meets(row)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if not row["meets"]:
            break
        best = level
    return rows, best


# ------------------------------------------------------------------------------------------ the report ---

def f0(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.0f}"


def f3(x: float) -> str:
    return "–" if math.isnan(x) else f"{x:.3f}"


def speech_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [("| requests | offered req/s | shape (kinds) | served | failed | completed req/s | audio s | xRT "
              "| mean / p50 / p95 / p99 s | p95 by kind s |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        kinds = ", ".join(f"{k} {v}" for k, v in r["kinds"].items())
        by_kind = ", ".join(f"{k} {f3(v)}" for k, v in r["p95_by_kind_s"].items())
        lines.append(f"| {r['requests']} | {r['rate_per_s']:g} | {r['shape']} ({kinds}) | {r['served']} | "
                     f"{r['failed']} | {r['completed_per_s']:.2f} | {r['audio_s']:.1f} | {r['xrt']:.1f} | "
                     f"{f3(r['mean_s'])} / {f3(r['p50_s'])} / {f3(r['p95_s'])} / {f3(r['p99_s'])} | {by_kind} |")
    return lines


def agents_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [("| agents | turns ok | protocol | first audio p50 / p95 / p99 ms | after 1st sentence p50 / p95 ms "
               "| underruns (turns) | stall ms | barge-ins (server done) | cancel p50 / p95 / max ms "
              "| bytes in flight at cancel / after done (turns read) | text_spoken |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        refused = f" ({r['refused']} refused)" if r["refused"] else ""
        lines.append(f"| {r['agents']} | {r['ok']}/{r['turns']}{refused} | {r['protocol']} | {f0(r['p50_first_audio_ms'])} / "
                     f"{f0(r['p95_first_audio_ms'])} / {f0(r['p99_first_audio_ms'])} | "
                     f"{f0(r['p50_after_clause_ms'])} / {f0(r['p95_after_clause_ms'])} | {r['underruns']} "
                     f"({r['turns_with_underrun']}) | {r['stall_ms_total']:.0f} | {r['barge_ins']} ({r['barge_ins_after_done']}) | "
                     f"{f0(r['p50_cancel_ms'])} / {f0(r['p95_cancel_ms'])} / {f0(r['max_cancel_ms'])} | "
                     f"{r['bytes_in_flight_at_cancel']} / {r['bytes_after_done']} ({r['after_done_read']}) | "
                     f"{r['text_spoken_reported']}/{r['cancels']} |")
    return lines


HISTORY_HEAD = ("| date | commit | machine | engine | speech req/s (xRT, p95 s) | agents: N, first audio p95 ms, "
                "underruns | largest N at target | largest rate at target |")


def history(path: Path, row: str) -> list[str]:
    """The history table: the rows already in `path` (one per earlier run) and this run's."""
    old: list[str] = []
    if path.exists():
        lines = path.read_text().splitlines()
        if "## History" in lines:
            old = [ln for ln in lines[lines.index("## History"):] if ln.startswith("| ") and
                   not ln.startswith("| date ")]
    return ["## History", "", HISTORY_HEAD, "|---|---|---|---|---|---|---|---|", *old, row]


def plot(path: Path, agent_rows: list[dict[str, Any]], rate_rows: list[dict[str, Any]], title: str,
         agent_target: float | None, rate_target: float | None) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
        return False
    # per panel: rows, x key, y key ({q} = p50/p95/p99), line label, target, its unit, x and y axis labels
    panels = [p for p in (
        (agent_rows, "agents", "{q}_first_audio_ms", "first audio", agent_target, "ms", "concurrent agents",
         "first audio (ms from the turn's first text)"),
        (rate_rows, "rate_per_s", "{q}_s", "latency", rate_target, "s", "offered requests / s (/v1/audio/speech)",
         "request latency (s)"),
    ) if p[0]]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.2), squeeze=False)
    for ax, (rows, xkey, ykey, what, target, unit, xlabel, ylabel) in zip(axes[0], panels, strict=True):
        x = [r[xkey] for r in rows]
        for q, style in (("p50", "-o"), ("p95", "-s"), ("p99", "-^")):
            ax.plot(x, [r[ykey.format(q=q)] for r in rows], style, label=f"{what} {q}")
        if target:
            ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g} {unit}")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax2 = ax.twinx()
        if xkey == "agents":
            ax2.bar(x, [r["underruns"] for r in rows], alpha=0.25, color="tab:red", width=[0.3 * v for v in x],
                    label="underruns")  # widths in proportion: the x axis is logarithmic
            ax2.set_ylabel("underruns (all turns)")
            ax2.set_ylim(bottom=0, top=max(4, *[r["underruns"] for r in rows]) * 1.2)
        else:
            ax2.plot(x, [r["completed_per_s"] for r in rows], ":", color="tab:green", label="completed req/s")
            ax2.set_ylabel("completed req/s")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ------------------------------------------------------------------------------------------------- main ---

def parse_speech(spec: str) -> list[tuple[int, float]]:
    """'40@8,100@20' → [(40, 8.0), (100, 20.0)]."""
    out = []
    for part in filter(None, spec.split(",")):
        n, _, r = part.partition("@")
        out.append((int(n), float(r or 10)))
    return out


def levels(spec: str) -> list[float]:
    return [float(x) for x in spec.split(",") if x]


def make_ref_wav(url: str) -> bytes:
    """A reference recording for the clone requests: the server's own voice saying CLONE_REF_TEXT."""
    r = httpx.post(url + "/v1/audio/speech", json={"input": CLONE_REF_TEXT, "response_format": "wav",
                                                   "stream": False, "seed": 1}, timeout=300)
    r.raise_for_status()
    return r.content


def can_clone(url: str) -> tuple[bool, str]:
    models = httpx.get(url + "/v1/models", timeout=10).json().get("data", [])
    default = next((m for m in models if m.get("default")), models[0] if models else {})
    modes = (default.get("capabilities") or {}).get("voice_modes", [])
    return "clone" in modes, str(default.get("id", "?"))


def main() -> None:  # one linear script: its sections in the report's order
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="a running server (default: start `realtime-tts serve` on a free loopback port)")
    p.add_argument("--allow-remote", action="store_true", help="allow a --url that is not a loopback address")
    p.add_argument("--server-args", default="", help="extra `serve` flags for the server this script starts")
    p.add_argument("--speech", default="", help="N@R[,N@R...]: N requests offered at R req/s (a)")
    p.add_argument("--shape", choices=("short", "mixed"), default="mixed")
    p.add_argument("--agents", default="", help="comma-separated agent counts (b)")
    p.add_argument("--turns", type=int, default=2, help="turns per agent")
    p.add_argument("--pace", type=float, default=45.0, help="LLM pace: pieces (tokens or words) per second")
    p.add_argument("--granularity", choices=("token", "word"), default="token",
                   help="what one text message carries: a BPE-sized token (~4 characters) or a word")
    p.add_argument("--barge-in", type=float, default=0.3, help="probability that a turn is interrupted")
    p.add_argument("--barge-after", default="0.2,2.0",
                   help="MIN,MAX seconds of playback before a barge-in (uniform); a fast server may have sent the "
                        "whole reply by then (counted apart: nothing left to cancel)")
    p.add_argument("--protocol", choices=("auto", "session", "simple"), default="auto")
    p.add_argument("--sweep-agents", default="", help="agent counts to sweep (c), e.g. 1,2,4,8,16")
    p.add_argument("--agent-target-ms", type=float, default=1000.0,
                   help="sweep target: p95 first audio (ms) and no turn with an underrun")
    p.add_argument("--sweep-rate", default="", help="offered rates to sweep (c), e.g. 2,4,8,16")
    p.add_argument("--sweep-requests-s", type=float, default=6.0, help="each rate level offers rate x this many requests")
    p.add_argument("--rate-target-s", type=float, default=2.0, help="sweep target: p95 latency (s), all served")
    p.add_argument("--num-step", type=int, help="OmniVoice diffusion steps (request field)")
    p.add_argument("--max-requests", type=int, default=2000, help="bound on requests per run")
    p.add_argument("--max-agents", type=int, default=256, help="bound on agents per run")
    p.add_argument("--run-timeout-s", type=float, default=300.0, help="bound on one run")
    p.add_argument("--time-budget-s", type=float, default=900.0, help="sweeps stop starting levels after this")
    p.add_argument("--name", default="load", help="results file stem: OUT/<name>.md and <name>.png")
    p.add_argument("--out-dir", default=os.environ.get("OUT", str(REPO / "bench" / "results")))
    p.add_argument("--profile-web", action="store_true",
                   help="profile the started server's event loop (serve --profile-web) into OUT/<name>.web_profile.txt "
                        "and put its top 30 functions in the report (cProfile slows the loop: not for the figures)")
    args = p.parse_args()
    out_dir = Path(args.out_dir)
    profile = out_dir.resolve() / f"{args.name}.web_profile.txt" if args.profile_web and not args.url else None

    speech_runs = parse_speech(args.speech)
    agent_levels = [int(x) for x in levels(args.agents)]
    sweep_agent_levels = [int(x) for x in levels(args.sweep_agents)]
    sweep_rates = levels(args.sweep_rate)
    if any(n > args.max_requests for n, _ in speech_runs) or any(
            r * args.sweep_requests_s > args.max_requests for r in sweep_rates):
        raise SystemExit(f"a run asks for more than --max-requests {args.max_requests}")
    if any(n > args.max_agents for n in agent_levels + sweep_agent_levels):
        raise SystemExit(f"a run asks for more than --max-agents {args.max_agents}")
    if args.url and not (is_loopback(args.url) or args.allow_remote):
        raise SystemExit(f"{args.url} is not a loopback address: pass --allow-remote to load another machine")

    proc = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        t0 = time.perf_counter()
        out_dir.mkdir(parents=True, exist_ok=True)
        proc, url = start_server([*args.server_args.split(), *(["--profile-web", str(profile)] if profile else [])])
        print(f"server healthy in {time.perf_counter() - t0:.1f} s at {url}", flush=True)
    web_pid = proc.pid if proc is not None else None
    ws_base = url.replace("http", "ws", 1)
    params: dict[str, Any] = {} if args.num_step is None else {"num_step": args.num_step}
    lo, _, hi = args.barge_after.partition(",")
    cfg = AgentConfig(turns=args.turns, pace=args.pace, granularity=args.granularity, barge_in=args.barge_in,
                      barge_after_s=(float(lo), float(hi or lo)), protocol=args.protocol, params=params)
    deadline = time.monotonic() + args.time_budget_s
    load_before = os.getloadavg()[0]
    speech_rows: list[dict[str, Any]] = []
    agent_rows: list[dict[str, Any]] = []
    sweep_agent_rows: list[dict[str, Any]] = []
    sweep_rate_rows: list[dict[str, Any]] = []
    server_rows: list[tuple[str, dict[str, float]]] = []
    best_agents = best_rate = None
    try:
        health = httpx.get(url + "/health", timeout=10).json()
        clone_ok, model = can_clone(url)
        ref = make_ref_wav(url) if clone_ok and args.shape == "mixed" else None
        warm = AgentConfig(turns=1, pace=args.pace, granularity=args.granularity, protocol=args.protocol, params=params,
                           gap_s=(0.0, 0.0))
        asyncio.run(run_agents(ws_base, 1, warm))  # first-use costs stay out of the tables

        def speech(n: int, rate: float) -> dict[str, Any]:
            row, server = measured(url, run_speech(url, n, rate, params, shape=args.shape, can_clone=clone_ok,
                                                   ref_wav=ref, timeout_s=args.run_timeout_s), web_pid)
            server_rows.append((f"speech {n} @ {rate:g}/s", server))
            return row

        def agents(n: int) -> dict[str, Any]:
            row, server = measured(url, run_agents(ws_base, n, cfg, timeout_s=args.run_timeout_s), web_pid)
            server_rows.append((f"{n} agents", server))
            return row

        for n, rate in speech_runs:
            speech_rows.append(speech(n, rate))
            print("speech", json.dumps(speech_rows[-1]), flush=True)
        for n in agent_levels:
            agent_rows.append(agents(n))
            print("agents", json.dumps(agent_rows[-1]), flush=True)
        if sweep_agent_levels:
            sweep_agent_rows, best = sweep(
                [float(n) for n in sweep_agent_levels], lambda n: agents(int(n)),
                lambda r: r["p95_first_audio_ms"] <= args.agent_target_ms and r["turns_with_underrun"] == 0
                and r["ok"] == r["turns"], deadline=deadline)
            best_agents = int(best) if best is not None else None
        if sweep_rates:
            sweep_rate_rows, best_rate = sweep(
                sweep_rates, lambda r: speech(max(1, round(r * args.sweep_requests_s)), r),
                lambda r: r["p95_s"] <= args.rate_target_s and r["failed"] == 0, deadline=deadline)
    finally:
        if proc is not None:
            local_server.stop_server(proc)

    out_dir.mkdir(parents=True, exist_ok=True)
    md, png = out_dir / f"{args.name}.md", out_dir / f"{args.name}.png"
    engines = health.get("engines", {})
    engine_desc = ", ".join(f"{k} ({v.get('model')}, {v.get('device')}, pool {v.get('pool_size')})"
                            for k, v in engines.items())
    from machine import cpu_model

    machine = f"{platform.node()}, {cpu_model()}, {os.cpu_count()} CPU cores, {device_name()}"
    lines = [
        "# Load test (bench/load.py)", "",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}; commit {commit()}",
        (f"- machine: {machine}, Python {platform.python_version()}; load average before / after the runs: "
         f"{load_before:.1f} / {os.getloadavg()[0]:.1f} (other work on a shared machine shows up here)"),
        f"- versions: {versions()}",
        (f"- server: {url if args.url else 'started by the script on ' + url} — engines: {engine_desc}; default "
         f"model {model}; clone {'in the mix' if ref else 'not in the mix (the engine cannot clone)'}"),
    ]
    if speech_rows or sweep_rate_rows:
        weights = ", ".join(f"{k} {w:g}" for k, w in MIX)
        lines += ["", "## (a) /v1/audio/speech: N requests offered at R req/s", "",
                  ("Latency: request sent → whole body received (`stream: false`). xRT: seconds of audio served per "
                   "wall second (first request sent → last completed). Mixed: short / medium / long (/ clone) "
                   f"drawn with weights {weights}."), ""]
        lines += speech_table(speech_rows + sweep_rate_rows)
    if agent_rows or sweep_agent_rows:
        lines += ["", "## (b) Agents: multi-turn LLM-paced streams, real-time playback, barge-ins", "",
                  (f"Each agent: {args.turns} turns; a turn streams a 3-sentence reply at ~{args.pace:g} "
                   f"{args.granularity}s/s into WS /v1/stream/text (one text message per {args.granularity}), "
                   "plays it in real time, is interrupted with probability "
                   f"{args.barge_in:g} after {cfg.barge_after_s[0]:g}-{cfg.barge_after_s[1]:g} s of playback "
                   f"(cancel with played_ms), then listens {cfg.gap_s[0]:g}-{cfg.gap_s[1]:g} s. First audio: "
                   "from the turn's first text message. Underrun: the player ran dry mid-reply (10 ms jitter allowance). "
                   "Cancel: cancel sent → context.done (session) / terminal frame (simple), for barge-ins while "
                   "the server was still sending; \"server done\": barge-ins after the server had sent the whole "
                   "reply (the player stops locally, nothing to cancel). text_spoken: cancels answered with it."),
                  ""]
        lines += agents_table(agent_rows + sweep_agent_rows)
    if sweep_agent_rows:
        agents_txt = (f"{best_agents}" if best_agents else "none") + (
            " (every level tried met it: the limit is higher)" if sweep_agent_rows[-1]["meets"] else "")
        lines += ["", (f"**Sweep (agents)**: target p95 first audio ≤ {args.agent_target_ms:g} ms, no turn with an "
                       f"underrun, every turn ok → largest N meeting it: **{agents_txt}** "
                       f"(levels tried: {', '.join(str(r['agents']) for r in sweep_agent_rows)}).")]
    if sweep_rate_rows:
        tried = ", ".join(f"{r['rate_per_s']:g}" for r in sweep_rate_rows)
        best_txt = (f"{best_rate:g} req/s" if best_rate else "none") + (
            " (every level tried met it: the limit is higher)" if sweep_rate_rows[-1]["meets"] else "")
        lines += ["", (f"**Sweep (rate)**: target p95 latency ≤ {args.rate_target_s:g} s, every request served → "
                       f"largest offered rate meeting it: **{best_txt}** (levels tried: {tried}).")]
    if server_rows and (web_pid is not None or any(r["steps"] for _, r in server_rows)):
        lines += server_table(server_rows)
    if profile is not None:
        lines += profile_table(profile)
    errors = [e for r in speech_rows + sweep_rate_rows + agent_rows + sweep_agent_rows for e in r["errors"]]
    if errors:
        lines += ["", "Errors (first few): " + "; ".join(errors[:5])]
    title = f"bench/load.py — {engine_desc} — {dt.date.today().isoformat()} {commit()}"
    # one curve per panel: the sweep's levels when there is a sweep, else the single runs, in load order
    if plot(png, sweep_agent_rows or sorted(agent_rows, key=lambda r: r["agents"]),
            sweep_rate_rows or sorted(speech_rows, key=lambda r: r["rate_per_s"]), title,
            args.agent_target_ms if sweep_agent_rows else None, args.rate_target_s if sweep_rate_rows else None):
        lines += ["", f"![latency and underruns vs load]({png.name})"]
    first_speech = next(iter(speech_rows or sweep_rate_rows), None)
    last_agents = (agent_rows or sweep_agent_rows)[-1] if agent_rows or sweep_agent_rows else None
    hist_row = "| " + " | ".join([
        dt.date.today().isoformat(), commit(), f"{os.cpu_count()} cores, {device_name()}",
        ", ".join(engines),
        (f"{first_speech['completed_per_s']:.2f} ({first_speech['xrt']:.1f}x, {f3(first_speech['p95_s'])}) "
         f"[{first_speech['requests']}@{first_speech['rate_per_s']:g} {first_speech['shape']}]"
         if first_speech else "–"),
        (f"{last_agents['agents']}, {f0(last_agents['p95_first_audio_ms'])}, {last_agents['underruns']}"
         if last_agents else "–"),
        (f"{best_agents} (≤ {args.agent_target_ms:g} ms)" if sweep_agent_rows else "–"),
        (f"{best_rate:g} (≤ {args.rate_target_s:g} s)" if sweep_rate_rows and best_rate else
         ("none" if sweep_rate_rows else "–")),
    ]) + " |"
    lines += ["", *history(md, hist_row)]
    report = "\n".join(lines) + "\n"
    print(report)
    md.write_text(report)


if __name__ == "__main__":
    main()
