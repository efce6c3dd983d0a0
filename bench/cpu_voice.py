"""Benchmark of the CPU voice through the real server: first-audio latency (p50/p95) and x-realtime for 1, 2
and 4 concurrent WS /v1/stream clients. Starts its own server, prints a table, writes
bench/results/cpu_voice.md.

    .venv/bin/python bench/cpu_voice.py [--requests 30] [--port 0]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import websockets
from local_server import free_port, start_server, stop_server  # bench/local_server.py
from machine import cpu_model, git_commit  # bench/machine.py (the script's own folder is on sys.path)

REPO = Path(__file__).resolve().parents[1]
SHORT = "Hello there, how are you today?"  # 6 words
LONG = (
    "The old lighthouse stood at the edge of the cliff, its white paint peeling after decades of storms. "
    "Every evening the keeper climbed the spiral stairs, trimmed the wick, and watched the beam sweep across "
    "the water. Ships passed in the distance, their lights blinking like slow stars. Some nights the fog rolled "
    "in so thick that the beam seemed to stop a few metres from the glass. On those nights he sounded the horn "
    "every thirty seconds until dawn, and drank his tea standing by the window. When the automatic lamp was "
    "finally installed, he stayed on anyway, because somebody had to listen to the sea. "
) * 2


async def one(url: str, text: str, seed: int) -> tuple[float, float, float, float, float]:
    """→ (client first-audio ms, server ttfa ms, audio s, wall s, first segment's queue + generation ms)."""
    first = None
    nbytes = 0
    first_gen_ms = None
    async with websockets.connect(url, max_size=None) as ws:
        t0 = time.perf_counter()  # from the request frame: the connection is usually open already
        await ws.send(json.dumps({"text": text, "seed": seed, "events": True}))
        while True:
            msg = await ws.recv()
            if isinstance(msg, bytes):
                first = first or time.perf_counter()
                nbytes += len(msg)
                continue
            frame = json.loads(msg)
            if frame.get("type") == "segment.end" and first_gen_ms is None:
                first_gen_ms = frame["queue_ms"] + frame["gen_ms"]
            if frame.get("done"):
                stats = frame["stats"]
                break
    wall = time.perf_counter() - t0
    assert first is not None and first_gen_ms is not None
    return (first - t0) * 1e3, stats["ttfa_ms"], nbytes / 2 / 24000, wall, first_gen_ms


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its live children (the voice workers): on a
    shared machine, audio per CPU second is the per-core figure other people's load does not distort."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry) == pid or int(fields[1]) == pid:  # fields[1]: the parent's pid
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def bulk(url: str, clients: int, requests: int, pid: int) -> dict[str, float]:
    cpu0 = tree_cpu_s(pid)
    r = asyncio.run(run(url, clients, requests, LONG))
    r["per_cpu_s"] = r["audio_s"] / max(1e-9, tree_cpu_s(pid) - cpu0)
    return r


async def run(url: str, clients: int, requests: int, text: str) -> dict[str, float]:
    async def client(k: int) -> list[tuple[float, float, float, float, float]]:
        return [await one(url, text, seed=k * 1000 + i) for i in range(requests)]

    t0 = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(client(k) for k in range(clients))) for r in rs]
    wall = time.perf_counter() - t0
    lat = np.array([r[0] for r in results])
    srv = np.array([r[1] for r in results])
    gen = np.array([r[4] for r in results])
    audio_s = sum(r[2] for r in results)
    return {"clients": clients, "n": len(results), "p50": float(np.percentile(lat, 50)),
            "p95": float(np.percentile(lat, 95)), "srv_p50": float(np.percentile(srv, 50)),
            "gen_p50": float(np.percentile(gen, 50)), "overhead_p50": float(np.percentile(srv - gen, 50)),
            "xrt": audio_s / wall, "audio_s": audio_s, "wall_s": wall}


def voice_alone(requests: int) -> tuple[float, float]:
    """The voice without the server, same process, one thread: (p50 ms for SHORT, x-realtime on LONG). The
    floor the server's numbers should be read against on this machine at this moment."""
    from hibari import Hibari

    tts = Hibari(threads=1)
    tts("Warm up.")
    times = []
    for i in range(requests):
        t0 = time.perf_counter()
        tts(SHORT, seed=i)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    audio_s = len(tts(LONG, seed=0)) / 24000
    return float(np.percentile(times, 50)) * 1e3, audio_s / (time.perf_counter() - t0)


_tts: Any = None  # one voice per benchmark worker process


def _load_voice() -> None:
    global _tts
    from hibari import Hibari

    _tts = Hibari(threads=1)
    _tts("Warm up.")


def _long_audio_s(seed: int) -> float:
    return len(_tts(LONG, seed=seed)) / 24000


def voice_alone_processes(n: int, jobs: int) -> float:
    """x-realtime of the voice alone in n processes, no server, LONG back to back: the ceiling of the server's
    bulk figure on this machine at this moment."""
    with ProcessPoolExecutor(n, mp_context=mp.get_context("spawn"), initializer=_load_voice) as ex:
        list(ex.map(_long_audio_s, range(n)))  # every process loaded and warm
        t0 = time.perf_counter()
        audio_s = sum(ex.map(_long_audio_s, range(n * jobs)))
        return audio_s / (time.perf_counter() - t0)


def machine() -> str:
    cpu = cpu_model()
    return f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} logical cores"


def versions() -> str:
    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"
    return (f"python {platform.python_version()}, hibari-tts {v('hibari-tts')}, onnxruntime {v('onnxruntime')}, "
            f"numpy {v('numpy')}, uvicorn {v('uvicorn')}, starlette {v('starlette')}, realtime_tts {git_commit(REPO)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=30, help="short requests per client")
    ap.add_argument("--bulk-requests", type=int, default=2, help="long requests per client (bulk x-realtime)")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    load_before = os.getloadavg()
    alone_ms, alone_xrt = voice_alone(args.requests)
    cores = os.cpu_count() or 1
    procs_xrt = voice_alone_processes(cores, 2)
    port = args.port or free_port()
    proc = start_server(port, [], timeout_s=120)
    url = f"ws://127.0.0.1:{port}/v1/stream"
    try:
        asyncio.run(run(url, 1, 3, SHORT))  # warm-up
        short = [asyncio.run(run(url, c, args.requests, SHORT)) for c in (1, 2, 4)]
        bulks = [bulk(url, c, args.bulk_requests, proc.pid) for c in (1, 2, 4)]
    finally:
        stop_server(proc)
    lines = [
        ("| clients | requests | first audio p50 (ms) | p95 (ms) | server ttfa p50 (ms) | of which voice queue+gen "
         "p50 (ms) | server overhead p50 (ms) | x-realtime (short) | x-realtime (bulk) | bulk x-realtime per core | "
         "bulk audio s per CPU s |"),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, b in zip(short, bulks, strict=True):
        lines.append(f"| {s['clients']} | {s['n']} | {s['p50']:.1f} | {s['p95']:.1f} | {s['srv_p50']:.1f} | "
                     f"{s['gen_p50']:.1f} | {s['overhead_p50']:.1f} | "
                     f"{s['xrt']:.1f} | {b['xrt']:.1f} | {b['xrt'] / cores:.1f} | {b['per_cpu_s']:.1f} |")
    lines.append(f"| voice alone (no server, 1 thread) | {args.requests} | {alone_ms:.1f} | | | | | | "
                 f"{alone_xrt:.1f} | {alone_xrt:.1f} | |")
    lines.append(f"| voice alone (no server, {cores} processes) | {2 * cores} | | | | | | | {procs_xrt:.1f} | "
                 f"{procs_xrt / cores:.1f} | |")
    table = "\n".join(lines)
    print(table)
    cmd = "python bench/cpu_voice.py " + " ".join(sys.argv[1:])
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    md = (
        "# CPU voice through the server (WS /v1/stream)\n\n"
        f"- command: `{cmd.strip()}`\n- date: {now}\n- machine: {machine()}\n- versions: {versions()}\n"
        f"- load average before the run (1/5/15 min): {load_before[0]:.2f} / {load_before[1]:.2f} / "
        f"{load_before[2]:.2f} (other work on the same cores inflates latency)\n\n"
        f"Short request: \"{SHORT}\" (6 words); each client sends them back to back. First audio is measured "
        "in the client, from sending the request frame on an open connection to the first binary frame (the server's own ttfa_ms from "
        "the stats envelope is beside it, split into the first segment's wait + generation in the voice and the "
        f"server's own overhead: ttfa minus that). Bulk: a {len(LONG.split())}-word text per request; x-realtime = "
        "seconds of audio delivered / wall seconds, over all clients together; audio s per CPU s = the same audio "
        "/ CPU seconds (user + system) used meanwhile by the server and its voice processes, the per-core figure "
        "that other work on shared cores does not distort. The last rows are the voice "
        "alone in one thread of the benchmark process (whole-sentence synthesis time, raw padded audio), "
        "and the bulk text in one process per core, measured just before, as the floor and the ceiling for "
        "this machine at this moment. The server rows count delivered "
        "audio, after pacing removed the voice's padding (about 12% of the raw audio of the bulk text).\n\n"
        f"{table}\n"
    )
    out = REPO / "bench" / "results" / "cpu_voice.md"
    out.write_text(md)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
