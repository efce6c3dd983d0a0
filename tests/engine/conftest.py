"""Fixtures for the web-side OmniVoice engine tests (the GPU-worker client, the server): a background
event loop and a real `realtime-tts serve --model` server on a free port (the tiny checkpoint is the
session fixture in tests/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from live_server import Server, start_server, stop_server

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


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    lt = LoopThread()
    yield lt
    lt.close()


class OmniServer(Server):
    """A server started with --model: it also knows its spawned OmniVoice worker processes."""

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
    server = start_server(tmp_path_factory.mktemp("omni-server"), "--model", str(tiny_checkpoint), "--device", "cpu",
                          timeout_s=300, server_cls=OmniServer)
    yield server
    stop_server(server)
