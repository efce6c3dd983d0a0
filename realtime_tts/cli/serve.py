"""`realtime-tts serve`: run the HTTP/WebSocket server in the foreground, or with --daemon in the background.

Either way the process writes a pid file (--pid-file, default lifecycle.default_pid_file(port)) that
`realtime-tts stop` reads, and SIGTERM drains it (lifecycle.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from realtime_tts import config as config_mod
from realtime_tts.cli import options
from realtime_tts.loop_profile import LoopProfile


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="start the HTTP/WebSocket server",
                       description="Start the server. Settings: defaults <- config file <- "
                                   f"{config_mod.ENV_PREFIX}<FIELD> env vars <- flags (later wins).")
    p.add_argument("--daemon", action="store_true",
                   help="start in the background (own session, output to --log-file) and return once it answers")
    p.add_argument("--pid-file", type=Path, default=None,
                   help="where the pid goes (default: $XDG_RUNTIME_DIR or /tmp, realtime-tts-<port>.pid)")
    p.add_argument("--log-file", type=Path, default=None,
                   help="--daemon: where its output goes (default: the pid file's name with .log)")
    p.add_argument("--profile-web", type=Path, default=None, metavar="PATH",
                   help="profile the web process's event loop thread (cProfile) and write its top functions to "
                        "PATH (and PATH.pstats) at shutdown; slows the loop down: for measurements only")
    p.add_argument("--profile-web-clock", choices=("cpu", "wall"), default="cpu",
                   help="--profile-web times the loop thread's CPU (cpu) or wall time inside calls, GIL waits "
                        "included (wall)")
    options.add_config_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cfg = options.load(args)
    if cfg is None:
        return 2
    if args.daemon:
        return daemonize(args, cfg)
    profile = LoopProfile(args.profile_web, clock=args.profile_web_clock) if args.profile_web else None
    return serve(cfg, args.pid_file, profile)


def serve(cfg: config_mod.Config, pid_file: Path | None = None, profile: LoopProfile | None = None) -> int:
    from realtime_tts import lifecycle, logs
    from realtime_tts.api import create_app

    log_config = logs.setup(cfg)
    app = create_app(cfg)
    lifecycle.run(app, app.state.drain, cfg, pid_file or lifecycle.default_pid_file(cfg.server.port),
                  log_config=log_config, profile=profile)
    return 0


def daemonize(args: argparse.Namespace, cfg: config_mod.Config, ready_timeout_s: float = 600.0) -> int:
    """Start this command line again without --daemon in its own session; wait until it answers /health."""
    import httpx

    from realtime_tts import lifecycle

    pid_file = (args.pid_file or lifecycle.default_pid_file(cfg.server.port)).resolve()
    log_file = (args.log_file or pid_file.with_suffix(".log")).resolve()
    argv = [a for a in args.argv if a != "--daemon"]
    if "--pid-file" not in argv:
        argv += ["--pid-file", str(pid_file)]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "realtime_tts.cli", *argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    host = "127.0.0.1" if cfg.server.host in ("0.0.0.0", "::", "") else cfg.server.host
    url = f"http://{host}:{cfg.server.port}/health"
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            print(f"realtime-tts: the server exited with {proc.returncode}; see {log_file}", file=sys.stderr)
            return 1
        try:
            status = httpx.get(url, timeout=2).json().get("status")
            print(f"realtime-tts: serving on {cfg.server.host}:{cfg.server.port} (pid {proc.pid}, status {status}); "
                  f"pid file {pid_file}, log {log_file}")
            return 0
        except (httpx.HTTPError, ValueError):
            time.sleep(0.2)
    print(f"realtime-tts: pid {proc.pid} did not answer {url} within {ready_timeout_s:g} s; see {log_file}",
          file=sys.stderr)
    return 1
