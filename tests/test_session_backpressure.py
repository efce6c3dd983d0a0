"""Issue 13 item 6: a session-mode client that stops reading. A 2,000-word reply at 48 kHz f32 (about 130 MB of
audio) to a client that reads nothing: the server's memory stays bounded (its contexts' engine work waits on
the bounded outbox once the socket's buffers are full), and after session_send_timeout_s without progress the
connection is closed with 1008 slow_reader and the engine work is aborted (the CPU voice goes idle)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import Server, metric, start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

SEND_TIMEOUT_S = 3.0
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven", "small", "birds", "sing", "softly", "in", "the", "garden", "near", "our", "old", "house"]


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("slow"), env={"REALTIME_TTS_SESSION_SEND_TIMEOUT_S": str(SEND_TIMEOUT_S)})
    yield srv
    stop_server(srv)


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert m is not None
    return int(m.group(1)) * 1024


def two_thousand_words() -> str:
    sentences = []
    for i in range(200):
        words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(10)]
        sentences.append(" ".join(words).capitalize() + ".")
    return " ".join(sentences)


def test_client_that_stops_reading_is_closed_and_memory_stays_bounded(slow_server: Server) -> None:
    srv = slow_server
    pid = srv.proc.pid
    text = two_thousand_words()
    assert len(text.split()) == 2000
    slow_before = metric(srv.http, "errors_total", code="slow_reader")
    base = rss_bytes(pid)
    # max_queue=4: the client's reader thread stops taking frames off the socket after 4 (it "does not read")
    with connect(f"{srv.ws}/v1/stream/text", max_size=None, max_queue=4) as ws:
        ws.send(json.dumps({"type": "session.start", "audio": {"encoding": "pcm_f32le", "sample_rate": 48000}}))
        ws.send(json.dumps({"type": "speak", "context_id": "big", "text": text}))
        peak = base
        deadline = time.monotonic() + 60
        while metric(srv.http, "errors_total", code="slow_reader") == slow_before:
            assert time.monotonic() < deadline, "the slow reader was never closed"
            peak = max(peak, rss_bytes(pid))
            time.sleep(0.3)
        # the client reads again: what was in flight, then the close (the server waits a few seconds for it)
        received = 0
        code = None
        try:
            while True:
                m = ws.recv(timeout=10)
                received += len(m)
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
        except TimeoutError:
            pass
    assert code == 1008, code
    # ~130 MB of audio was asked for; the server held a few MB of it at most
    assert peak - base < 40 * 1024 * 1024, f"RSS grew by {(peak - base) / 1e6:.1f} MB"
    assert received < 40 * 1024 * 1024
    # its engine work is aborted: the CPU voice goes idle at once, not after ~100 s of generation
    deadline = time.monotonic() + 10
    while metric(srv.http, "pool_idle", engine="cpu") < metric(srv.http, "pool_size", engine="cpu"):
        assert time.monotonic() < deadline, "engine work went on after the slow reader was closed"
        time.sleep(0.2)
    assert metric(srv.http, "cancellations_total", stage="slow_reader") >= 1
    print(f"RSS base {base / 1e6:.1f} MB, peak {peak / 1e6:.1f} MB (+{(peak - base) / 1e6:.1f} MB); "
          f"client received {received / 1e6:.1f} MB after resuming; close code {code}")
