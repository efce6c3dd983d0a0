"""What the benchmark scripts print about the machine they ran on (one place for the /proc reading)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def versions(*packages: str) -> str:
    """'python X, <package> <version>, ..., realtime_tts <commit>' for a results file's header."""
    from importlib import metadata

    def v(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    commit = git_commit(Path(__file__).resolve().parents[1])
    return ", ".join([f"python {platform.python_version()}", *(f"{p} {v(p)}" for p in packages),
                      f"realtime_tts {commit}"])


def git_commit(repo: Path) -> str:
    """The short commit the benchmark ran at ("unknown" outside a git checkout)."""
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                              check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def history_rows(results_file: Path) -> list[str]:
    """The dated rows of a results file's "## History" table (none when the file or the table is absent), so a
    benchmark can write them back with its own row appended."""
    if not results_file.exists():
        return []
    text = results_file.read_text()
    if "## History" not in text:
        return []
    return [line for line in text.split("## History", 1)[1].splitlines() if line.startswith("| 20")]
