"""Start `realtime-tts serve` on a free port for a benchmark, and stop it (barge_in.py, load.py and through it
omnivoice_serve.py; soak.py, ws_readers.py, burst.py)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(port: int, extra: list[str], *, timeout_s: float = 900,
                 output: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """The server with `extra` CLI flags, once GET /health says ok. output: a file that takes the server's
    stdout and stderr (its workers' logs too) instead of this process's."""
    cmd = [sys.executable, "-m", "realtime_tts.cli", "serve", "--port", str(port), "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=output, stderr=subprocess.STDOUT if output is not None else None)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("server did not become healthy")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
