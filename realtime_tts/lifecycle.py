"""The serving process's lifecycle: uvicorn with a draining shutdown, the pid file, and finding a running server.

Shutdown (SIGTERM or SIGINT): stop accepting (listening sockets closed, /health answers 503 "draining"), let
in-flight requests finish for up to drain_timeout_s, close what is left (api/drain.py: WS error frame + 1001),
reset connections that do not take their close within close_grace_s (a client that stopped reading), then stop
the engine pool, so no worker process outlives the server. A second signal skips the waiting.
Imports api.drain and uvicorn; the CLI (cli/serve.py, cli/stop.py) is the only user.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from realtime_tts.api.drain import Drain
from realtime_tts.config import Config
from realtime_tts.loop_profile import LoopProfile

log = logging.getLogger("realtime_tts.lifecycle")


class DrainingServer(uvicorn.Server):
    """uvicorn.Server whose shutdown drains (uvicorn's own closes WebSockets at once with 1012 and then waits
    without a bound for clients that stopped reading)."""

    def __init__(self, config: uvicorn.Config, drain: Drain, cfg: Config, pid_file: Path,
                 profile: LoopProfile | None = None):
        super().__init__(config)
        self.drain = drain
        self.profile = profile
        self.pid_file = PidFile(pid_file)
        self.drain_timeout_s = cfg.shutdown.drain_timeout_s
        self.close_grace_s = cfg.shutdown.close_grace_s

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.profile is not None:
            self.profile.start()  # on the loop thread, before the engines start
        await super().startup(sockets)
        if not self.should_exit:  # bound and serving: now the pid file names a server (not one that failed to bind)
            self.pid_file.write()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # any second SIGTERM/SIGINT forces (uvicorn forces on a second SIGINT only)
        if self.should_exit:
            self.force_exit = True
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        log.info("shutting down: draining for up to %g s (send the signal again to skip)", self.drain_timeout_s)
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        self.drain.begin()
        for conn in list(self.server_state.connections):
            if not _is_websocket(conn):
                conn.shutdown()  # HTTP: idle keep-alive connections close now, busy ones after their response
        drained = await self.drain.wait(self.drain_timeout_s, lambda: self.force_exit)
        grace = 0.0 if self.force_exit else self.close_grace_s
        if not drained:
            await self.drain.expire_all(grace)
        # whatever is still connected did not take its close (or is an idle HTTP keep-alive): reset it
        for conn in list(self.server_state.connections):
            transport = getattr(conn, "transport", None)
            if transport is not None and not transport.is_closing():
                transport.abort()
        await asyncio.sleep(0.05)
        for task in list(self.server_state.tasks):
            task.cancel()
        # The engine pool stops even when forced (uvicorn skips the lifespan shutdown then): its workers must
        # not outlive the server.
        try:
            await asyncio.wait_for(self.lifespan.shutdown(), 30)
        except TimeoutError:
            log.error("engine pool did not stop within 30 s")
        log.info("shutdown complete%s", "" if drained else " (drain time over or forced)")
        if self.profile is not None:
            self.profile.stop()
        # uvicorn would re-raise the signal after serve() and die by it, skipping the pid file's removal: a
        # drained shutdown is a normal exit (status 0)
        getattr(self, "_captured_signals", []).clear()
        self.pid_file.remove()


def _is_websocket(conn: Any) -> bool:
    return type(conn).__module__.startswith("uvicorn.protocols.websockets")


def run(app: Any, drain: Drain, cfg: Config, pid_file: Path, *, log_config: dict[str, Any] | None = None,
        profile: LoopProfile | None = None) -> None:
    """Serve until a signal drains and stops the server. profile: the event loop thread's profile, written at
    shutdown (`serve --profile-web`)."""
    server_cfg = uvicorn.Config(
        app, host=cfg.server.host, port=cfg.server.port, log_level=cfg.server.log_level,
        # 16x the app's frame limit: frames between the two get the app's error frame before the 1009 close
        # (api/simple_ws); only larger ones are cut by the protocol layer itself (counted all the same)
        ws_max_size=16 * cfg.server.max_ws_message_bytes, lifespan="on",
        # PCM barely compresses: per-message deflate only burned a fifth of the event loop's time
        ws_per_message_deflate=False,
        log_config=log_config,
        access_log=False)  # api/access_log.py writes one line per request instead
    server = DrainingServer(server_cfg, drain, cfg, pid_file, profile)
    try:
        server.run()
    finally:
        server.pid_file.remove()
        if profile is not None:
            profile.stop()  # a shutdown that did not get that far (no-op after a normal one)


# Pid files and finding a server ---------------------------------------------------------------------------------

def default_pid_file(port: int) -> Path:
    """Per port, so `stop --port` finds it: $XDG_RUNTIME_DIR (systemd's per-user runtime dir) else the temp dir."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(base) / f"realtime-tts-{port}.pid"


class PidFile:
    """Written once the server is bound, removed at exit (only if it still holds our pid). One naming another live
    process is overwritten with a warning: that pid was reused (a live server would hold the port we just bound)."""

    def __init__(self, path: Path):
        self.path = path

    def write(self) -> None:
        other = read_pid(self.path)
        if other is not None and other != os.getpid() and alive(other):
            log.warning("pid file %s named running process %d; overwriting", self.path, other)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        if read_pid(self.path) == os.getpid():
            self.path.unlink(missing_ok=True)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def pid_listening_on(port: int) -> int | None:
    """The process with a TCP socket listening on this port (Linux /proc; None when not found or not ours)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, state, inode = parts[1], parts[3], parts[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(proc.name)
        except OSError:
            continue
    return None


