"""bench/load.py stays runnable: a bounded run of every mode against the session's real server (the figures
are not judged here: benchmarks measure, tests check that they run and report), and its loopback guard."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from live_server import REPO, Server

LOAD = REPO / "bench" / "load.py"


def test_every_mode_runs_and_reports(server: Server, tmp_path: Path) -> None:
    old = "| 2026-01-01 | abc1234 | earlier run | cpu | 1.00 (1.0x, 1.000) [1@1 short] | 1, 1, 0 | – | – |"
    (tmp_path / "t.md").write_text(f"# Load test\n\n## History\n\n| date | ... |\n|---|\n{old}\n")
    r = subprocess.run([sys.executable, str(LOAD), "--url", server.http, "--speech", "3@6", "--shape", "mixed",
                        "--agents", "2", "--turns", "2", "--barge-in", "1.0", "--sweep-rate", "2",
                        "--sweep-requests-s", "1", "--name", "t", "--out-dir", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    md = (tmp_path / "t.md").read_text()
    assert "## (a) /v1/audio/speech" in md and "| 3 | 6 | mixed" in md
    assert "## (b) Agents" in md and "| 2 | 4/4 |" in md  # 2 agents x 2 turns, every turn ok
    assert "**Sweep (rate)**" in md
    history = md[md.index("## History"):].splitlines()
    assert old in history and history[-1].startswith("| 20") and history[-1] != old  # kept + this run's row
    try:
        import matplotlib  # noqa: F401 — the `bench` extra
    except ImportError:
        return
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refuses_a_remote_server_by_default(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(LOAD), "--url", "http://192.0.2.1:8000", "--agents", "1",
                        "--out-dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode != 0 and "not a loopback address" in r.stderr


def test_a_started_server_reports_cpu_seconds_and_its_event_loop_profile(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(LOAD), "--speech", "4@8", "--shape", "short", "--profile-web",
                        "--name", "p", "--out-dir", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=240, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    md = (tmp_path / "p.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| speech 4 @ 8/s"))
    web, workers, client = (float(x) for x in row.split("|")[-3].split("/"))
    assert web > 0 and workers > 0 and client > 0  # the CPU voice's worker processes are the server's children
    assert "## Event loop profile" in md and "(cpu clock)" in md
    table = md[md.index("## Event loop profile"):]
    assert "ncalls" in table and "realtime_tts/" in table  # our code shows in the top 30
    assert (tmp_path / "p.web_profile.txt.pstats").stat().st_size > 0
