"""Session mode (PROTOCOL.md §2) on a real server with the CPU voice: contexts, negotiated audio, framing,
segment events, cancel with what was heard, limits, errors, ping, close. Every frame is checked by
session_client.SessionClient (ids echoed, audio of live contexts only, contiguous per context, nothing after
context.done). The simple-mode fixes of issue 13 are at the end."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import soxr
from live_server import Server, pcm_to_float, ws_exchange
from session_client import SessionClient, heard_cut

from realtime_tts.text import normalize_space

TEXT = ("The train leaves at nine in the morning. Bring a warm coat, because it gets cold on the platform. "
        "We will have breakfast in the dining car.")
LONG = " ".join(f"Sentence number {i} is here to make the reply long enough to interrupt." for i in range(40))


def _check_segments(raw: str, segments: list[dict], upto: int | None = None) -> None:
    """Segments are consecutive spans of raw, in order, whose text is the normalized span, covering every
    non-whitespace character of raw[:upto]."""
    upto = len(raw) if upto is None else upto
    pos = 0
    for seg in segments:
        assert raw[pos:seg["text_start"]].strip() == "", (raw[pos:seg["text_start"]], seg)
        assert seg["text"] == normalize_space(raw[seg["text_start"]:seg["text_end"]]), seg
        pos = seg["text_end"]
    assert pos >= upto or raw[pos:upto].strip() == "", f"not spoken and not reported: {raw[pos:upto]!r}"


def test_two_contexts_flush_end_and_events(server: Server) -> None:
    c = SessionClient(f"{server.ws}/v1/stream/text", seed=3)
    started = c.started
    assert started["audio"] == {"encoding": "pcm_s16le", "sample_rate": 24000, "channels": 1,
                                "engine_sample_rate": 24000}
    assert started["limits"]["max_contexts"] == 8 and started["framing"] == "binary"
    assert "one voice per session" in started["capabilities"]["voice_continuity"]
    c.send({"type": "text", "context_id": "a", "text": "Hello there, how are you doing today? I am"})
    c.send({"type": "speak", "context_id": "b", "text": "Another reply. It is short."})
    c.send({"type": "text", "context_id": "a", "text": " fine. Thanks for asking"})
    c.send({"type": "flush", "context_id": "a"})
    flush = c.until(lambda m: isinstance(m, dict) and m.get("type") == "flush.done")
    assert flush["context_id"] == "a"
    a = c.contexts["a"]
    # flush.done: everything received before the flush is out as audio (every unit of it ended)
    assert len(a.ended_segments) == len(a.segments) >= 2 and a.done is None
    assert a.segments[-1]["text_end"] == len(a.sent_text)
    c.send({"type": "end", "context_id": "a"})
    done_a, done_b = c.until_done("a"), c.until_done("b")
    assert done_a["reason"] == done_b["reason"] == "end"
    for ctx in (a, c.contexts["b"]):
        _check_segments(ctx.sent_text, ctx.segments)
        assert ctx.messages[-1]["type"] == "context.done"
        assert ctx.done["stats"]["audio_duration_ms"] == pytest.approx(ctx.samples / 24, abs=0.05)
        for start, end in zip(ctx.segments, ctx.ended_segments, strict=True):
            assert end["audio_end_sample"] > start["audio_start_sample"] and end["gen_ms"] > 0
        assert all(w["estimated"] for w in ctx.words)
        words = [w for msg in ctx.words for w in msg["words"]]
        assert [w["word"] for w in words] == ctx.sent_text.split()
        assert all(ctx.sent_text[w["text_start"]:w["text_end"]] == w["word"] for w in words)
        speech = pcm_to_float(bytes(ctx.audio))
        assert np.sqrt(np.mean(speech ** 2)) > 0.01
    c.close()


def test_negotiated_rate_resamples_without_clicks_at_joins(server: Server) -> None:
    """One context of three segments at 24 kHz s16 and at 16 kHz f32 (same seed): the 16 kHz stream equals
    soxr's one-shot resampling of the whole 24 kHz stream, so the resampler state ran across every frame and
    segment join (a restart per frame or segment would differ there by far more than the tolerance)."""
    streams = {}
    for enc, rate in (("pcm_s16le", 24000), ("pcm_f32le", 16000), ("pcm_mulaw", 8000)):
        c = SessionClient(f"{server.ws}/v1/stream", audio={"encoding": enc, "sample_rate": rate}, seed=11)
        assert c.started["audio"]["sample_rate"] == rate and c.started["audio"]["encoding"] == enc
        c.send({"type": "speak", "context_id": "x", "text": TEXT})
        done = c.until_done("x")
        assert done["reason"] == "end" and len(c.contexts["x"].segments) == 3
        ends = [e["audio_end_sample"] for e in c.contexts["x"].ended_segments]
        assert ends[-1] <= c.contexts["x"].samples  # offsets at the negotiated rate
        streams[enc] = (bytes(c.contexts["x"].audio), ends)
        c.close()
    s16 = pcm_to_float(streams["pcm_s16le"][0])
    f32 = np.frombuffer(streams["pcm_f32le"][0], "<f4")
    whole = soxr.resample(s16, 24000, 16000, quality="HQ")
    assert abs(len(f32) - len(whole)) <= 2
    n = min(len(f32), len(whole))
    assert np.max(np.abs(f32[:n] - whole[:n])) < 2e-3
    # segment ends scale with the rate
    assert streams["pcm_f32le"][1] == [round(e * 16000 / 24000) for e in streams["pcm_s16le"][1]]
    assert len(streams["pcm_mulaw"][0]) == pytest.approx(len(s16) / 3, abs=3)  # one byte per 8 kHz sample


def test_json_framing(server: Server) -> None:
    c = SessionClient(f"{server.ws}/v1/stream", framing="json", seed=2)
    c.send({"type": "speak", "context_id": "j", "text": "Hello from the JSON framing."})
    c.until_done("j")
    audio = [m for d, m in c.log if d == "<" and isinstance(m, dict) and m.get("type") == "audio"]
    assert audio and all(m["context_id"] == "j" for m in audio)
    assert c.contexts["j"].samples * 2 == len(c.contexts["j"].audio) > 24000
    c.close()


def test_cancel_reports_what_was_heard_and_no_audio_after_it(server: Server) -> None:
    """Barge-in: the audio received for the context equals what the server says it had sent when it read the
    cancel (audio_sent_ms), i.e. zero audio bytes left after the cancel; nothing follows context.done."""
    c = SessionClient(f"{server.ws}/v1/stream/text", seed=5)
    c.send({"type": "speak", "context_id": "long", "text": LONG})
    c.until(lambda m: isinstance(m, dict) and m.get("type") == "segment.end")
    c.until(lambda m: isinstance(m, tuple) and m[1][1] == "long")  # some audio of the second segment
    c.send({"type": "cancel", "context_id": "long", "played_ms": 1500})
    done = c.until_done("long")
    ctx = c.contexts["long"]
    assert done["reason"] == "cancelled" and done["played_ms"] == 1500
    assert ctx.samples == round(done["audio_sent_ms"] * 24), (ctx.samples, done["audio_sent_ms"])
    expected_end, granularity = heard_cut(ctx, 1500 * 24)
    assert (done["unspoken_start"], done["granularity"]) == (expected_end, granularity), done
    assert done["text_spoken"] == LONG[:expected_end] and done["estimated"] == (granularity == "word")
    assert len(ctx.segments) < 40  # it stopped early
    # idempotent: again, and an unknown id, answer already_done
    c.send({"type": "cancel", "context_id": "long"})
    c.send({"type": "cancel", "context_id": "nobody"})
    again = [c.until(lambda m: isinstance(m, dict) and m.get("type") == "context.done") for _ in range(2)]
    assert [(m["context_id"], m.get("already_done")) for m in again] == [("long", True), ("nobody", True)]
    assert c.pump(0.3) == []  # and nothing else comes
    c.close()


def test_cancel_all_and_max_contexts(server: Server) -> None:
    c = SessionClient(f"{server.ws}/v1/stream/text")
    for i in range(8):
        c.send({"type": "text", "context_id": f"c{i}", "text": "Still thinking about"})
    c.send({"type": "text", "context_id": "c8", "text": "One too many."})
    err = c.until(lambda m: isinstance(m, dict) and m.get("type") == "error")
    assert err["code"] == "too_many_contexts" and err["context_id"] == "c8" and err["fatal"] is False
    c.send({"type": "cancel", "context_id": "*"})
    for i in range(8):
        assert c.until_done(f"c{i}")["reason"] == "cancelled"
        assert c.contexts[f"c{i}"].done["text_spoken"] == ""
    c.send({"type": "speak", "context_id": "c8", "text": "Now there is room."})  # the socket stayed open
    assert c.until_done("c8")["reason"] == "end"
    c.close()


def test_errors_are_per_message_and_the_socket_goes_on(server: Server) -> None:
    c = SessionClient(f"{server.ws}/v1/stream/text")
    c.send({"type": "speak", "context_id": "e", "text": TEXT})
    c.send({"type": "text", "context_id": "e", "text": "More after end."})
    c.send({"type": "shout", "context_id": "e"})
    c.send({"type": "text", "context_id": "bad id!", "text": "x"})
    c.send({"type": "context.open", "context_id": "v", "speed": 9})
    c.send({"type": "cancel", "context_id": "e", "played_ms": -1})
    errors = [c.until(lambda m: isinstance(m, dict) and m.get("type") == "error") for _ in range(5)]
    assert [e["field"] for e in errors] == ["text", "type", "context_id", "speed", "played_ms"]
    assert all(e["fatal"] is False for e in errors)
    assert errors[0]["context_id"] == "e" and "ended" in errors[0]["message"]
    assert c.until_done("e")["reason"] == "end"
    c.send({"type": "ping", "id": "p1"})
    pong = c.until(lambda m: isinstance(m, dict) and m.get("type") == "pong")
    assert pong["id"] == "p1" and pong["load"]["live_contexts"] == 0 and "cpu" in pong["load"]["engines"]
    c.send({"type": "context.open", "context_id": "o", "voice": "alloy"})
    c.send({"type": "text", "context_id": "o", "text": "Opened explicitly"})
    c.send({"type": "session.close"})
    c.close_and_drain()
    assert c.contexts["o"].done["reason"] == "cancelled"
    assert c.other[-1]["type"] == "session.closed" and c.close_code == 1000


def test_idle_context_is_ended_and_spoken(tmp_path_factory: pytest.TempPathFactory) -> None:
    from live_server import start_server, stop_server

    srv = start_server(tmp_path_factory.mktemp("idle"), env={"REALTIME_TTS_CONTEXT_IDLE_S": "0.5",
                                                             "REALTIME_TTS_WS_IDLE_TIMEOUT_S": "2"})
    try:
        c = SessionClient(f"{srv.ws}/v1/stream/text")
        c.send({"type": "text", "context_id": "i", "text": "Left without an end"})
        done = c.until_done("i")
        assert done["reason"] == "idle" and c.contexts["i"].segments[0]["text"] == "Left without an end"
        # then nothing live and nothing sent: the socket is closed 4008 after ws_idle_timeout_s
        t0 = time.monotonic()
        c.close_and_drain(timeout=10)
        assert c.close_code == 4008 and 1.0 < time.monotonic() - t0 < 6, (c.close_code, c.other[-1:])
        assert c.other[-1]["type"] == "error" and c.other[-1]["code"] == "idle_timeout"
    finally:
        stop_server(srv)


# -- simple mode (issue 13 items 2, 3, 7) ---------------------------------------------------------------------


def test_simple_cancel_drops_queued_audio_and_says_what_was_heard(server: Server) -> None:
    from websockets.sync.client import connect

    with connect(f"{server.ws}/v1/stream", max_size=None) as ws:
        ws.send(json.dumps({"text": LONG, "seed": 1, "events": True}))
        received, seg_ends = 0, []
        while True:
            m = ws.recv(timeout=30)
            if isinstance(m, bytes):
                received += len(m) // 2
                if received > 24000 * 4:
                    break
            elif json.loads(m).get("type") == "segment.end":
                seg_ends.append(json.loads(m))
        ws.send(json.dumps({"cancel": True, "played_ms": 2000}))
        while True:
            m = ws.recv(timeout=30)
            if isinstance(m, bytes):
                received += len(m) // 2
                continue
            obj = json.loads(m)
            if obj.get("type") == "segment.end":
                seg_ends.append(obj)
            if obj.get("done"):
                break
    assert obj["reason"] == "cancelled"
    assert received == round(obj["audio_sent_ms"] * 24)  # no audio left after the cancel was read
    assert obj["stats"]["audio_duration_ms"] < 30_000
    assert obj["granularity"] in ("word", "segment") and obj["played_ms"] == 2000  # tests/test_heard.py: which
    assert LONG.startswith(obj["text_spoken"]) and obj["unspoken_start"] == len(obj["text_spoken"])


def test_simple_first_frame_cancel_and_init_end(server: Server) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Hi.", "cancel": True}], timeout=10)
    assert r.close_code == 1000 and r.terminal["reason"] == "cancelled" and r.terminal["text_spoken"] == ""
    r = ws_exchange(f"{server.ws}/v1/stream/text", [{"text": "Hello there. How are you? Fine", "end": True}],
                    timeout=10)  # used to hang until the idle timeout
    assert r.close_code == 1000 and r.terminal["reason"] == "end" and r.frames
    assert r.terminal["sentences"] == 3  # the input's sentences, not the units they were merged into


def test_simple_played_ms_on_stream_text(server: Server) -> None:
    from websockets.sync.client import connect

    with connect(f"{server.ws}/v1/stream/text", max_size=None) as ws:
        ws.send(json.dumps({"text": "First sentence here. Second one follows. ", "seed": 4}))
        ws.send(json.dumps({"flush": True}))
        got = 0
        while got < 24000:  # some audio
            m = ws.recv(timeout=30)
            if isinstance(m, bytes):
                got += len(m) // 2
        ws.send(json.dumps({"cancel": True, "played_ms": 0}))
        while True:
            m = ws.recv(timeout=30)
            if isinstance(m, str) and json.loads(m).get("done"):
                term = json.loads(m)
                break
    assert term["reason"] == "cancelled"  # no end was sent: the stream was still open
    assert term["text_spoken"] == "" and term["unspoken_start"] == 0  # played_ms 0: nothing heard


def test_engine_failure_ends_only_its_context(server: Server) -> None:
    """A real engine failure: the CPU voice's own text normalizer raises on "{❶" (int() of a circled digit, a
    bug of the voice library). The context gets an error (with its id, not fatal) then context.done "error"; the
    other context and the socket go on. Should the voice ever speak it, the context simply ends."""
    c = SessionClient(f"{server.ws}/v1/stream/text")
    c.send({"type": "speak", "context_id": "bad", "text": "{❶"})
    c.send({"type": "speak", "context_id": "good", "text": "Still here."})
    done_bad, done_good = c.until_done("bad"), c.until_done("good")
    assert done_good["reason"] == "end" and c.contexts["good"].samples > 0
    assert done_bad["reason"] in ("error", "end"), done_bad
    if done_bad["reason"] == "error":
        err = c.contexts["bad"].messages[-2]
        assert err["type"] == "error" and err["context_id"] == "bad" and err["fatal"] is False, err
    c.send({"type": "ping"})
    assert c.until(lambda m: isinstance(m, dict) and m.get("type") == "pong")["load"]["live_contexts"] == 0
    c.close()
