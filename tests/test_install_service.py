"""install-service renders a systemd unit + env file (into a temp root here), which systemd-analyze verify accepts
(skipped only when the binary is absent), with the settings given as flags in the env file and a stop timeout
that covers the drain."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from live_server import REPO


def install(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "realtime_tts.cli", "install-service", "--root", str(root), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def verify(unit: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here: the unit was rendered but not verified")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60,
                         check=False)
    ours = [ln for ln in (out.stdout + out.stderr).splitlines() if unit.name in ln]
    assert out.returncode == 0 and not ours, out.stdout + out.stderr


@pytest.mark.parametrize("user", [False, True])
def test_unit_and_env_file_render_and_verify(tmp_path: Path, user: bool) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[server]\nport = 8123\n")
    out = install(tmp_path / "root", *(["--user"] if user else []), "--no-start", "--no-enable", "--name", "tts-a",
                  "--config", str(config), "--cpu-workers", "3", "--drain-timeout-s", "45")
    assert out.returncode == 0, out.stderr
    units = list((tmp_path / "root").rglob("tts-a.service"))
    envs = list((tmp_path / "root").rglob("tts-a.env"))
    assert len(units) == 1 and len(envs) == 1
    unit, env = units[0].read_text(), envs[0].read_text()
    assert ("/systemd/user/" in str(units[0])) == user and ("/etc/systemd/system/" in str(units[0])) != user
    assert f"ExecStart={sys.executable} -m realtime_tts.cli serve --config {config}" in unit
    assert "TimeoutStopSec=77" in unit and "KillSignal=SIGTERM" in unit  # 45 s drain + 2 s grace + 30
    assert ("WantedBy=default.target" in unit) == user and ("User=" in unit) != user
    env_path = str(envs[0]).removeprefix(str(tmp_path / "root"))
    assert f"EnvironmentFile=-{env_path}" in unit
    assert "REALTIME_TTS_CPU_WORKERS=3\n" in env and "REALTIME_TTS_DRAIN_TIMEOUT_S=45\n" in env
    assert "# REALTIME_TTS_PORT=8000" in env  # not given: commented out with its default
    assert "wrote" in out.stdout and "systemctl" not in out.stdout  # --root runs no systemctl
    verify(units[0])


def test_bad_flag_writes_nothing(tmp_path: Path) -> None:
    out = install(tmp_path / "root", "--port", "0")
    assert out.returncode == 2 and "port" in out.stderr and not (tmp_path / "root").exists()
