"""Slow and stopped WebSocket readers against a real uvicorn (in this process, with short keepalive timings so the
tests stay short) and the real CPU voice: a client that reads at playback speed gets a long reply in full (the
server paces audio to at most ws_max_audio_ahead_s ahead, so keepalive pings never wait behind minutes of
audio); a client that stops reading is closed (error frame slow_reader, close 1008) within the send timeout,
its engine work is aborted, and the server's memory stays bounded meanwhile."""

from __future__ import annotations

import json
import socket
import time

import httpx
import psutil
from live_server import SAMPLE_RATE, InProcessServer, pcm_to_float
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank. "


def _small_buffer_socket(port: int, rcvbuf: int = 16 << 10) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # no autotuning: a stopped reader shows soon
    sock.connect(("127.0.0.1", port))
    return sock


def _metric(base: str, name: str) -> float:
    total = 0.0
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_client_reading_at_playback_speed_gets_a_long_reply_in_full() -> None:
    # keepalive: a ping every second, dead after 3 s without its pong; audio at most 1.5 s ahead of real time
    env = {"REALTIME_TTS_CPU_WORKERS": "1", "REALTIME_TTS_WS_MAX_AUDIO_AHEAD_S": "1.5"}
    with InProcessServer(env=env, ws_ping_interval=1.0, ws_ping_timeout=3.0) as srv:
        text = SENTENCE * 5  # ~20 s of speech
        got = bytearray()
        t0: float | None = None
        with connect(f"{srv.ws}/v1/stream", sock=_small_buffer_socket(srv.port), max_size=None) as ws:
            ws.send(json.dumps({"text": text, "seed": 1}))
            while True:
                msg = ws.recv(timeout=30)
                if isinstance(msg, str):
                    terminal = json.loads(msg)
                    break
                t0 = t0 or time.monotonic()
                got += msg
                # a player: never more than 0.5 s ahead of what it has played
                played = time.monotonic() - t0
                ahead = len(got) / 2 / SAMPLE_RATE - played
                if ahead > 0.5:
                    time.sleep(ahead - 0.5)
        assert terminal.get("done") is True and terminal["reason"] == "end", terminal
        audio_s = len(got) / 2 / SAMPLE_RATE
        assert audio_s > 12, audio_s
        assert abs(terminal["stats"]["audio_duration_ms"] / 1e3 - audio_s) < 0.01
        assert float(abs(pcm_to_float(bytes(got))).max()) > 0.05


def test_a_client_that_stops_reading_is_closed_with_a_reason_and_memory_stays_bounded() -> None:
    env = {"REALTIME_TTS_CPU_WORKERS": "1", "REALTIME_TTS_WS_SEND_TIMEOUT_S": "2",
           "REALTIME_TTS_WS_MAX_AUDIO_AHEAD_S": "30"}  # generous pacing: the buffers fill fast
    with InProcessServer(env=env) as srv:
        me = psutil.Process()
        rss0 = me.memory_info().rss
        text = SENTENCE * 200  # ~15 minutes of speech: far more than any buffer
        ws = connect(f"{srv.ws}/v1/stream", sock=_small_buffer_socket(srv.port), max_size=None, max_queue=4)
        with ws:
            ws.send(json.dumps({"text": text, "seed": 1}))
            assert isinstance(ws.recv(timeout=30), bytes)  # audio flows ...
            t_stop = time.monotonic()  # ... and then this client reads nothing more
            peak = rss0
            while _metric(srv.http, 'realtime_tts_limit_refusals_total{limit="ws_send_timeout"}') < 1:
                peak = max(peak, me.memory_info().rss)
                assert time.monotonic() - t_stop < 40, "a client that stopped reading was never closed"
                time.sleep(0.2)
            detected_s = time.monotonic() - t_stop
            # it resumes reading: what was buffered, then the reason and the close
            frames, err = 0, None
            try:
                while True:
                    msg = ws.recv(timeout=10)
                    if isinstance(msg, bytes):
                        frames += 1
                    else:
                        err = json.loads(msg)
            except ConnectionClosed as e:
                close = e.rcvd
        assert err is not None and err["code"] == "slow_reader" and "ws_send_timeout_s" in err["message"], err
        assert close is not None and close.code == 1008 and close.reason, close
        # the work was aborted: the voice goes idle and the abort is counted
        deadline = time.monotonic() + 10
        while _metric(srv.http, 'realtime_tts_pool_idle{engine="cpu"}') < 1:
            assert time.monotonic() < deadline, "engine work went on after the client was dropped"
            time.sleep(0.1)
        assert _metric(srv.http, 'realtime_tts_requests_total{endpoint="ws_stream",status="slow_reader"') == 1
        assert _metric(srv.http, 'realtime_tts_ws_closes_total{code="1008"}') == 1
        growth_mb = (peak - rss0) / 2**20
        assert growth_mb < 60, f"server memory grew {growth_mb:.0f} MB behind a stopped reader"
        print(f"stopped reader closed after {detected_s:.1f} s; {frames} buffered frames read after; "
              f"RSS growth {growth_mb:.1f} MB")
        # a client that never reads again is cut: its connection is gone within the grace, not held open
        with connect(f"{srv.ws}/v1/stream", sock=_small_buffer_socket(srv.port), max_size=None, max_queue=4) as ws2:
            ws2.send(json.dumps({"text": text, "seed": 2}))
            assert isinstance(ws2.recv(timeout=30), bytes)
            t_stop = time.monotonic()
            while _metric(srv.http, "realtime_tts_ws_connections ") > 0:
                assert time.monotonic() - t_stop < 40, "a stopped reader's connection was held open"
                time.sleep(0.2)
            cut_s = time.monotonic() - t_stop
        assert _metric(srv.http, 'realtime_tts_limit_refusals_total{limit="ws_send_timeout"}') == 2
        print(f"a reader that never resumed: connection gone {cut_s:.1f} s after it stopped reading")
        # the server serves others normally afterwards
        r = httpx.post(srv.http + "/v1/audio/speech", json={"input": "Still here.", "response_format": "pcm"},
                       timeout=60)
        assert r.status_code == 200 and len(r.content) > SAMPLE_RATE
