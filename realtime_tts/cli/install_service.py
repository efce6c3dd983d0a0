"""`realtime-tts install-service`: a systemd unit (system-wide, or --user) running `serve` from this Python
environment, and an env file of REALTIME_TTS_* settings beside it; then enable + start it unless told not to.

The unit stops the server with SIGTERM (it drains, lifecycle.py) and gives it drain_timeout_s + close_grace_s
+ 30 s before systemd kills what is left (KillMode=mixed: the server stops its own workers first).
--root DIR renders every file under DIR and runs no systemctl (how the tests and packagers use it).
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import subprocess
import sys
from pathlib import Path

from realtime_tts import config as config_mod
from realtime_tts.cli import options


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("install-service", help="write a systemd unit + env file, enable and start it",
                       description="Install realtime-tts as a systemd service. Config flags given here go into "
                                   "the env file (REALTIME_TTS_*); --config is passed to serve.")
    p.add_argument("--user", action="store_true", help="a user unit (~/.config/systemd/user; systemctl --user)")
    p.add_argument("--no-start", action="store_true", help="do not start (or restart) the service")
    p.add_argument("--no-enable", action="store_true", help="do not enable the service at boot / login")
    p.add_argument("--name", default="realtime-tts", help="unit name without .service (default realtime-tts)")
    p.add_argument("--run-as", default=None, help="system unit: the user it runs as (default: the invoking "
                                                  "user, or $SUDO_USER under sudo)")
    p.add_argument("--root", type=Path, default=None,
                   help="write every file under this directory instead of / and run no systemctl")
    options.add_config_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    cfg = options.load(args)  # validates the flags before anything is written
    if cfg is None:
        return 2
    paths = unit_paths(args.name, user=args.user)
    root = args.root
    unit_path = _under(root, paths["unit"])
    env_path = _under(root, paths["env"])
    run_as = None if args.user else (args.run_as or os.environ.get("SUDO_USER") or getpass.getuser())
    config_arg = str(Path(args.config).resolve()) if args.config else None
    unit_path.parent.mkdir(parents=True, exist_ok=True)
    env_path.parent.mkdir(parents=True, exist_ok=True)
    unit_path.write_text(render_unit(cfg, env_file=paths["env"], user=args.user, run_as=run_as,
                                     config_file=config_arg))
    env_path.write_text(render_env(options.flag_overrides(args)))
    env_path.chmod(0o640)  # may hold settings an operator keeps private
    print(f"wrote {unit_path}")
    print(f"wrote {env_path}")
    if root is not None:
        return 0
    systemctl = ["systemctl", *(["--user"] if args.user else [])]
    steps = [[*systemctl, "daemon-reload"]]
    if not args.no_enable:
        steps.append([*systemctl, "enable", f"{args.name}.service"])
    if not args.no_start:
        steps.append([*systemctl, "restart", f"{args.name}.service"])
    for cmd in steps:
        print("$ " + shlex.join(cmd))
        if subprocess.run(cmd, check=False).returncode != 0:
            print(f"realtime-tts: {shlex.join(cmd)} failed", file=sys.stderr)
            return 1
    print(f"logs: journalctl {'--user ' if args.user else ''}-u {args.name} -f; "
          f"stop: systemctl {'--user ' if args.user else ''}stop {args.name} (drains first)")
    return 0


def unit_paths(name: str, *, user: bool) -> dict[str, Path]:
    if user:
        conf = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return {"unit": conf / "systemd" / "user" / f"{name}.service", "env": conf / "realtime-tts" / f"{name}.env"}
    return {"unit": Path("/etc/systemd/system") / f"{name}.service", "env": Path("/etc/realtime-tts") / f"{name}.env"}


def _under(root: Path | None, path: Path) -> Path:
    return path if root is None else root / path.relative_to(path.anchor)


def render_unit(cfg: config_mod.Config, *, env_file: Path, user: bool, run_as: str | None,
                config_file: str | None) -> str:
    exec_start = [sys.executable, "-m", "realtime_tts.cli", "serve"]
    if config_file:
        exec_start += ["--config", config_file]
    stop_s = int(cfg.shutdown.drain_timeout_s + cfg.shutdown.close_grace_s + 30)
    lines = [
        "[Unit]",
        "Description=realtime_tts: realtime text-to-speech server (HTTP + WebSocket)",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=exec",
        f"EnvironmentFile=-{env_file}",
        # the pid file goes to the service's runtime directory (stop --pid-file finds it there)
        "RuntimeDirectory=realtime-tts",
        "Environment=XDG_RUNTIME_DIR=%t",
        f"ExecStart={shlex.join(exec_start)}",
        "KillSignal=SIGTERM",
        "KillMode=mixed",
        f"TimeoutStopSec={stop_s}",
        "Restart=on-failure",
        "RestartSec=2",
        "NoNewPrivileges=true",
    ]
    if run_as and not user:
        lines.append(f"User={run_as}")
    lines += ["", "[Install]", f"WantedBy={'default.target' if user else 'multi-user.target'}", ""]
    return "\n".join(lines)


def render_env(given: dict[str, object]) -> str:
    """The settings given as flags, then every other setting commented out with its default."""
    lines = ["# realtime-tts settings (systemd EnvironmentFile); flags and a config file can set these too.",
             "# Precedence: defaults <- config file <- these variables <- flags in ExecStart."]
    for _section, name, default, doc in config_mod.field_docs():
        key = config_mod.ENV_PREFIX + name.upper()
        if name in given:
            lines.append(f"{key}={given[name]}")
        else:
            lines.append(f"# {key}={'' if default is None else default}    # {doc[:90]}")
    return "\n".join(lines) + "\n"
