"""A burst of long HTTP requests at once (issue 17: "20 concurrent 5000-character mp3 requests are all accepted and
each builds the whole file in memory, server RSS 469 MB"): how many are served or refused, and the server's peak
RSS meanwhile.

    python bench/burst.py --clients 20 --chars 5000 --format mp3

Writes bench/results/burst_cpu.md (one table row per run, the history kept).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_server import free_port, start_server, stop_server  # bench/local_server.py
from machine import cpu_model, versions  # bench/machine.py

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "Every request in this burst carries a long text that takes minutes to speak aloud. "


async def one(client: httpx.AsyncClient, url: str, text: str, fmt: str, stream: bool) -> tuple[int, int]:
    async with client.stream("POST", url, json={"input": text, "response_format": fmt, "stream": stream}) as r:
        n = 0
        async for chunk in r.aiter_bytes():
            n += len(chunk)
        return r.status_code, n


async def burst(http: str, clients: int, chars: int, fmt: str, stream: bool, server: psutil.Process
                ) -> dict[str, float]:
    text = (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
    peak = rss0 = server.memory_info().rss
    done = False

    async def sample() -> None:
        nonlocal peak
        while not done:
            peak = max(peak, server.memory_info().rss)
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=1800) as client:
        results = await asyncio.gather(*(one(client, http + "/v1/audio/speech", text, fmt, stream)
                                         for _ in range(clients)))
    done = True
    await sampler
    return {"ok": sum(s == 200 for s, _ in results), "refused": sum(s == 503 for s, _ in results),
            "other": sum(s not in (200, 503) for s, _ in results), "wall_s": time.perf_counter() - t0,
            "rss0_mb": rss0 / 2**20, "peak_mb": peak / 2**20,
            "mb_out": sum(n for _, n in results) / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--chars", type=int, default=5000)
    ap.add_argument("--format", default="mp3")
    ap.add_argument("--buffered", action="store_true", help='"stream": false (one body with complete headers)')
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    port = free_port()
    proc = start_server(port, ["--cpu-workers", str(args.workers)], timeout_s=120)
    try:
        r = asyncio.run(burst(f"http://127.0.0.1:{port}", args.clients, args.chars, args.format, not args.buffered,
                              psutil.Process(proc.pid)))
    finally:
        stop_server(proc)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    row = (f"| {now} | {versions().rsplit(' ', 1)[-1]} | {args.clients} x {args.chars} chars {args.format}"
           f"{' buffered' if args.buffered else ' streamed'} | {args.workers} | {r['ok']} | {r['refused']} | "
           f"{r['other']} | {r['wall_s']:.0f} | {r['rss0_mb']:.0f} | {r['peak_mb']:.0f} | {r['mb_out']:.1f} |")
    print(row)
    out = REPO / "bench" / "results" / "burst_cpu.md"
    rows = [ln for ln in out.read_text().splitlines() if ln.startswith("| 20")] if out.exists() else []
    head = ["# A burst of long HTTP requests at once", "",
            "- command: `python bench/burst.py [--clients N --chars N --format F --buffered --workers N]`",
            f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} logical cores",
            f"- versions: {versions('hibari-tts', 'uvicorn', 'starlette', 'av')}", "",
            ("Server: `realtime-tts serve --cpu-workers W` started by the script; every client sends its request at "
             "once and reads the whole answer. peak RSS: the server process (not the voice workers), sampled every "
             "200 ms."), "",
            ("| date | commit | burst | workers | served | refused (503) | other | wall (s) | server RSS before (MB) | "
             "peak (MB) | MB sent |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    out.write_text("\n".join([*head, *rows, row, ""]))


if __name__ == "__main__":
    main()
