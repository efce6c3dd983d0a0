"""WS /v1/stream/text against a real server: incremental text, flush, end, sentence order, events, cancel."""

from __future__ import annotations

import json

from live_server import SAMPLE_RATE, Server, assert_speech, pcm_to_float, ws_exchange
from websockets.sync.client import connect

REPLY = ("Sure, I can help with that. The train leaves at nine in the morning. "
         "Bring a warm coat, because it gets cold on the platform. See you there!")


def tokens(text: str, size: int = 3) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def test_token_stream_speaks_every_sentence_in_order(server: Server) -> None:
    msgs: list[dict[str, object]] = [{"voice": "base", "seed": 11}]
    msgs += [{"text": t} for t in tokens(REPLY)]
    msgs.append({"end": True})
    r = ws_exchange(f"{server.ws}/v1/stream/text", msgs)
    assert r.close_code == 1000
    t = r.terminal
    assert t["sample_rate"] == SAMPLE_RATE and t["sentences"] >= 2 and t["reason"] == "end"
    assert_speech(r.pcm, min_s=5.0, max_s=14.0)
    # Same words in one piece on /v1/stream (same seed) → the same audio: sentence order is kept and the
    # token split changed nothing.
    whole = ws_exchange(f"{server.ws}/v1/stream", [{"text": REPLY, "voice": "base", "seed": 11}])
    assert b"".join(whole.frames) == b"".join(r.frames)


def test_text_in_init_frame_and_unterminated_tail(server: Server) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream/text",
                    [{"text": "Hello there. ", "seed": 2}, {"text": "this part has no full stop"}, {"end": True}])
    assert r.close_code == 1000 and r.terminal["sentences"] >= 1
    assert_speech(r.pcm, min_s=1.5, max_s=5.0)


def test_flush_speaks_a_fragment_before_end(server: Server) -> None:
    with connect(f"{server.ws}/v1/stream/text") as ws:
        ws.send(json.dumps({"seed": 3}))
        ws.send(json.dumps({"text": "Just a fragment without punctuation"}))
        ws.send(json.dumps({"flush": True}))
        first = ws.recv(timeout=30)  # audio arrives before "end" is sent
        assert isinstance(first, bytes)
        ws.send(json.dumps({"end": True}))
        while isinstance(ws.recv(timeout=30), bytes):
            pass


def test_events_report_segments_with_offsets(server: Server) -> None:
    msgs: list[dict[str, object]] = [{"events": True, "seed": 1}]
    msgs += [{"text": t} for t in tokens(REPLY, 7)] + [{"end": True}]
    r = ws_exchange(f"{server.ws}/v1/stream/text", msgs)
    starts = [m for m in r.texts if m.get("type") == "segment.start"]
    ends = [m for m in r.texts if m.get("type") == "segment.end"]
    assert len(starts) == len(ends) == r.terminal["sentences"]
    assert [m["segment_index"] for m in starts] == list(range(len(starts)))
    for m in starts:
        assert REPLY[m["text_start"]:m["text_end"]].strip().startswith(m["text"][:5])
    samples = [m["audio_start_sample"] for m in starts]
    assert samples == sorted(samples)
    assert ends[-1]["audio_end_sample"] <= len(r.pcm)


def test_cancel_mid_stream(server: Server) -> None:
    long = " ".join(f"Sentence {i} is a reasonably long sentence about nothing at all." for i in range(30))
    with connect(f"{server.ws}/v1/stream/text") as ws:
        ws.send(json.dumps({}))
        ws.send(json.dumps({"text": long}))
        assert isinstance(ws.recv(timeout=30), bytes)
        ws.send(json.dumps({"cancel": True}))
        while True:
            msg = ws.recv(timeout=30)
            if isinstance(msg, str):
                terminal = json.loads(msg)
                break
    assert terminal["reason"] == "cancelled"


def test_lunavox_example_text_variant(server: Server) -> None:
    """The LunaVox example's loop against /v1/stream/text: text frames then {"end": true}; the first JSON
    frame the client sees is the terminal one with the stats."""
    import asyncio

    import websockets

    pcm: list[bytes] = []
    printed: list[object] = []

    async def main() -> None:
        async with websockets.connect(f"{server.ws}/v1/stream/text") as ws:
            await ws.send(json.dumps({"voice": "base"}))
            for chunk in ("Hello ", "from the ", "server. ", "Streaming ", "works."):
                await ws.send(json.dumps({"text": chunk}))
            await ws.send(json.dumps({"end": True}))
            while True:
                msg = await ws.recv()
                if isinstance(msg, bytes): pcm.append(msg)
                else: printed.append(json.loads(msg)["stats"]); break

    asyncio.run(main())
    assert len(printed) == 1 and isinstance(printed[0], dict)
    assert_speech(pcm_to_float(b"".join(pcm)), min_s=1.5, max_s=5.0)
