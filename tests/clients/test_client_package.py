"""The client package (clients/python, realtime_tts_client) against a real server it did not start (the
session's `server` fixture: real uvicorn, real CPU voice): simple mode, session mode (skipped on a server
without it), the sync helper, and `realtime-tts say` including stdin as it arrives."""

from __future__ import annotations

import ast
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
import wave
from pathlib import Path

import httpx
import numpy as np
import pytest
from live_server import REPO, SAMPLE_RATE, Server, assert_speech, pcm_to_float
from realtime_tts_client import (
    AudioFormat,
    Client,
    Done,
    SegmentStart,
    ServerError,
    SessionModeUnavailable,
    synthesize,
)

PKG = REPO / "clients" / "python" / "realtime_tts_client"
TEXT = "Hello from the client package. It speaks only the documented protocol."


def test_imports_no_server_code() -> None:
    for path in PKG.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] != "realtime_tts", f"{path.name} imports {name}"
    code = ("import sys, realtime_tts_client, realtime_tts_client.cli, realtime_tts_client.player; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('realtime_tts', 'numpy', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_builds_as_its_own_distribution(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: pip builds in the source tree (build/, *.egg-info)
    shutil.copytree(PKG.parent, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(src)],
                   check=True, timeout=120)
    (wheel,) = tmp_path.glob("realtime_tts_client-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "realtime_tts_client/session.py" in names and not any(n.startswith("realtime_tts/") for n in names)


def test_speak_whole_text(server: Server) -> None:
    result = asyncio.run(Client(server.http).speak(TEXT, seed=3))
    assert result.done.reason == "end" and result.format == AudioFormat("pcm_s16le", SAMPLE_RATE)
    assert result.first_audio_s is not None and result.first_audio_s < result.done.stats["t_total_ms"] / 1e3 + 1
    assert_speech(pcm_to_float(result.audio), min_s=2.0, max_s=8.0)
    assert abs(result.duration_s - result.done.stats["audio_duration_ms"] / 1e3) < 0.01


def test_stream_text_tokens_with_events_and_flush(server: Server) -> None:
    async def go() -> tuple[list[SegmentStart], bytes, Done]:
        stream = await Client(server.ws).stream_text(seed=1, events=True)
        async with stream:
            for word in ("Streamed ", "token ", "by ", "token, ", "like ", "a ", "reply. ", "And ", "then "):
                await stream.text(word)
            await stream.flush()
            await stream.text("a second part.")
            await stream.end()
            result = await stream.collect()
        return result.segments, result.audio, result.done

    segments, audio, done = asyncio.run(go())
    assert done.reason == "end" and done.sample_rate == SAMPLE_RATE
    spoken = "".join(s.text for s in segments)
    assert "Streamed token by token" in spoken and "And then" in spoken and "a second part." in spoken
    assert [s.segment_index for s in segments] == list(range(len(segments)))
    assert_speech(pcm_to_float(audio), min_s=2.0, max_s=9.0)


def test_cancel_with_played_ms_ends_the_stream(server: Server) -> None:
    long_text = " ".join(["This is a long reply that the listener interrupts halfway through."] * 8)

    async def go() -> tuple[int, Done, float]:
        stream = await Client(server.ws).stream_text(seed=2)
        async with stream:
            await stream.text(long_text)
            await stream.end()
            got = 0
            async for ev in stream:
                assert not isinstance(ev, Done), "finished before the cancel"
                got += len(ev.data)  # type: ignore[union-attr]
                if got >= SAMPLE_RATE * 2:  # one second of audio received
                    t0 = time.perf_counter()
                    await stream.cancel(played_ms=500)
                    break
            async for ev in stream:
                if isinstance(ev, Done):
                    return got, ev, time.perf_counter() - t0
        raise AssertionError("no terminal frame")

    got, done, _ = asyncio.run(go())
    assert done.reason == "cancelled"
    assert got < len(long_text) * SAMPLE_RATE * 2 / 15  # far less than the whole reply (~15 chars/s)


def test_sync_one_shot_writes_a_wav(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "one.wav"
    result = synthesize("One shot, blocking.", f"127.0.0.1:{server.port}", out=str(out), seed=4)
    with wave.open(str(out)) as w:
        assert w.getframerate() == SAMPLE_RATE and w.getnframes() == len(result.audio) // 2
    assert result.done.reason == "end" and result.duration_s > 0.8


def test_voices_and_health(server: Server) -> None:
    client = Client(server.http)
    voices = asyncio.run(client.voices())
    r = httpx.get(server.http + "/v1/voices")
    assert voices is None if r.status_code == 404 else voices == r.json()["data"]
    assert asyncio.run(client.health())["status"] == "ok"


def _say(server: Server, *args: str, stdin: int | None = None) -> subprocess.Popen[str]:
    # The child gets SIGINT as a terminal's Ctrl-C does. A suite started in the background by a non-interactive
    # shell (`.ci/run &`) inherits SIGINT ignored, an ignored signal stays ignored across exec, and Python then
    # installs no handler: `say` never saw the barge-in (a backgrounded fresh-clone CI run: exit 0 once stdin
    # closed, not 130). A caught signal is reset to the default at exec, so catch it around the spawn.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([sys.executable, "-m", "realtime_tts.cli", "say", "--server",
                                 f"127.0.0.1:{server.port}", *args], cwd=REPO, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)


def _wav(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert w.getframerate() == SAMPLE_RATE
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32767


def test_say_text_to_wav(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "say.wav"
    proc = _say(server, "--seed", "5", "--out", str(out), "--stats", TEXT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert json.loads(stdout)["audio_duration_ms"] > 2000
    assert_speech(_wav(out), min_s=2.0, max_s=8.0)


def _ws_connections(server: Server) -> float:
    for line in httpx.get(server.http + "/metrics").text.splitlines():
        if line.startswith("realtime_tts_ws_connections "):
            return float(line.split()[1])
    return 0.0


def test_say_stdin_streams_as_it_arrives(server: Server, tmp_path: Path) -> None:
    """Words written to `say -` over ~1.5 s: the server's turn lasts at least that long (text came as it was
    written, not at EOF), and every word is spoken."""
    out = tmp_path / "stdin.wav"
    proc = _say(server, "-", "--mode", "simple", "--seed", "6", "--out", str(out), "--stats", stdin=subprocess.PIPE)
    assert proc.stdin is not None
    deadline = time.monotonic() + 60
    while _ws_connections(server) < 1:  # the client is up and connected: from now on stdin is read as written
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    words = (["The", "first", "sentence", "arrives", "early.", "Then", "more", "words", "trickle", "in,", "one", "by", "one,", "until", "the", "end"])
    t0 = time.perf_counter()
    for w in words:
        proc.stdin.write(w + " ")
        proc.stdin.flush()
        time.sleep(0.1)
    written_s = time.perf_counter() - t0
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() must not flush it
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    stats = json.loads(stdout)
    # The turn began with the first word and ended after the last: text was sent as it arrived.
    assert stats["t_total_ms"] >= (written_s - 0.3) * 1000, (stats, written_s)
    assert stats["ttfa_ms"] < stats["t_total_ms"] - 500  # first audio long before stdin was closed
    assert_speech(_wav(out), min_s=3.0, max_s=10.0)


def test_say_ctrl_c_is_a_barge_in(server: Server, tmp_path: Path) -> None:
    """SIGINT while `say -` still has its turn open: it cancels with played_ms, keeps what it got, exits 130."""
    out = tmp_path / "cut.wav"
    proc = _say(server, "-", "--seed", "8", "--out", str(out), stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write("This sentence is spoken before the listener interrupts. And this one is")
    proc.stdin.flush()
    time.sleep(4)  # start-up, then the first sentence's audio arrives; stdin stays open: the turn is live
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "cancelled after" in stderr and "Traceback" not in stderr
    assert 1.0 < len(_wav(out)) / SAMPLE_RATE < 6.0  # the first sentence, not the unfinished one


def test_say_against_no_server_is_one_clear_line(tmp_path: Path) -> None:
    from live_server import free_port

    r = subprocess.run([sys.executable, "-m", "realtime_tts.cli", "say", "--server", f"127.0.0.1:{free_port()}",
                        "--out", str(tmp_path / "x.wav"), "hi"], cwd=REPO, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 1 and r.stderr.startswith("say: ") and "Traceback" not in r.stderr


# Session mode (PROTOCOL.md §2) ----------------------------------------------------------------------------------

async def _session_or_skip(server: Server, **kw: object):  # type: ignore[no-untyped-def]
    try:
        return await Client(server.ws).session(**kw)  # type: ignore[arg-type]
    except SessionModeUnavailable as e:
        pytest.skip(f"this server has no session mode yet: {e}")


def test_session_two_contexts_and_negotiated_audio(server: Server) -> None:
    async def go():  # type: ignore[no-untyped-def]
        s = await _session_or_skip(server, audio=AudioFormat("pcm_s16le", 16_000), seed=7)
        async with s:
            a, b = s.context("turn-a"), s.context("turn-b")
            await a.text("The first context speaks this. ")
            await b.speak("The second one says something else.")
            await a.end()
            results = await asyncio.gather(a.collect(), b.collect())
            pong = await s.ping()
            assert isinstance(pong.load, dict)
            return s.audio, results

    fmt, (ra, rb) = asyncio.run(go())
    assert fmt == AudioFormat("pcm_s16le", 16_000)
    assert ra.words and all(w.end_sample <= len(ra.audio) // 2 + 1 for ws in ra.words for w in ws.words)
    for r, words in ((ra, "first context"), (rb, "second one")):
        assert r.done.reason == "end" and r.done.context_id in ("turn-a", "turn-b")
        assert words in "".join(s.text for s in r.segments)
        assert r.format.sample_rate == 16_000 and 1.0 < r.duration_s < 6.0


def test_session_mulaw_json_framing(server: Server) -> None:
    async def go():  # type: ignore[no-untyped-def]
        s = await _session_or_skip(server, audio=AudioFormat("pcm_mulaw", 8000), framing="json", seed=8)
        async with s:
            ctx = s.context()
            await ctx.speak("Telephone quality audio.")
            return await ctx.collect()

    r = asyncio.run(go())
    assert r.format == AudioFormat("pcm_mulaw", 8000) and r.done.reason == "end"
    pcm = np.frombuffer(r.pcm_s16(), "<i2").astype(np.float32) / 32767
    assert len(pcm) == len(r.audio) and 0.8 < len(pcm) / 8000 < 5 and float(np.sqrt(np.mean(pcm**2))) > 0.01


def test_session_cancel_reports_text_spoken(server: Server) -> None:
    async def go():  # type: ignore[no-untyped-def]
        s = await _session_or_skip(server, seed=9)
        async with s:
            ctx = s.context()
            await ctx.text("First short sentence here. " + "Then a much longer part that goes on and on. " * 6)
            await ctx.end()
            async for ev in ctx:
                if getattr(ev, "data", b""):
                    break
            done = await ctx.cancel(played_ms=800)
            again = s.context(ctx.id)  # the id may be reused after context.done
            late = await again.cancel()
            return done, late

    done, late = asyncio.run(go())
    assert done is not None and done.reason == "cancelled" and isinstance(done.text_spoken, str)
    assert late is not None and late.already_done


def test_session_refused_context_ends_with_an_error(server: Server) -> None:
    """Past max_contexts the server refuses the open (error "too_many_contexts", the socket stays open): the
    refused context ends instead of waiting for a context.done that never comes; the others still speak."""
    async def go():  # type: ignore[no-untyped-def]
        s = await _session_or_skip(server, seed=10)
        async with s:
            limit = int((s.started.get("limits") or {}).get("max_contexts", 8))
            live = [s.context(f"c{i}") for i in range(limit)]
            for c in live:
                await c.text("Held open. ")
            extra = s.context("one-too-many")
            await extra.text("Refused. ")
            refused = [ev async for ev in extra]
            await live[0].end()
            first = await live[0].collect()
            for c in live[1:]:
                await c.cancel()
            return refused, first

    refused, first = asyncio.run(go())
    err, done = refused
    assert isinstance(err, ServerError) and err.code == "too_many_contexts" and not err.fatal
    assert isinstance(done, Done) and done.reason == "error" and done.raw["refused"]
    assert first.done.reason == "end" and first.duration_s > 0.3
