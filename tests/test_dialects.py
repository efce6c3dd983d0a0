"""The Cartesia, ElevenLabs and Deepgram WebSocket dialects on the wire (docs/DIALECTS.md), against a real server
on loopback with the real CPU voice: what the stock plugins do (tests/test_plugins.py drives those) plus the
edges they rarely hit: several contexts on one socket, cancel mid-audio, the sentence buffer, keepalives,
close_context semantics, Clear without Flushed, every output format decoded by libsndfile, refusals naming
their field, a new socket while an old one still generates, unknown vendor voices.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf
from live_server import Server, decode_audio, metric, start_server, stop_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from realtime_tts.api.dialects.voices import vendor_voice
from realtime_tts.config import load_config
from realtime_tts.engine.pool import EnginePool
from realtime_tts.errors import BadRequest

TEXT = "Hello there, this is a test. And a second sentence."
LONG = " ".join(f"This is sentence number {i} of a long answer." for i in range(1, 30))
CARTESIA = {"model_id": "sonic-3", "voice": {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"},
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
            "add_timestamps": True, "language": "en"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv: Server = start_server(tmp_path_factory.mktemp("dialects"))
    yield srv
    stop_server(srv)
    assert "Traceback" not in srv.log(), srv.log()[-4000:]


@pytest.fixture(scope="module")
def reference_s(server: Server) -> float:
    """TEXT's length over our own HTTP API (the CPU voice is deterministic)."""
    r = httpx.post(server.http + "/v1/audio/speech", json={"input": TEXT, "voice": "alloy", "response_format": "pcm"},
                   timeout=60)
    return len(r.content) / 2 / 24000


def recv_json(ws: ClientConnection, timeout: float = 30) -> dict[str, Any]:
    while True:
        msg = ws.recv(timeout=timeout)
        if isinstance(msg, str):
            obj: dict[str, Any] = json.loads(msg)
            return obj


def cancelled(server: Server, endpoint: str) -> float:
    return metric(server.http, "requests_total", endpoint=endpoint, status="cancelled")


def decode_raw(data: bytes, rate: int, subtype: str) -> np.ndarray:
    samples, _ = sf.read(io.BytesIO(data), format="RAW", samplerate=rate, channels=1, subtype=subtype,
                         dtype="float32")
    return np.asarray(samples, dtype=np.float32)


# -- Cartesia ---------------------------------------------------------------------------------------------------------

def cartesia_until_done(ws: ClientConnection, contexts: set[str]) -> dict[str, dict[str, Any]]:
    """Per context: audio bytes, timestamps words, message types, until every context is done."""
    out: dict[str, dict[str, Any]] = {c: {"audio": b"", "words": [], "types": []} for c in contexts}
    pending = set(contexts)
    while pending:
        msg = recv_json(ws)
        assert "context_id" in msg, msg  # pipecat reads it from every message
        ctx = out[msg["context_id"]]
        ctx["types"].append(msg["type"])
        if msg["type"] == "chunk":
            ctx["audio"] += base64.b64decode(msg["data"])
        elif msg["type"] == "timestamps":
            ts = msg["word_timestamps"]
            assert len(ts["words"]) == len(ts["start"]) == len(ts["end"])
            ctx["words"] += list(zip(ts["words"], ts["start"], ts["end"], strict=True))
        elif msg["type"] in ("done", "error"):
            assert msg["done"] is (msg["type"] == "done")
            pending.discard(msg["context_id"])
    return out


def test_cartesia_two_contexts_on_one_socket(server: Server, reference_s: float) -> None:
    with connect(server.ws + "/tts/websocket", additional_headers={"Cartesia-Version": "2026-03-01",
                                                                   "X-API-Key": "any"}) as ws:
        for cid in ("a", "b"):
            for sentence in ("Hello there, this is a test. ", "And a second sentence."):
                ws.send(json.dumps({**CARTESIA, "context_id": cid, "transcript": sentence, "continue": True,
                                    "max_buffer_delay_ms": 0}))
        for cid in ("a", "b"):
            ws.send(json.dumps({**CARTESIA, "context_id": cid, "transcript": "", "continue": False}))
        out = cartesia_until_done(ws, {"a", "b"})
    for cid in ("a", "b"):
        assert out[cid]["audio"] and out[cid]["types"][-1] == "done"
        assert len(out[cid]["audio"]) / 2 / 24000 == pytest.approx(reference_s, rel=0.1)
        words = out[cid]["words"]
        assert [w for w, _, _ in words] == TEXT.split()
        starts = [s for _, s, _ in words]
        assert starts == sorted(starts) and words[-1][2] <= len(out[cid]["audio"]) / 2 / 24000 + 0.01


def test_cartesia_buffers_to_a_sentence_without_max_buffer_delay(server: Server) -> None:
    """Tokens as an LLM streams them: absent max_buffer_delay_ms they are joined into sentences (one word
    "there,"); with 0 each transcript is spoken at once, so a word cut between transcripts stays cut."""
    tokens = ["Hello the", "re, this is a te", "st. And a second sentence."]
    words = {}
    with connect(server.ws + "/tts/websocket?cartesia_version=2024-06-10") as ws:
        for cid, extra in (("buffered", {}), ("at-once", {"max_buffer_delay_ms": 0})):
            for tok in tokens:
                ws.send(json.dumps({**CARTESIA, **extra, "context_id": cid, "transcript": tok, "continue": True}))
            ws.send(json.dumps({**CARTESIA, "context_id": cid, "transcript": "", "continue": False}))
            words[cid] = [w for w, _, _ in cartesia_until_done(ws, {cid})[cid]["words"]]
    assert words["buffered"] == TEXT.split()
    assert "the" in words["at-once"] and "there," not in words["at-once"]


def test_cartesia_cancel_stops_the_context_and_mulaw(server: Server) -> None:
    before = cancelled(server, "cartesia")
    fmt = {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}
    with connect(server.ws + "/tts/websocket") as ws:
        ws.send(json.dumps({**CARTESIA, "output_format": fmt, "context_id": "long", "transcript": LONG,
                            "continue": False}))
        first = recv_json(ws)
        assert first["type"] == "chunk"
        ws.send(json.dumps({"context_id": "long", "cancel": True}))
        sent_at = time.monotonic()
        late = []
        # a second context on the same socket still works, and nothing of the cancelled one follows it
        ws.send(json.dumps({**CARTESIA, "output_format": fmt, "context_id": "next", "transcript": TEXT,
                            "continue": False}))
        audio = b""
        while True:
            msg = recv_json(ws)
            if msg["context_id"] == "long" and time.monotonic() - sent_at > 0.5:
                late.append(msg)
            if msg["context_id"] == "next" and msg["type"] == "chunk":
                audio += base64.b64decode(msg["data"])
            if msg["context_id"] == "next" and msg["type"] == "done":
                break
    assert late == []
    assert cancelled(server, "cartesia") == before + 1
    samples = decode_raw(audio, 8000, "ULAW")
    assert 2.0 < len(samples) / 8000 < 6.0 and 0.01 < float(np.sqrt(np.mean(samples ** 2))) < 0.5


def test_cartesia_refusals_name_the_field_and_keep_the_socket(server: Server) -> None:
    with connect(server.ws + "/tts/websocket") as ws:
        ws.send(json.dumps({**CARTESIA, "transcript": "Hi."}))
        e1 = recv_json(ws)
        ws.send(json.dumps({**CARTESIA, "context_id": "x", "transcript": "Hi.",
                            "output_format": {"container": "raw", "encoding": "pcm_s8", "sample_rate": 24000}}))
        e2 = recv_json(ws)
        ws.send(json.dumps({**CARTESIA, "context_id": "y", "transcript": "Hi.",
                            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 96000}}))
        e3 = recv_json(ws)
        # a saved voice id goes to the voice library as it is (never the default voice): on the CPU voice a saved
        # (cloned) voice is refused naming the engine that has it
        ws.send(json.dumps({**CARTESIA, "voice": {"mode": "id", "id": "voice_0123456789abcdef"}, "context_id": "s",
                            "transcript": "Hi.", "continue": False}))
        e4 = recv_json(ws)
        ws.send(json.dumps({**CARTESIA, "context_id": "l", "transcript": "Hi.", "language": 5, "continue": False}))
        e5 = recv_json(ws)  # not spoken in the default language behind the client's back
        # an end with nothing to say (LiveKit's empty turn, pipecat's repeated flush): done at once, no audio
        ws.send(json.dumps({**CARTESIA, "context_id": "empty", "transcript": " ", "continue": False}))
        empty = recv_json(ws)
        ws.send(json.dumps({**CARTESIA, "context_id": "ok", "transcript": "Fine.", "continue": False}))
        out = cartesia_until_done(ws, {"ok"})
    assert (e1["type"], e1["context_id"], e1["field"], e1["done"]) == ("error", "", "context_id", False)
    assert (e2["context_id"], e2["field"]) == ("x", "output_format.encoding")
    assert (e3["context_id"], e3["field"]) == ("y", "output_format.sample_rate")
    assert (e4["context_id"], e4["field"], e4["title"]) == ("s", "voice", "unsupported_voice_mode")
    assert "omnivoice" in e4["error"]
    assert (e5["type"], e5["context_id"], e5["field"]) == ("error", "l", "language")
    assert empty == {"type": "done", "context_id": "empty", "status_code": 206, "done": True}
    assert out["ok"]["types"][-1] == "done" and out["ok"]["audio"]


def test_cartesia_new_socket_while_the_old_one_generates(server: Server, reference_s: float) -> None:
    """LiveKit drops the socket on an interruption and opens a new one: the old one's engine work stops."""
    before = cancelled(server, "cartesia")
    with connect(server.ws + "/tts/websocket") as old, connect(server.ws + "/tts/websocket") as new:
        old.send(json.dumps({**CARTESIA, "context_id": "old", "transcript": LONG, "continue": False}))
        assert recv_json(old)["type"] == "chunk"
        old.close()
        new.send(json.dumps({**CARTESIA, "context_id": "new", "transcript": TEXT, "continue": False}))
        out = cartesia_until_done(new, {"new"})
    assert len(out["new"]["audio"]) / 2 / 24000 == pytest.approx(reference_s, rel=0.1)
    deadline = time.monotonic() + 10
    while cancelled(server, "cartesia") < before + 1:
        assert time.monotonic() < deadline, "the dropped socket's context was not cancelled"
        time.sleep(0.1)


# -- ElevenLabs -------------------------------------------------------------------------------------------------------

def eleven_url(server: Server, fmt: str, *, voice: str = "21m00Tcm4TlvDq8EDcDR", path: str = "multi-stream-input",
               auto_mode: bool = True) -> str:
    return (f"{server.ws}/v1/text-to-speech/{voice}/{path}?model_id=eleven_flash_v2_5&output_format={fmt}"
            f"&auto_mode={str(auto_mode).lower()}")


def eleven_until_final(ws: ClientConnection, context: str | None = "c1", *, cumulative: bool = False
                       ) -> dict[str, Any]:
    out: dict[str, Any] = {"audio": b"", "chars": [], "starts": [], "durations": [], "messages": []}
    while True:
        msg = recv_json(ws)
        out["messages"].append(msg)
        assert msg.get("contextId") == context, msg
        if msg.get("audio"):
            out["audio"] += base64.b64decode(msg["audio"])
        if msg.get("alignment"):
            a = msg["alignment"]
            assert msg["normalizedAlignment"] == a  # LiveKit reads the normalized one
            # times restart per message (pipecat's reading), or count from the context's start (sync_alignment)
            offset = (out["starts"][-1] + out["durations"][-1]) if out["starts"] and not cumulative else 0
            out["chars"] += a["chars"]
            out["starts"] += [offset + s for s in a["charStartTimesMs"]]
            out["durations"] += a["charDurationsMs"]
        if msg.get("isFinal"):
            assert set(msg) <= {"isFinal", "contextId"}  # in a message of its own (pipecat drops audio in it)
            return out


def eleven_turn(ws: ClientConnection, sentences: list[str], cid: str = "c1") -> None:
    ws.send(json.dumps({"text": " ", "context_id": cid, "voice_settings": {"speed": 1.0}}))
    for s in sentences:
        ws.send(json.dumps({"text": s + " ", "context_id": cid}))
    ws.send(json.dumps({"text": ""}))  # keepalive: nothing happens
    ws.send(json.dumps({"context_id": cid, "flush": True}))
    ws.send(json.dumps({"context_id": cid, "close_context": True}))  # after the final flush: finish, then isFinal


@pytest.mark.parametrize(("fmt", "rate", "kind"), [("pcm_16000", 16000, "PCM_16"), ("ulaw_8000", 8000, "ULAW"),
                                                   ("pcm_44100", 44100, "PCM_16"), ("mp3_22050_32", 22050, "mp3"),
                                                   ("mp3_44100_128", 44100, "mp3")])
def test_elevenlabs_formats_alignment_and_final(server: Server, reference_s: float, fmt: str, rate: int,
                                                kind: str) -> None:
    with connect(eleven_url(server, fmt), additional_headers={"xi-api-key": "any"}) as ws:
        eleven_turn(ws, ["Hello there, this is a test.", "And a second sentence."])
        out = eleven_until_final(ws)
    if kind == "mp3":
        samples, sr = decode_audio(out["audio"])
        assert sr == rate
        assert len(samples) / rate == pytest.approx(reference_s, abs=0.2)
    else:
        samples = decode_raw(out["audio"], rate, kind)
        assert len(samples) / rate == pytest.approx(reference_s, rel=0.02)
    assert "".join(out["chars"]).split() == TEXT.split()
    assert out["starts"] == sorted(out["starts"])
    assert 0.8 * reference_s < (out["starts"][-1] + out["durations"][-1]) / 1000 <= reference_s + 0.01


def test_elevenlabs_sync_alignment_counts_from_the_context_start(server: Server, reference_s: float) -> None:
    """LiveKit asks with sync_alignment=true and reads the times as they come: each message's times go on from the
    previous message's instead of restarting at zero."""
    with connect(eleven_url(server, "pcm_24000") + "&sync_alignment=true") as ws:
        eleven_turn(ws, ["Hello there, this is a test.", "And a second sentence."])
        out = eleven_until_final(ws, cumulative=True)
    firsts = [m["alignment"]["charStartTimesMs"][0] for m in out["messages"] if m.get("alignment")]
    assert len(firsts) == 2 and firsts[1] > 1000  # the second sentence starts where the first ended
    assert "".join(out["chars"]).split() == TEXT.split()
    assert out["starts"] == sorted(out["starts"])
    assert 0.8 * reference_s < (out["starts"][-1] + out["durations"][-1]) / 1000 <= reference_s + 0.01


def test_elevenlabs_close_context_without_final_flush_interrupts(server: Server) -> None:
    before = cancelled(server, "elevenlabs")
    with connect(eleven_url(server, "pcm_24000")) as ws:
        ws.send(json.dumps({"text": " ", "context_id": "c1"}))
        ws.send(json.dumps({"text": LONG + " ", "context_id": "c1"}))
        first = recv_json(ws)
        assert first.get("audio") and first["contextId"] == "c1"
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))  # pipecat's interruption
        out = eleven_until_final(ws)
        assert len(out["audio"]) / 2 / 24000 < 60  # LONG is ~130 s
        # a closed context that is gone still answers isFinal (LiveKit waits for it to drain)
        ws.send(json.dumps({"context_id": "c1", "close_context": True}))
        assert recv_json(ws) == {"isFinal": True, "contextId": "c1"}
    assert cancelled(server, "elevenlabs") == before + 1


def test_elevenlabs_stream_input_and_bad_format(server: Server, reference_s: float) -> None:
    with connect(eleven_url(server, "pcm_24000", path="stream-input", auto_mode=False)) as ws:
        ws.send(json.dumps({"text": " ", "voice_settings": {}}))
        ws.send(json.dumps({"text": TEXT + " "}))
        ws.send(json.dumps({"text": ""}))  # stream-input: the end of the text
        out = eleven_until_final(ws, context=None)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert len(out["audio"]) / 2 / 24000 == pytest.approx(reference_s, rel=0.02)
    with connect(eleven_url(server, "opus_48000_64")) as ws:
        err = recv_json(ws)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert err["field"] == "output_format" and "opus_48000_64" in err["error"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


# -- Deepgram ---------------------------------------------------------------------------------------------------------

def deepgram_until(ws: ClientConnection, kind: str) -> tuple[bytes, list[dict[str, Any]]]:
    audio, texts = b"", []
    while True:
        msg = ws.recv(timeout=30)
        if isinstance(msg, bytes):
            audio += msg
            continue
        texts.append(json.loads(msg))
        if texts[-1]["type"] == kind:
            return audio, texts


def test_deepgram_speak_flush_clear_close(server: Server, reference_s: float) -> None:
    url = server.ws + "/v1/speak?model=aura-2-thalia-en&encoding=alaw&sample_rate=8000"
    with connect(url, additional_headers={"Authorization": "Token any"}) as ws:
        meta = recv_json(ws)
        warning = recv_json(ws)
        for word in TEXT.split():  # LiveKit sends one word per Speak
            ws.send(json.dumps({"type": "Speak", "text": word + " "}))
        ws.send(json.dumps({"type": "Flush"}))
        audio, texts = deepgram_until(ws, "Flushed")
        # cleared before its flush finished: Cleared, and never a Flushed for that text
        ws.send(json.dumps({"type": "Speak", "text": LONG}))
        ws.send(json.dumps({"type": "Flush"}))
        ws.send(json.dumps({"type": "Clear"}))
        _, cleared = deepgram_until(ws, "Cleared")
        ws.send(json.dumps({"type": "Speak", "text": "Goodbye now."}))
        ws.send(json.dumps({"type": "Close"}))  # what was sent is spoken, then the socket closes
        tail = b""
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                msg = ws.recv(timeout=30)
                assert isinstance(msg, bytes), msg
                tail += msg
    assert meta["type"] == "Metadata" and meta["model_name"] == "aura-2-thalia-en"
    assert warning["type"] == "Warning" and "thalia" in warning["warn_msg"]
    assert texts == [{"type": "Flushed", "sequence_id": 1}]
    assert len(decode_raw(audio, 8000, "ALAW")) / 8000 == pytest.approx(reference_s, rel=0.1)
    assert [m["type"] for m in cleared] == ["Cleared"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert 0.5 < len(tail) / 8000 < 3


def test_deepgram_refusals(server: Server) -> None:
    with connect(server.ws + "/v1/speak?encoding=flac") as ws:
        err = recv_json(ws)
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=10)
    assert (err["type"], err["field"]) == ("Error", "encoding")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
    with connect(server.ws + "/v1/speak?model=alloy") as ws:
        assert recv_json(ws)["type"] == "Metadata"
        ws.send(json.dumps({"type": "Shout", "text": "hi"}))
        err = recv_json(ws)  # no Warning came before it: alloy is a voice of ours
        ws.send(json.dumps({"type": "Speak", "text": "Still here."}))
        ws.send(json.dumps({"type": "Flush"}))
        audio, _ = deepgram_until(ws, "Flushed")
    assert (err["type"], err["field"]) == ("Error", "type") and audio


# -- voices -------------------------------------------------------------------------------------------------------------

def test_vendor_voices_map_to_ours() -> None:
    pool = EnginePool(load_config(env={}))
    default = load_config(env={})
    strict = load_config(env={"REALTIME_TTS_UNKNOWN_VENDOR_VOICE": "error"})
    assert vendor_voice("alloy", strict, pool) == ("alloy", ())
    assert vendor_voice("voice_0123456789abcdef", strict, pool) == ("voice_0123456789abcdef", ())
    assert vendor_voice(None, strict, pool) == ("auto", ())
    name, warnings = vendor_voice("a0e99841-438c", default, pool, field="voice.id")
    assert name == "auto" and "voice.id 'a0e99841-438c'" in warnings[0] and "alloy" in warnings[0]
    with pytest.raises(BadRequest) as e:
        vendor_voice("a0e99841-438c", strict, pool, field="voice.id")
    assert e.value.field == "voice.id" and "shimmer" in e.value.message


def test_strict_voices_and_idle_sockets(tmp_path: Any) -> None:
    """unknown_vendor_voice=error: a vendor voice id we do not know is refused naming the voices we have; a socket
    with nothing live that sends nothing for ws_idle_timeout_s is closed (4008)."""
    srv: Server = start_server(tmp_path, env={"REALTIME_TTS_UNKNOWN_VENDOR_VOICE": "error", "REALTIME_TTS_WS_IDLE_TIMEOUT_S": "1"})
    try:
        with connect(srv.ws + "/tts/websocket") as ws:
            ws.send(json.dumps({**CARTESIA, "context_id": "c", "transcript": "Hi.", "continue": False}))
            err = recv_json(ws)
            ws.send(json.dumps({**CARTESIA, "voice": {"mode": "id", "id": "nova"}, "context_id": "d",
                                "transcript": "Hi.", "continue": False}))
            ok = cartesia_until_done(ws, {"d"})
            idle = recv_json(ws, timeout=5)
            with pytest.raises(ConnectionClosed) as closed:
                recv_json(ws, timeout=5)
        with connect(eleven_url(srv, "pcm_24000")) as ws:
            eleven_err = recv_json(ws)
    finally:
        stop_server(srv)
    assert (err["type"], err["context_id"], err["field"]) == ("error", "c", "voice.id") and "nova" in err["error"]
    assert ok["d"]["types"][-1] == "done"
    assert (idle["type"], idle["title"]) == ("error", "idle_timeout") and "1 s" in idle["error"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4008
    assert eleven_err["field"] == "voice_id" and "21m00Tcm4TlvDq8EDcDR" in eleven_err["error"]


@pytest.mark.parametrize(("path", "shape"), [("/tts/websocket", "type"), ("/v1/speak", "err_msg"),
                                             ("/v1/text-to-speech/alloy/multi-stream-input?output_format=pcm_24000",
                                              "error")])
def test_a_frame_that_is_not_json_closes_1003(server: Server, path: str, shape: str) -> None:
    with connect(server.ws + path) as ws:
        ws.send("{not json")
        msgs = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                msgs.append(recv_json(ws, timeout=10))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    assert shape in msgs[-1] and "JSON" in json.dumps(msgs[-1]), msgs
