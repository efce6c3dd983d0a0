"""Barge-in on the CPU voice (issue 13 item 9): how long from a client's cancel to the context's end message,
and how much audio still arrives after it.

For each trial a long reply streams; once some of its audio has arrived (a random 0.3-3 s), the client cancels
(with played_ms) and reads until the context's terminal message. Measured on the client:
- cancel -> done: from sending the cancel to receiving context.done (session mode) / the terminal frame
  (simple mode /v1/stream), wall ms;
- in flight: audio bytes of the context that arrived after the cancel was sent (sent by the server before it
  read the cancel);
- after the cancel was read: audio bytes received beyond what the server says it had sent when it applied the
  cancel (audio_sent_ms in context.done / the terminal frame): must be 0.
Session mode runs alone on its socket ("1 context") and beside 3 other contexts streaming long replies on the
same socket ("4 contexts").

Starts `realtime-tts serve` itself (the CPU voice), prints a table, writes bench/results/barge_in_cpu.md (with a
history table of earlier runs):
    .venv/bin/python bench/barge_in.py --trials 30
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import struct
import time
from importlib import metadata
from pathlib import Path

import numpy as np
from local_server import free_port, start_server, stop_server  # bench/local_server.py
from machine import cpu_model, git_commit, history_rows
from websockets.sync.client import ClientConnection, connect

REPO = Path(__file__).resolve().parents[1]
RATE = 24_000
HEADER = struct.Struct("<BBHHHII")
LONG = " ".join(f"This is sentence number {i} of a long answer that the listener is about to interrupt."
                for i in range(60))


def session_trial(ws: ClientConnection, cid: str, rng: random.Random, others: list[str]) -> dict[str, float]:
    """One barge-in on a session socket already open; others: contexts streaming beside it."""
    for other in others:
        ws.send(json.dumps({"type": "speak", "context_id": other, "text": LONG}))
    ws.send(json.dumps({"type": "speak", "context_id": cid, "text": LONG}))
    slots: dict[int, str] = {}
    target = int(rng.uniform(0.3, 3.0) * RATE * 2)
    got = 0
    in_flight = 0
    t_cancel = None
    done: dict[str, object] | None = None
    while done is None:
        msg = ws.recv(timeout=60)
        if isinstance(msg, bytes):
            slot = HEADER.unpack_from(msg)[2]
            if slots.get(slot) != cid:
                continue
            n = len(msg) - HEADER.size
            got += n
            if t_cancel is not None:
                in_flight += n
            elif got >= target:
                t_cancel = time.perf_counter()
                ws.send(json.dumps({"type": "cancel", "context_id": cid, "played_ms": got / 2 / RATE * 1e3 - 200}))
            continue
        obj = json.loads(msg)
        if obj["type"] == "context.started":
            slots[obj["slot"]] = obj["context_id"]
        elif obj["type"] == "context.done" and obj["context_id"] == cid:
            done = obj
    t_done = time.perf_counter()
    assert t_cancel is not None and done["reason"] == "cancelled", done
    for other in others:  # the others go on; stop them before the next trial
        ws.send(json.dumps({"type": "cancel", "context_id": other}))
    pending = set(others)
    while pending:
        msg = ws.recv(timeout=60)
        if isinstance(msg, str):
            obj = json.loads(msg)
            if obj["type"] == "context.done":
                pending.discard(obj["context_id"])
    return {"latency_ms": (t_done - t_cancel) * 1e3, "in_flight_bytes": in_flight,
            "after_read_bytes": got - round(float(done["audio_sent_ms"]) * RATE / 1e3) * 2}  # type: ignore[arg-type]


def simple_trial(url: str, rng: random.Random) -> dict[str, float]:
    with connect(url + "/v1/stream", max_size=None) as ws:
        ws.send(json.dumps({"text": LONG}))
        target = int(rng.uniform(0.3, 3.0) * RATE * 2)
        got = in_flight = 0
        t_cancel = None
        while True:
            msg = ws.recv(timeout=60)
            if isinstance(msg, bytes):
                got += len(msg)
                if t_cancel is not None:
                    in_flight += len(msg)
                elif got >= target:
                    t_cancel = time.perf_counter()
                    ws.send(json.dumps({"cancel": True, "played_ms": got / 2 / RATE * 1e3 - 200}))
                continue
            term = json.loads(msg)
            if term.get("done"):
                break
        t_done = time.perf_counter()
    assert t_cancel is not None and term["reason"] == "cancelled", term
    return {"latency_ms": (t_done - t_cancel) * 1e3, "in_flight_bytes": in_flight,
            "after_read_bytes": got - round(term["audio_sent_ms"] * RATE / 1e3) * 2}


def summarize(name: str, runs: list[dict[str, float]]) -> str:
    lat = np.array([r["latency_ms"] for r in runs])
    flight = np.array([r["in_flight_bytes"] for r in runs])
    after = np.array([r["after_read_bytes"] for r in runs])
    return (f"| {name} | {len(runs)} | {np.median(lat):.2f} | {np.percentile(lat, 95):.2f} | {lat.max():.2f} | "
            f"{np.median(flight):.0f} | {flight.max():.0f} | {after.max():.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--url", help="use a running server (ws://host:port) instead of starting one")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    proc = None
    url = args.url
    if url is None:
        port = free_port()
        proc = start_server(port, [])
        url = f"ws://127.0.0.1:{port}"
    try:
        rows = []
        for label, others in (("session, 1 context", 0), ("session, 4 contexts on the socket", 3)):
            with connect(url + "/v1/stream/text", max_size=None) as ws:
                ws.send(json.dumps({"type": "session.start"}))
                json.loads(ws.recv(timeout=30))
                runs = [session_trial(ws, f"t{i}", rng, [f"o{i}.{k}" for k in range(others)])
                        for i in range(args.trials)]
            rows.append(summarize(label, runs))
        rows.append(summarize("simple mode /v1/stream", [simple_trial(url, rng) for _ in range(args.trials)]))
    finally:
        if proc is not None:
            stop_server(proc)
    header = ("| mode | trials | cancel -> done p50 (ms) | p95 (ms) | max (ms) | in flight p50 (bytes) | "
              "in flight max (bytes) | after the cancel was read, max (bytes) |")
    table = "\n".join([header, "|---|---|---|---|---|---|---|---|", *rows])
    print(table)

    commit = git_commit(REPO)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("websockets", "uvicorn", "starlette", "hibari-tts"))
    out = REPO / "bench" / "results" / "barge_in_cpu.md"
    first = rows[0].split("|")
    history = [*history_rows(out),
               f"| {when} | {commit} | {first[3].strip()} | {first[5].strip()} | {first[8].strip()} |"]
    out.write_text(
        "# Barge-in on the CPU voice: cancel -> done, audio after cancel\n\n"
        f"- command: `python bench/barge_in.py --trials {args.trials}`\n"
        f"- date: {when}\n"
        f"- machine: {platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores\n"
        f"- versions: python {platform.python_version()}, {versions}, realtime_tts {commit}\n"
        f"- load average at the end (1/5/15 min): {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (other work "
        "on the same cores inflates the times)\n\n"
        "Client and server on 127.0.0.1, 24 kHz s16 audio, a 60-sentence reply cancelled after 0.3-3 s of its "
        "audio arrived (played_ms = received - 200 ms). \"cancel -> done\": client wall time from sending the "
        "cancel to receiving context.done (simple mode: the terminal frame). \"In flight\": audio of the context "
        "that arrived after the cancel was sent, i.e. that the server had sent before it read the cancel: the "
        "server sends audio as fast as the voice makes it (about 7x real time here), so this is the backlog in "
        "the client's own receive queue (websockets keeps up to 16 frames of 120 ms) and the socket buffers, "
        "not something the server can take back. \"After "
        "the cancel was read\": audio received beyond what the server reports it had sent when it applied the "
        "cancel (audio_sent_ms): the target is 0. Target for cancel -> done on the CPU voice: <= 20 ms.\n\n"
        f"{table}\n\n## History\n\n| date | commit | session 1 ctx p50 (ms) | max (ms) | after read max (bytes) |\n"
        "|---|---|---|---|---|\n" + "\n".join(history) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
