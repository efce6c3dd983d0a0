"""Slow and stopped WebSocket readers at the server's DEFAULT settings (keepalive ping 20 s / timeout 20 s,
--ws-max-audio-ahead-s 8, --ws-send-timeout-s 15), with a plain client socket (the kernel's own buffer sizes):
the figures behind issue 17's findings, at full scale (tests/test_ws_slow_readers.py runs the same at small
scale).

    python bench/ws_readers.py --audio-s 120

1. a client that plays what it receives (reads at playback speed, 0.5 s ahead): does a reply of --audio-s
   arrive in full, with the terminal frame?
2. a client that reads the first frame and then nothing: when does the server close it, with what frame and
   code, how much did the server's RSS grow meanwhile, is the voice idle after?
Writes bench/results/ws_readers_cpu.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
from pathlib import Path

import httpx
import psutil
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_server import free_port, start_server, stop_server  # bench/local_server.py
from machine import cpu_model, versions  # bench/machine.py

REPO = Path(__file__).resolve().parents[1]
RATE = 24_000
SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "  # ~3.3 s of speech


def paced(port: int, audio_s: float) -> dict[str, object]:
    text = SENTENCE * max(1, round(audio_s / 3.3))
    got, t0, terminal, close = 0, None, None, None
    with connect(f"ws://127.0.0.1:{port}/v1/stream", max_size=None) as ws:
        ws.send(json.dumps({"text": text, "seed": 1}))
        try:
            while True:
                msg = ws.recv(timeout=60)
                if isinstance(msg, str):
                    terminal = json.loads(msg)
                    continue
                t0 = t0 or time.monotonic()
                got += len(msg)
                ahead = got / 2 / RATE - (time.monotonic() - t0)
                if ahead > 0.5:
                    time.sleep(ahead - 0.5)
        except ConnectionClosed as e:
            close = e.rcvd.code if e.rcvd is not None else "none (abnormal)"
    return {"audio_s": round(got / 2 / RATE, 1), "wall_s": round(time.monotonic() - (t0 or time.monotonic()), 1),
            "terminal": (terminal or {}).get("reason", (terminal or {}).get("code")), "close": close}


def stopped(port: int, server: psutil.Process) -> dict[str, object]:
    text = SENTENCE * 300  # ~16 minutes of speech
    metrics = f"http://127.0.0.1:{port}/metrics"

    def metric(prefix: str) -> float:
        lines = httpx.get(metrics, timeout=10).text.splitlines()
        return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith(prefix))

    rss0 = server.memory_info().rss
    peak = rss0
    with connect(f"ws://127.0.0.1:{port}/v1/stream", max_size=None, max_queue=4) as ws:
        ws.send(json.dumps({"text": text, "seed": 1}))
        ws.recv(timeout=60)
        t0 = time.monotonic()
        while metric('realtime_tts_limit_refusals_total{limit="ws_send_timeout"}') < 1:
            peak = max(peak, server.memory_info().rss)
            if time.monotonic() - t0 > 600:
                return {"closed_after_s": None}
            time.sleep(0.5)
        closed_after = time.monotonic() - t0
        err, code = None, None
        try:
            while True:
                msg = ws.recv(timeout=10)
                if isinstance(msg, str):
                    err = json.loads(msg)
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else "none (transport cut)"
        except TimeoutError:
            code = "no close within 10 s"
    time.sleep(1)
    return {"closed_after_s": round(closed_after, 1), "frame": (err or {}).get("code"), "close": code,
            "rss_growth_mb": round((peak - rss0) / 2**20, 1),
            "voice_idle_after": metric('realtime_tts_pool_idle{engine="cpu"}') == 1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--audio-s", type=float, default=120.0)
    args = ap.parse_args()
    port = free_port()
    proc = start_server(port, ["--cpu-workers", "1"], timeout_s=120)
    try:
        p = paced(port, args.audio_s)
        st = stopped(port, psutil.Process(proc.pid))
    finally:
        stop_server(proc)
    commit = versions().rsplit(" ", 1)[-1]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    rows = [
        "| client | result |", "|---|---|",
        (f"| reads at playback speed | {p['audio_s']} s of audio in {p['wall_s']} s, terminal reason "
         f"{p['terminal']}, close {p['close']} |"),
        (f"| stops reading after the first frame | closed {st['closed_after_s']} s later; frame {st.get('frame')}, "
         f"close {st.get('close')}; server RSS +{st.get('rss_growth_mb')} MB meanwhile; voice idle after: "
         f"{st.get('voice_idle_after')} |"),
    ]
    print("\n".join(rows))
    md = ["# WebSocket readers at the default settings", "",
          f"- command: `python bench/ws_readers.py {' '.join(sys.argv[1:])}`".rstrip(), f"- date: {now}",
          f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} logical cores",
          (f"- commit: {commit}; server: `realtime-tts serve --cpu-workers 1` (keepalive ping 20 s / timeout 20 s, "
           "--ws-max-audio-ahead-s 8, --ws-send-timeout-s 15), client: websockets sync client, default socket "
           "buffers"), "", *rows, ""]
    (REPO / "bench" / "results" / "ws_readers_cpu.md").write_text("\n".join(md))


if __name__ == "__main__":
    main()
