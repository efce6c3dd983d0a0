"""serve --daemon, stop (by pid file and by port), and the request log lines (JSON, ids, no text unless asked),
through the real CLI in subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from live_server import REPO, free_port, ws_exchange

from realtime_tts.lifecycle import alive

SECRET = "Purple elephants whisper quietly."


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "realtime_tts.cli", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, check=False)


def daemon(tmp_path: Path, port: int, *extra: str) -> tuple[int, Path, Path]:
    pid_file, log_file = tmp_path / f"rt-{port}.pid", tmp_path / f"rt-{port}.log"
    out = cli("serve", "--daemon", "--port", str(port), "--pid-file", str(pid_file), "--log-file", str(log_file),
              "--cpu-workers", "1", *extra)
    assert out.returncode == 0, out.stderr
    assert f"serving on 127.0.0.1:{port}" in out.stdout
    return int(pid_file.read_text()), pid_file, log_file


def test_daemon_json_request_log_and_stop_by_pid_file(tmp_path: Path) -> None:
    port = free_port()
    pid, pid_file, log_file = daemon(tmp_path, port, "--log-format", "json")
    try:
        base = f"http://127.0.0.1:{port}"
        r = httpx.post(base + "/v1/audio/speech", json={"input": SECRET, "response_format": "wav"},
                       headers={"X-Request-Id": "req-from-nginx-1"}, timeout=60)
        assert r.status_code == 200
        bad = httpx.post(base + "/v1/synth", json={"text": SECRET, "speed": 99}, timeout=30)
        assert bad.status_code == 400
        ws = ws_exchange(f"ws://127.0.0.1:{port}/v1/stream", [{"text": SECRET, "seed": 1}])
        assert ws.close_code == 1000
        # a frame naming a context (session mode's context_id; simple mode ignores it with a warning) is logged
        tagged = ws_exchange(f"ws://127.0.0.1:{port}/v1/stream/text",
                             [{"seed": 1, "context_id": "ctx-7"}, {"text": SECRET}, {"end": True}])
        assert tagged.close_code == 1000
        out = cli("stop", "--pid-file", str(pid_file))
        assert out.returncode == 0 and "stopped after" in out.stdout, out.stdout + out.stderr
        assert not alive(pid) and not pid_file.exists()
        lines = [json.loads(line) for line in log_file.read_text().splitlines() if line.startswith("{")]
        assert lines and len(lines) == len([ln for ln in log_file.read_text().splitlines() if ln.strip()])
        access = [ln for ln in lines if ln["logger"] == "realtime_tts.access"]
        speech = next(ln for ln in access if ln["path"] == "/v1/audio/speech")
        assert speech["request_id"] == "req-from-nginx-1" and speech["status"] == 200 and speech["outcome"] == "ok"
        assert speech["synth_id"] == r.headers["x-request-id"]
        assert speech["t_total_ms"] >= speech["first_byte_ms"] > 0  # streamed: totals are not in its headers
        synth = next(ln for ln in access if ln["path"] == "/v1/synth")
        assert synth["status"] == 400 and synth["outcome"] == "bad_request" and len(synth["request_id"]) == 16
        stream = next(ln for ln in access if ln["path"] == "/v1/stream")
        assert stream["close_code"] == 1000 and stream["outcome"] == "ok" and stream["ttfa_ms"] > 0
        assert stream["audio_duration_ms"] > 1000 and stream["engine"] == "cpu"
        assert next(ln for ln in access if ln["path"] == "/v1/stream/text")["context_ids"] == ["ctx-7"]
        assert stream["frames"] > 2 and stream["bytes_out"] > 48_000
        assert "Purple" not in log_file.read_text()  # no text at info level unless asked
        assert any("shutdown complete" in ln["msg"] for ln in lines)
    finally:
        if alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_log_text_when_asked_and_stop_by_port(tmp_path: Path) -> None:
    port = free_port()
    pid, _, log_file = daemon(tmp_path, port, "--log-text", "true")
    try:
        assert httpx.post(f"http://127.0.0.1:{port}/v1/synth", json={"text": SECRET}, timeout=60).status_code == 200
        t0 = time.monotonic()
        out = cli("stop", "--port", str(port))  # the pid file is elsewhere: found by the listening socket
        assert out.returncode == 0 and f"found by port {port}" in out.stdout, out.stdout + out.stderr
        assert not alive(pid) and time.monotonic() - t0 < 30
        text = log_file.read_text()
        line = next(ln for ln in text.splitlines() if "POST /v1/synth" in ln)
        assert SECRET in line and "request_id=" in line and "t_total_ms=" in line  # text format, key=value
    finally:
        if alive(pid):
            subprocess.run(["kill", "-9", str(pid)], check=False)
    out = cli("stop", "--port", str(port))
    assert out.returncode == 1 and "no server found" in out.stderr
