"""Fixtures for the OmniVoice engine tests: a tiny random checkpoint, a background event loop, and a real
`realtime-tts serve --model` server on a free port."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a thread: module-scoped engines outlive one test; tests run coroutines on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="test-loop")
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from realtime_tts.model.checkpoint import build_random_checkpoint

    out = tmp_path_factory.mktemp("omnivoice-tiny")
    build_random_checkpoint(out, size="tiny", seed=0)
    return out


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


REPO = Path(__file__).resolve().parents[2]


@dataclass
class OmniServer:
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def worker_pids(self) -> list[int]:
        """Spawned worker processes of this server (children running multiprocessing's spawn_main)."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.proc.pid and b"spawn_main" in cmdline:
                pids.append(int(entry))
        return pids


@pytest.fixture(scope="module")
def omnivoice_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OmniServer]:
    """`realtime-tts serve --model <tiny> --device cpu` in a subprocess on a free port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    log_path = tmp_path_factory.mktemp("omni-server") / "server.log"
    cmd = [sys.executable, "-m", "realtime_tts.cli", "serve", "--port", str(port), "--log-level", "warning",
           "--model", str(tiny_checkpoint), "--device", "cpu"]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    server = OmniServer(port, proc, log_path)
    deadline = time.monotonic() + 300
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(server.http + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"server did not become healthy:\n{server.log()}")
        time.sleep(0.2)
    yield server
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
