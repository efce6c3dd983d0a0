"""clients/llm_bridge against a fake OpenAI-compatible LLM (tests/clients/fake_llm.py, started here on a free
loopback port, stopped by its pid) and the session's real TTS server: tokens are spoken as they stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from fake_llm import API_KEY, REPLY
from live_server import REPO, SAMPLE_RATE, Server, assert_speech, free_port

BRIDGE = REPO / "clients" / "llm_bridge"


@pytest.fixture(scope="module")
def llm() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fake_llm.py")), "--port", str(port),
                             "--first-token-ms", "300", "--tokens-per-s", "40"], cwd=REPO)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/chat/completions", timeout=1)  # 405: up
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline and proc.poll() is None, "fake LLM did not start"
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _bridge(server: Server, llm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BRIDGE), "What are the museum's hours?", "--llm", llm,
                           "--model", "fake-1", "--server", f"127.0.0.1:{server.port}", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_bridge_speaks_the_streamed_reply(server: Server, llm: str, tmp_path: Path) -> None:
    out = tmp_path / "reply.wav"
    t0 = time.perf_counter()
    r = _bridge(server, llm, "--api-key", API_KEY, "--out", str(out), "--seed", "2", "--stats")
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == REPLY  # the reply, echoed as it streamed
    stats = json.loads(r.stderr.strip().splitlines()[-1])
    # ~45 tokens at 40/s after 0.3 s: the LLM took >1 s, and the first sentence was spoken long before it ended
    assert stats["t_total_ms"] > 900 and stats["ttfa_ms"] < stats["t_total_ms"] - 400, stats
    assert wall < 60
    with wave.open(str(out)) as w:
        assert w.getframerate() == SAMPLE_RATE
        samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32767
    assert_speech(samples, min_s=6.0, max_s=16.0)


def test_bridge_reports_an_llm_error(server: Server, llm: str, tmp_path: Path) -> None:
    r = _bridge(server, llm, "--api-key", "wrong", "--out", str(tmp_path / "x.wav"))
    assert r.returncode == 1 and "LLM endpoint answered 401" in r.stderr and "Traceback" not in r.stderr
