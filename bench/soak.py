"""Soak: M minutes of mixed traffic at a set fraction of the server's capacity, sampling the memory of the server
and of every engine worker (and VRAM on a GPU); reports memory growth after warm-up and every error.

    python bench/soak.py --minutes 10 --fraction 0.5            # starts a CPU-voice server of its own
    python bench/soak.py --url http://127.0.0.1:8000 --minutes 5 --out bench/results/soak_gpu.md

Capacity is measured first (a short calibration: bulk HTTP requests from 2 clients per worker, audio seconds per
wall second); traffic then arrives as a Poisson stream whose expected audio per second is `fraction` of it. The
mix is the SCENARIOS table: name -> (weight, coroutine); session mode and the vendor dialects add a line each.
Every scenario returns an Outcome: its audio, its first-audio time, and "ok", "refused" (503/1013: the server
said retry) or an error string. Writes bench/results/soak_cpu.md (table + a history table kept across runs).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_server import free_port, start_server, stop_server  # bench/local_server.py
from machine import cpu_model, versions  # bench/machine.py

REPO = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 24_000
TEXTS = [
    "Thanks for calling. Your order shipped this morning and should arrive on Thursday.",
    ("The weather today is mild, with a light breeze from the west and a few clouds in the afternoon. "
     "Tomorrow looks warmer. Bring a jacket for the evening, though."),
    ("Here is a longer answer. First, open the settings page. Second, choose the account tab and scroll down. "
     "Third, press the button that says export, and wait until the download finishes. That is all it takes."),
]


@dataclass
class Outcome:
    status: str  # "ok", "refused", or what went wrong
    audio_s: float = 0.0
    first_audio_s: float | None = None


@dataclass
class Ctx:
    http: str
    ws: str
    client: httpx.AsyncClient
    rng: random.Random


# -- scenarios -------------------------------------------------------------------------------------------------

async def _ws_read(ws: object, t0: float, *, stop_after_audio: bool = False) -> tuple[Outcome, dict[str, object]]:
    out = Outcome("ok")
    terminal: dict[str, object] = {}
    n = 0
    try:
        async for msg in ws:  # type: ignore[attr-defined]
            if isinstance(msg, bytes):
                n += len(msg)
                if out.first_audio_s is None:
                    out.first_audio_s = time.perf_counter() - t0
                    if stop_after_audio:
                        break
            else:
                frame = json.loads(msg)
                if frame.get("type") == "error":
                    code = frame.get("code")
                    out.status = "refused" if code in ("overloaded", "too_many_connections") else f"error {code}"
                if frame.get("done"):
                    terminal = frame
    except ConnectionClosed as e:
        if e.rcvd is None or e.rcvd.code not in (1000, 1013):
            out.status = f"closed {e.rcvd.code if e.rcvd else 'abruptly'}"
    out.audio_s = n / 2 / SAMPLE_RATE
    return out, terminal


async def ws_simple(c: Ctx) -> Outcome:
    t0 = time.perf_counter()
    async with connect(c.ws + "/v1/stream", max_size=None) as ws:
        await ws.send(json.dumps({"text": c.rng.choice(TEXTS), "seed": c.rng.randrange(1000)}))
        out, terminal = await _ws_read(ws, t0)
    return _expect(out, terminal, "end")


async def ws_text(c: Ctx) -> Outcome:
    """Incremental text like an LLM: a word every 30 ms, then end."""
    t0 = time.perf_counter()
    async with connect(c.ws + "/v1/stream/text", max_size=None) as ws:
        await ws.send(json.dumps({"seed": c.rng.randrange(1000)}))

        async def feed() -> None:
            for word in c.rng.choice(TEXTS).split():
                await ws.send(json.dumps({"text": word + " "}))
                await asyncio.sleep(0.03)
            await ws.send(json.dumps({"end": True}))

        feeder = asyncio.create_task(feed())
        out, terminal = await _ws_read(ws, t0)
        feeder.cancel()
    return _expect(out, terminal, "end")


async def ws_cancel(c: Ctx) -> Outcome:
    t0 = time.perf_counter()
    async with connect(c.ws + "/v1/stream/text", max_size=None) as ws:
        await ws.send(json.dumps({"text": TEXTS[2], "seed": 1}))
        await ws.send(json.dumps({"flush": True}))
        first = await ws.recv()
        if isinstance(first, str):
            return Outcome("refused" if "overloaded" in first else f"error {first[:80]}")
        await ws.send(json.dumps({"cancel": True}))
        out, terminal = await _ws_read(ws, t0)
    return _expect(out, terminal, "cancelled")


async def ws_disconnect(c: Ctx) -> Outcome:
    t0 = time.perf_counter()
    async with connect(c.ws + "/v1/stream", max_size=None) as ws:
        await ws.send(json.dumps({"text": TEXTS[2]}))
        out, _ = await _ws_read(ws, t0, stop_after_audio=True)
    return out  # the client leaves mid-stream


async def _http(c: Ctx, body: dict[str, object], *, abort: bool = False) -> Outcome:
    t0 = time.perf_counter()
    out = Outcome("ok")
    n = 0
    async with c.client.stream("POST", c.http + "/v1/audio/speech", json=body) as r:
        if r.status_code == 503:
            return Outcome("refused")
        if r.status_code != 200:
            return Outcome(f"error HTTP {r.status_code}")
        sse = body.get("stream_format") == "sse"
        done = False
        async for chunk in (r.aiter_lines() if sse else r.aiter_bytes()):
            if out.first_audio_s is None:
                out.first_audio_s = time.perf_counter() - t0
                if abort:
                    break
            if sse:
                if chunk.startswith("data: "):
                    ev = json.loads(chunk[6:])
                    if ev["type"] == "speech.audio.delta":
                        n += len(base64.b64decode(ev["audio"]))
                    elif ev["type"] == "speech.audio.done":
                        done = True
                    elif ev["type"] == "error":
                        out.status = f"error sse {ev['error']['code']}"
            else:
                n += len(chunk)
        if sse and not done and not abort and out.status == "ok":
            out.status = "error sse without done"
    out.audio_s = n / 2 / SAMPLE_RATE if body.get("response_format") == "pcm" else 0.0
    return out


async def http_pcm(c: Ctx) -> Outcome:
    return await _http(c, {"input": c.rng.choice(TEXTS), "response_format": "pcm"})


async def http_mp3(c: Ctx) -> Outcome:
    out = await _http(c, {"input": c.rng.choice(TEXTS[:2]), "response_format": "mp3"})
    return out


async def http_sse(c: Ctx) -> Outcome:
    return await _http(c, {"input": c.rng.choice(TEXTS), "response_format": "pcm", "stream_format": "sse"})


async def http_abort(c: Ctx) -> Outcome:
    return await _http(c, {"input": TEXTS[2], "response_format": "pcm"}, abort=True)


def VERSIONS() -> str:
    return versions("hibari-tts", "uvicorn", "starlette", "websockets")


def _expect(out: Outcome, terminal: dict[str, object], reason: str) -> Outcome:
    """An ok outcome whose terminal frame did not give `reason` is an error."""
    if out.status == "ok" and terminal.get("reason") != reason:
        out.status = f"error terminal reason {terminal.get('reason')!r}, expected {reason!r}"
    return out


Scenario = Callable[[Ctx], Awaitable[Outcome]]
# name -> (weight, scenario). Session mode and dialect clients are one line each here.
SCENARIOS: dict[str, tuple[float, Scenario]] = {
    "ws_simple": (3, ws_simple), "ws_text": (3, ws_text), "http_pcm": (2, http_pcm), "http_mp3": (1, http_mp3),
    "http_sse": (1, http_sse), "ws_cancel": (1, ws_cancel), "ws_disconnect": (1, ws_disconnect),
    "http_abort": (1, http_abort),
}


# -- measuring -------------------------------------------------------------------------------------------------

@dataclass
class Sampler:
    server_pid: int
    samples: list[tuple[float, dict[str, int]]] = field(default_factory=list)  # (t, {process: rss bytes})
    vram: list[tuple[float, int]] = field(default_factory=list)

    def sample(self, t: float) -> None:
        try:
            server = psutil.Process(self.server_pid)
            row = {"server": server.memory_info().rss}
            workers = [p for p in server.children(recursive=True) if p.is_running()]
        except psutil.Error:
            return
        for i, p in enumerate(sorted(workers, key=lambda p: p.create_time())):
            try:
                row[f"worker {i}"] = p.memory_info().rss
            except psutil.Error:
                pass
        self.samples.append((t, row))
        used = _vram_bytes()
        if used is not None:
            self.vram.append((t, used))


def _vram_bytes() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(x) for x in out.split()) * 2**20 if out.strip() else None


async def calibrate(c: Ctx, clients: int, seconds: float) -> float:
    """Audio seconds per wall second the server delivers to `clients` back-to-back bulk HTTP requests."""
    stop = time.perf_counter() + seconds
    audio = 0.0

    async def one() -> None:
        nonlocal audio
        while time.perf_counter() < stop:
            out = await _http(c, {"input": " ".join(TEXTS), "response_format": "pcm"})
            audio += out.audio_s

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    return audio / (time.perf_counter() - t0)


async def soak(c: Ctx, *, seconds: float, rate: float, sampler: Sampler, sample_s: float,
               results: dict[str, list[Outcome]]) -> None:
    names = list(SCENARIOS)
    weights = [SCENARIOS[n][0] for n in names]
    tasks: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter()

    async def run(name: str) -> None:
        try:
            out = await asyncio.wait_for(SCENARIOS[name][1](c), 300)
        except Exception as e:  # noqa: BLE001 — every failure is a result of the soak
            out = Outcome(f"error {type(e).__name__}: {str(e)[:80]}")
        results.setdefault(name, []).append(out)

    async def sampling() -> None:
        while True:
            sampler.sample(time.perf_counter() - t0)
            await asyncio.sleep(sample_s)

    sampler_task = asyncio.create_task(sampling())
    while time.perf_counter() - t0 < seconds:
        await asyncio.sleep(c.rng.expovariate(rate))
        task = asyncio.create_task(run(c.rng.choices(names, weights)[0]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    sampler.sample(time.perf_counter() - t0)
    sampler_task.cancel()


def growth_table(sampler: Sampler, warmup_s: float, window_s: float) -> tuple[list[str], dict[str, float]]:
    procs = sorted({k for _, row in sampler.samples for k in row}, key=lambda k: (k != "server", k))
    end_t = sampler.samples[-1][0]
    lines = ["| process | RSS after warm-up (MB) | RSS at end (MB) | peak (MB) | growth after warm-up |",
             "|---|---|---|---|---|"]
    growth: dict[str, float] = {}
    for p in procs:
        series = [(t, row[p]) for t, row in sampler.samples if p in row]
        early = [v for t, v in series if warmup_s <= t < warmup_s + window_s]
        late = [v for t, v in series if t >= end_t - window_s]
        if not early or not late:
            continue
        a, b = statistics.median(early), statistics.median(late)
        growth[p] = (b - a) / a * 100
        lines.append(f"| {p} | {a / 2**20:.1f} | {b / 2**20:.1f} | {max(v for _, v in series) / 2**20:.1f} | "
                     f"{growth[p]:+.2f}% |")
    if sampler.vram:
        early = [v for t, v in sampler.vram if warmup_s <= t < warmup_s + window_s]
        late = [v for t, v in sampler.vram if t >= end_t - window_s]
        if early and late:
            a, b = statistics.median(early), statistics.median(late)
            growth["vram"] = (b - a) / a * 100
            lines.append(f"| GPU memory (all GPUs) | {a / 2**20:.0f} | {b / 2**20:.0f} | "
                         f"{max(v for _, v in sampler.vram) / 2**20:.0f} | {growth['vram']:+.2f}% |")
    return lines, growth


def scenario_table(results: dict[str, list[Outcome]]) -> tuple[list[str], int, int, list[str]]:
    lines = ["| scenario | requests | ok | refused (retry) | errors | audio (s) | first audio p50 (ms) | p95 (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    errors, refused, kinds = 0, 0, []
    for name in SCENARIOS:
        outs = results.get(name, [])
        ok = sum(o.status == "ok" for o in outs)
        ref = sum(o.status == "refused" for o in outs)
        bad = [o.status for o in outs if o.status not in ("ok", "refused")]
        errors, refused = errors + len(bad), refused + ref
        kinds += bad
        firsts = sorted(o.first_audio_s * 1e3 for o in outs if o.first_audio_s is not None)
        p50 = f"{statistics.median(firsts):.0f}" if firsts else "-"
        p95 = f"{firsts[int(0.95 * (len(firsts) - 1))]:.0f}" if firsts else "-"
        lines.append(f"| {name} | {len(outs)} | {ok} | {ref} | {len(bad)} | {sum(o.audio_s for o in outs):.0f} | "
                     f"{p50} | {p95} |")
    return lines, errors, refused, kinds


def server_metrics(http: str, headers: dict[str, str]) -> list[str]:
    try:
        text = httpx.get(http + "/metrics", headers=headers, timeout=10).text
    except httpx.HTTPError:
        return []
    keep = ("realtime_tts_errors_total", "realtime_tts_ws_closes_total", "realtime_tts_limit_refusals_total",
            "realtime_tts_worker_restarts_total", "realtime_tts_http_stream_aborts_total",
            "realtime_tts_cancellations_total", "realtime_tts_requests_total")
    return [line for line in text.splitlines() if line.startswith(keep)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--fraction", type=float, default=0.5, help="offered load as a fraction of measured capacity")
    ap.add_argument("--warmup-minutes", type=float, default=2.0)
    ap.add_argument("--window-minutes", type=float, default=1.0, help="RSS is compared over windows this long")
    ap.add_argument("--sample-s", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=2, help="CPU voice workers of the server this script starts")
    ap.add_argument("--url", default=None, help="soak a running server instead (its pid is found by port)")
    ap.add_argument("--api-key", default=os.environ.get("REALTIME_TTS_SOAK_KEY"))
    ap.add_argument("--calibrate-s", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "soak_cpu.md"))
    args = ap.parse_args()

    proc = None
    if args.url:
        http = args.url.rstrip("/")
        port = httpx.URL(http).port or 80
        pid = next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                   and c.status == psutil.CONN_LISTEN and c.pid)
    else:
        port = free_port()
        proc = start_server(port, ["--cpu-workers", str(args.workers)], timeout_s=120)
        http, pid = f"http://127.0.0.1:{port}", proc.pid
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    results: dict[str, list[Outcome]] = {}
    sampler = Sampler(pid)
    load_before = os.getloadavg()

    async def go() -> tuple[float, float]:
        async with httpx.AsyncClient(timeout=300, headers=headers) as client:
            c = Ctx(http, "ws" + http[4:], client, random.Random(args.seed))
            capacity = await calibrate(c, max(2, 2 * args.workers), args.calibrate_s)
            mean_audio = await _mean_audio(c)
            rate = args.fraction * capacity / mean_audio
            print(f"capacity {capacity:.1f} s of audio per s; mean audio per request {mean_audio:.1f} s; "
                  f"{rate:.2f} requests/s for {args.minutes} min")
            await soak(c, seconds=args.minutes * 60, rate=rate, sampler=sampler, sample_s=args.sample_s,
                        results=results)
            return capacity, rate

    try:
        capacity, rate = asyncio.run(go())
        metrics = server_metrics(http, headers)
        healthy = httpx.get(http + "/health", headers=headers, timeout=10).json().get("status")
    finally:
        if proc is not None:
            stop_server(proc)
    rows, errors, refused, kinds = scenario_table(results)
    mem, growth = growth_table(sampler, args.warmup_minutes * 60, args.window_minutes * 60)
    total = sum(len(v) for v in results.values())
    print("\n".join(rows + [""] + mem))
    print(f"errors: {errors} {sorted(set(kinds))[:10]}; refused: {refused}; health after: {healthy}")
    write_report(args, rows, mem, growth, errors, refused, kinds, total, capacity, rate, metrics, healthy,
                 load_before)


async def _mean_audio(c: Ctx) -> float:
    """Mean audio of a request of the mix, from one run of each whole-text scenario (cancels and disconnects
    are cheap: counted at a tenth)."""
    per: dict[str, float] = {}
    for name in ("ws_simple", "http_pcm"):
        per[name] = statistics.mean([(await SCENARIOS[name][1](c)).audio_s for _ in range(2)])
    full = statistics.mean(per.values())
    cheap = {"ws_cancel", "ws_disconnect", "http_abort"}
    weights = {n: w for n, (w, _) in SCENARIOS.items()}
    return sum(w * (full * 0.1 if n in cheap else full) for n, w in weights.items()) / sum(weights.values())


def write_report(args: argparse.Namespace, rows: list[str], mem: list[str], growth: dict[str, float], errors: int,
                 refused: int, kinds: list[str], total: int, capacity: float, rate: float, metrics: list[str],
                 healthy: object, load_before: tuple[float, float, float]) -> None:
    out = Path(args.out)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    commit = VERSIONS().rsplit(" ", 1)[-1]
    worker_growth = [v for k, v in growth.items() if k.startswith("worker")]
    history_row = (f"| {now} | {commit} | {args.minutes:g} | {args.fraction:g} | {total} | {errors} | {refused} | "
                   f"{growth.get('server', float('nan')):+.2f}% | "
                   f"{max(worker_growth) if worker_growth else float('nan'):+.2f}% |")
    history = [history_row]
    if out.exists():
        old = out.read_text().split("## History", 1)
        if len(old) == 2:
            history = [ln for ln in old[1].splitlines() if re.match(r"\| \d{4}-", ln)] + history
    cmd = "python bench/soak.py " + " ".join(sys.argv[1:])
    md = [
        "# Soak: mixed traffic, memory and errors over time",
        "",
        f"- command: `{cmd.strip()}`",
        f"- date: {now}",
        f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} logical cores",
        f"- versions: {VERSIONS()}",
        (f"- load average before (1/5/15 min): {load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f} "
         "(a shared machine: other work inflates first-audio times, not memory)"),
        (f"- capacity measured first: {capacity:.1f} s of audio per s; offered {args.fraction:g} of it: "
         f"{rate:.2f} requests/s (Poisson) for {args.minutes:g} min, warm-up {args.warmup_minutes:g} min, RSS "
         f"compared between the first and the last {args.window_minutes:g}-minute windows after warm-up "
         f"(medians of {args.sample_s:g}-s samples)"),
        "",
        ("Mix (weight): " + ", ".join(f"{n} ({w:g})" for n, (w, _) in SCENARIOS.items()) + ". ws_cancel sends "
         "{cancel} after the first audio (expects reason cancelled); ws_disconnect and http_abort leave after the "
         "first audio. An error is anything else than the expected end (5xx, a close other than 1000/1013, no "
         "terminal frame, an SSE error event, an exception); refused = 503/1013 (the server said retry)."),
        "",
        *rows,
        "",
        *mem,
        "",
        f"Errors: {errors}" + (f" ({', '.join(sorted(set(kinds))[:8])})" if kinds else "") +
        f"; refused: {refused}; /health after: {healthy}.",
        "",
        "Server counters at the end:",
        "",
        "```",
        *metrics,
        "```",
        "",
        "## History",
        "",
        ("| date | commit | minutes | fraction | requests | errors | refused | server RSS growth | worst worker "
         "RSS growth |"),
        "|---|---|---|---|---|---|---|---|---|",
        *history,
        "",
    ]
    out.write_text("\n".join(md))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
