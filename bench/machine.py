"""What the benchmark scripts print about the machine they ran on (one place for the /proc reading)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def versions(*packages: str) -> str:
    """'python X, <package> <version>, ..., realtime_tts <commit>' for a results file's header."""
    import subprocess
    from importlib import metadata

    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    repo = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                            check=False).stdout.strip()
    return ", ".join([f"python {platform.python_version()}", *(f"{p} {v(p)}" for p in packages),
                      f"realtime_tts {commit}"])


def serve(port: int, *args: str, env: dict[str, str] | None = None, timeout_s: float = 120.0) -> Any:
    """`realtime-tts serve` of this checkout on 127.0.0.1:port (its log in the temp dir), once /health says 200;
    returns the Popen. The caller terminates it."""
    import os
    import subprocess
    import sys
    import tempfile
    import time

    import httpx

    repo = Path(__file__).resolve().parents[1]
    log = open(Path(tempfile.gettempdir()) / f"bench-server-{port}.log", "wb")  # noqa: SIM115 — as long as the server
    proc = subprocess.Popen([sys.executable, "-m", "realtime_tts.cli", "serve", "--port", str(port), "--log-level",
                             "warning", *args], cwd=repo, env={**os.environ, "PYTHONPATH": str(repo), **(env or {})},
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}; log: {log.name}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"server did not become healthy; log: {log.name}")


def git_commit(repo: Path) -> str:
    """The short commit the benchmark ran at ("unknown" outside a git checkout)."""
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"
