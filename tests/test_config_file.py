"""The TOML config file beside env vars and flags: precedence, sections read from the dataclasses, errors that
name the key, the default location, and the CLI's --config."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from live_server import REPO

from realtime_tts import config
from realtime_tts.cli import build_parser, options


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_precedence_defaults_file_env_flags(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 9001\nlog_level = 'debug'\nhost = '0.0.0.0'\n"
                           "[pacing]\ngap_ms = 300\n[shutdown]\ndrain_timeout_s = 5\n")
    env = {"REALTIME_TTS_PORT": "9002", "REALTIME_TTS_LOG_LEVEL": "warning"}
    cfg = config.load_config({"port": "9003"}, env=env, config_file=path)
    assert cfg.server.port == 9003            # flag beats env and file
    assert cfg.server.log_level == "warning"  # env beats file
    assert cfg.server.host == "0.0.0.0"       # file beats default
    assert cfg.pacing.gap_ms == 300 and cfg.shutdown.drain_timeout_s == 5.0
    assert cfg.pacing.tail_ms == config.PacingConfig().tail_ms  # untouched default


def test_every_field_of_every_section_is_accepted(tmp_path: Path) -> None:
    """The loader reads the sections and keys from the dataclasses: a file setting every field to its default
    (None fields left out: TOML has no null) loads and equals the defaults, so a field added later works too."""
    import tomllib  # noqa: F401  (the writer below emits only what tomllib reads back)

    lines = []
    for section, cls in config.sections().items():
        lines.append(f"[{section}]")
        for f in dataclasses.fields(cls):
            value = getattr(cls(), f.name)
            if value is None:
                continue
            if isinstance(value, bool):
                lines.append(f"{f.name} = {'true' if value else 'false'}")
            elif isinstance(value, str):
                lines.append(f"{f.name} = {value!r}".replace("'", '"'))
            elif isinstance(value, int | float):
                lines.append(f"{f.name} = {value!r}")
            elif isinstance(value, tuple | list):
                lines.append(f"{f.name} = {list(value)!r}".replace("'", '"'))
    cfg = config.load_config(env={}, config_file=write(tmp_path, "\n".join(lines)))
    assert cfg == config.load_config(env={"REALTIME_TTS_CONFIG": ""})


@pytest.mark.parametrize("text, needle", [
    ("[server]\nprot = 1\n", "unknown key 'prot' in [server]"),
    ("[serv]\nport = 1\n", "unknown section [serv]"),
    ("port = 1\n", "unknown section [port]"),
    ("[server]\nport = '8000'\n", "[server] port: expected int, got str"),
    ("[logging]\nlog_requests = 1\n", "[logging] log_requests: expected bool"),
    ("[server]\nport = 99999\n", "port must be 1..65535, got 99999"),
    ("[server\n", "config.toml"),
])
def test_file_errors_name_the_key(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(config.ConfigError) as e:
        config.load_config(env={}, config_file=write(tmp_path, text))
    assert needle in str(e.value)


def test_default_location_and_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[text]\nmax_text_chars = 77\n")
    assert config.load_config(env={"REALTIME_TTS_CONFIG": str(path)}).text.max_text_chars == 77
    assert config.load_config(env={"REALTIME_TTS_CONFIG": ""}).text.max_text_chars == 50_000
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load_config(env={"REALTIME_TTS_CONFIG": str(tmp_path / "missing.toml")})
    home = tmp_path / "home"
    (home / ".config" / "realtime-tts").mkdir(parents=True)
    (home / ".config" / "realtime-tts" / "config.toml").write_text("[text]\nmax_text_chars = 66\n")
    monkeypatch.setenv("HOME", str(home))
    assert config.find_config_file({}) == home / ".config" / "realtime-tts" / "config.toml"
    assert config.load_config(env={}).text.max_text_chars == 66


def test_cli_config_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "[server]\nport = 9100\n[cpu]\ncpu_workers = 3\n")
    args = build_parser().parse_args(["serve", "--config", str(path), "--cpu-workers", "2"])
    cfg = options.load(args)
    assert cfg is not None and cfg.server.port == 9100 and cfg.cpu.cpu_workers == 2
    bad = write(tmp_path, "[server]\nbogus = 1\n")
    out = subprocess.run([sys.executable, "-m", "realtime_tts.cli", "serve", "--config", str(bad)], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "unknown key 'bogus' in [server]" in out.stderr
