"""`realtime-tts stop`: SIGTERM a running server (found by its pid file, or by the port it listens on) and wait
while it drains; a second SIGTERM after --timeout forces it."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("stop", help="stop a running server (drains in-flight streams first)",
                       description="Send SIGTERM to a server and wait until it has drained and exited.")
    p.add_argument("--pid-file", type=Path, default=None, help="the server's pid file")
    p.add_argument("--port", type=int, default=8000,
                   help="find the server by port: its default pid file, else the process listening there "
                        "(default 8000)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the drain before a second SIGTERM forces the exit (default 60)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from realtime_tts import lifecycle

    pid_file = args.pid_file or lifecycle.default_pid_file(args.port)
    pid = lifecycle.read_pid(pid_file)
    how = f"pid file {pid_file}"
    if pid is None or not lifecycle.alive(pid):
        if args.pid_file is not None:
            print(f"realtime-tts: no running server in {pid_file}", file=sys.stderr)
            return 1
        pid, how = lifecycle.pid_listening_on(args.port), f"port {args.port}"
    if pid is None:
        print(f"realtime-tts: no server found (no live pid in {pid_file}, nothing of ours listening on port "
              f"{args.port})", file=sys.stderr)
        return 1
    print(f"realtime-tts: stopping pid {pid} (found by {how}); waiting up to {args.timeout:g} s for the drain")
    t0 = time.monotonic()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        print("realtime-tts: it had already exited")
        return 0
    if _wait_gone(pid, args.timeout):
        print(f"realtime-tts: stopped after {time.monotonic() - t0:.1f} s")
        return 0
    print("realtime-tts: drain time over; forcing (second SIGTERM)")
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, 30):
        print(f"realtime-tts: stopped (forced) after {time.monotonic() - t0:.1f} s")
        return 0
    print(f"realtime-tts: pid {pid} is still running", file=sys.stderr)
    return 1


def _wait_gone(pid: int, timeout: float) -> bool:
    from realtime_tts import lifecycle

    deadline = time.monotonic() + timeout
    while lifecycle.alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
