"""Helpers for the server tests: start a real uvicorn server in a subprocess on a free port, talk to it with
real websockets / httpx clients, judge the audio it returns. (A uniquely named module, so it never clashes
with the conftest.py files of other test folders.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
import numpy as np
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

REPO = Path(__file__).resolve().parents[1]
SAMPLE_RATE = 24_000


def children(pid: int) -> list[int]:
    """The processes whose parent is pid (e.g. a server's voice workers), from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Loopback:
    """A server of these tests on 127.0.0.1:port."""

    port: int

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"


class InProcessServer(Loopback):
    """The real app on a real uvicorn, in a thread of the test process: for tests that put an engine of their
    own beside (or around) the real ones, e.g. `InProcessServer(lambda pool: pool.engines.update(...))`."""

    def __init__(self, setup: Any = None, *, env: dict[str, str] | None = None, **uvicorn_kw: Any) -> None:
        import uvicorn

        from realtime_tts.api import create_app
        from realtime_tts.config import load_config

        self.port = free_port()
        app = create_app(load_config(env=env or {}))
        self.app = app
        if setup is not None:
            setup(app.state.tts.pool)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    **uvicorn_kw))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@dataclass
class Server(Loopback):
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


S = TypeVar("S", bound=Server)


def start_server(tmp: Path, *extra: str, env: dict[str, str] | None = None, timeout_s: float = 120.0,
                 server_cls: type[S] = Server) -> S:  # type: ignore[assignment]
    port = free_port()
    log_path = tmp / f"server-{port}.log"
    cmd = [sys.executable, "-m", "realtime_tts.cli", "serve", "--port", str(port), "--log-level", "warning", *extra]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, cwd=REPO, env=full_env, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    server = server_cls(port, proc, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(server.http + "/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server did not become healthy:\n{server.log()}")


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.proc.kill()


@dataclass
class WsResult:
    frames: list[bytes] = field(default_factory=list)
    texts: list[dict[str, Any]] = field(default_factory=list)  # every JSON frame, in order
    close_code: int | None = None
    close_reason: str = ""

    @property
    def pcm(self) -> np.ndarray:
        return pcm_to_float(b"".join(self.frames))

    @property
    def terminal(self) -> dict[str, Any]:
        assert self.texts and self.texts[-1].get("done") is True, self.texts
        return self.texts[-1]


def ws_exchange(url: str, messages: list[dict[str, Any] | str | bytes], *, timeout: float = 60) -> WsResult:
    """Send every message (dicts as JSON), then read until the server closes."""
    out = WsResult()
    with connect(url, open_timeout=10, close_timeout=5, max_size=None) as ws:
        for m in messages:
            ws.send(json.dumps(m) if isinstance(m, dict) else m)
        try:
            while True:
                msg = ws.recv(timeout=timeout)
                if isinstance(msg, bytes):
                    out.frames.append(msg)
                else:
                    out.texts.append(json.loads(msg))
        except ConnectionClosed as e:
            if e.rcvd is not None:
                out.close_code, out.close_reason = e.rcvd.code, e.rcvd.reason
    return out


def pcm_to_float(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0


def decode_audio(data: bytes) -> tuple[np.ndarray, int]:
    """A whole encoded response (mp3, aac, flac, ogg/opus, wav) → (float32 mono samples, its rate), through FFmpeg
    (PyAV). Not libsndfile: it cannot read a streamed FLAC (no length) nor AAC, and its mp3 decoder returned
    NaN/1e13 garbage for one bit-identical 22.05 kHz stream in ~5% of decodes."""
    import io

    import av

    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    samples = np.concatenate([f.to_ndarray().reshape(len(f.layout.channels), -1)[0] for f in frames])
    if samples.dtype.kind == "i":  # s16/s32 decoders (FLAC, WAV)
        samples = samples.astype(np.float32) / float(np.iinfo(samples.dtype).max + 1)
    return samples.astype(np.float32, copy=False), frames[0].sample_rate


def metric(http: str, name: str, **labels: str) -> float:
    """The sum of the server's /metrics samples named realtime_tts_<name> whose labels include `labels` (0 when
    there are none yet), read with prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{http}/metrics", timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == f"realtime_tts_{name}" and labels.items() <= s.labels.items())


def assert_speech(samples: np.ndarray, *, min_s: float, max_s: float) -> None:
    """Real speech: duration in range, RMS sane, most 20 ms windows non-silent, no clipping."""
    dur = len(samples) / SAMPLE_RATE
    assert min_s <= dur <= max_s, f"duration {dur:.2f}s outside [{min_s}, {max_s}]"
    rms = float(np.sqrt(np.mean(samples.astype(np.float64) ** 2)))
    assert 0.01 < rms < 0.3, f"RMS {rms:.4f} is not speech-like"
    win = SAMPLE_RATE // 50
    n = len(samples) // win
    levels = np.abs(samples[: n * win]).reshape(n, win).max(axis=1)
    voiced = float(np.mean(levels > 10 ** (-40 / 20)))
    assert voiced > 0.6, f"only {voiced:.0%} of 20 ms windows are above -40 dBFS"
    assert float(np.mean(np.abs(samples) > 0.999)) < 0.001, "clipping"
