"""The command line (one flag per config field, env prefix) and the example client, against a real server."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from live_server import REPO, SAMPLE_RATE, Server, assert_speech, start_server, stop_server, ws_exchange

from realtime_tts import cli, config


def test_every_config_field_has_a_flag() -> None:
    parser = cli.build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    flags = {opt for action in serve._actions for opt in action.option_strings}
    for _, name, _, _ in config.field_docs():
        assert "--" + name.replace("_", "-") in flags


def test_env_is_read_and_flags_win(tmp_path: Path) -> None:
    env = {"REALTIME_TTS_CPU_WORKERS": "2", "REALTIME_TTS_MAX_TEXT_CHARS": "10"}
    srv = start_server(tmp_path, "--cpu-workers", "1", "--ws-idle-timeout-s", "0.5", env=env)
    try:
        assert httpx.get(srv.http + "/health").json()["engines"]["cpu"]["pool_size"] == 1  # the flag won
        r = httpx.post(srv.http + "/v1/synth", json={"text": "Longer than ten characters."})
        assert r.status_code == 400 and "at most 10" in r.json()["error"]["message"]  # the env was read
        # idle clients are closed with 4008: one that never sends its request, one that stops sending text
        silent = ws_exchange(f"{srv.ws}/v1/stream", [], timeout=10)
        stalled = ws_exchange(f"{srv.ws}/v1/stream/text", [{"seed": 1}, {"text": "Hi. "}], timeout=10)
        for w in (silent, stalled):
            assert w.close_code == 4008 and w.texts[-1]["code"] == "idle_timeout"
    finally:
        stop_server(srv)


def test_bad_flag_value_is_a_clear_error() -> None:
    out = subprocess.run([sys.executable, "-m", "realtime_tts.cli", "serve", "--port", "99999"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "port" in out.stderr and "99999" in out.stderr


@pytest.mark.parametrize("mode", [[], ["--tokens"], ["--http"]])
def test_example_client_saves_speech(server: Server, tmp_path: Path, mode: list[str]) -> None:
    out = tmp_path / "out.wav"
    r = subprocess.run([sys.executable, str(REPO / "clients" / "say.py"), "--server", f"127.0.0.1:{server.port}",
                        "--out", str(out), "--seed", "3", *mode, "Hello from the example client. It works."],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    with wave.open(str(out)) as w:
        assert w.getframerate() == SAMPLE_RATE
        samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32767
    assert_speech(samples, min_s=1.5, max_s=5.0)


def test_docs_list_every_flag() -> None:
    text = (REPO / "docs" / "server.md").read_text()
    for _, name, _, _ in config.field_docs():
        assert f"`--{name.replace('_', '-')}`" in text and f"`REALTIME_TTS_{name.upper()}`" in text, name
