"""What was heard at a cancel (issue 13 item 3), on a real server with the CPU voice: word granularity where the
segment being played has word timings, a word cut mid-way is unspoken, played_ms 0 hears nothing, played_ms past
everything sent hears the text of every sent segment; session mode and simple mode (one implementation)."""

from __future__ import annotations

import json
from typing import Any

from live_server import Server
from session_client import SessionClient
from websockets.sync.client import connect

from realtime_tts.service.words import estimate_words

LONG = " ".join(f"Sentence number {i} is here to make the reply long enough to interrupt." for i in range(40))
SHORT = "Good morning, dear friends. "


def _words_message(c: SessionClient, cid: str) -> dict[str, Any]:
    return c.until(lambda m: isinstance(m, dict) and m.get("type") == "words" and m["context_id"] == cid)


def test_session_cancel_at_word_granularity(server: Server) -> None:
    c = SessionClient(f"{server.ws}/v1/stream/text", seed=7)
    ms_per_sample = 1000 / c.started["audio"]["sample_rate"]
    # inside the 2nd word of the first segment: the 1st word was heard, the 2nd was cut mid-way (unspoken)
    c.send({"type": "speak", "context_id": "mid", "text": LONG})
    first, second = _words_message(c, "mid")["words"][:2]
    played = (second["start_sample"] + second["end_sample"]) / 2 * ms_per_sample
    c.send({"type": "cancel", "context_id": "mid", "played_ms": played})
    done = c.until_done("mid")
    assert (done["granularity"], done["estimated"]) == ("word", True)
    assert done["unspoken_start"] == second["text_start"] and done["text_spoken"] == LONG[:second["text_start"]]
    assert done["text_spoken"].rstrip().endswith(first["word"]) and first["word"] == "Sentence"
    # played_ms 0: nothing heard, although a whole segment (and its word timings) was sent
    c.send({"type": "speak", "context_id": "zero", "text": LONG})
    _words_message(c, "zero")
    c.send({"type": "cancel", "context_id": "zero", "played_ms": 0})
    done = c.until_done("zero")
    assert (done["text_spoken"], done["unspoken_start"], done["granularity"]) == ("", 0, "word")
    # played_ms past everything sent: the text of every sent segment (all its audio is out after flush.done)
    c.send({"type": "text", "context_id": "all", "text": SHORT + "See you soon."})
    c.send({"type": "flush", "context_id": "all"})
    c.until(lambda m: isinstance(m, dict) and m.get("type") == "flush.done" and m["context_id"] == "all")
    c.send({"type": "cancel", "context_id": "all", "played_ms": 3_600_000})
    done = c.until_done("all")
    ctx = c.contexts["all"]
    assert ctx.segments and len(ctx.ended_segments) == len(ctx.segments)
    assert done["text_spoken"] == ctx.sent_text[:ctx.segments[-1]["text_end"]] == SHORT + "See you soon."
    assert done["granularity"] == "word"
    c.close()


def _simple(server: Server, path: str, first: dict[str, Any], played_ms: Any) -> tuple[dict[str, Any], list, list]:
    """Open a simple-mode socket with events, cancel with played_ms(starts, ends) once a segment has ended;
    returns the terminal frame and the segment events."""
    with connect(f"{server.ws}{path}", max_size=None) as ws:
        ws.send(json.dumps({**first, "events": True}))
        starts: list[dict[str, Any]] = []
        ends: list[dict[str, Any]] = []
        while not ends:
            m = ws.recv(timeout=30)
            if isinstance(m, str):
                obj = json.loads(m)
                (starts if obj.get("type") == "segment.start" else ends).append(obj)
        ws.send(json.dumps({"cancel": True, "played_ms": played_ms(starts, ends)}))
        while True:
            m = ws.recv(timeout=30)
            if isinstance(m, str):
                obj = json.loads(m)
                if obj.get("done"):
                    return obj, starts, ends
                (starts if obj.get("type") == "segment.start" else ends).append(obj)


def test_simple_cancel_at_word_granularity(server: Server) -> None:
    def words(starts: list, ends: list, text: str) -> list:  # the timings a session would send for segment 0
        s, e = starts[0], ends[0]
        return estimate_words(text[s["text_start"]:s["text_end"]], s["text_start"], s["audio_start_sample"],
                              e["audio_end_sample"])

    def mid_second(starts: list, ends: list) -> float:
        w = words(starts, ends, LONG)[1]
        return (w.start_sample + w.end_sample) / 2 / 24

    term, starts, ends = _simple(server, "/v1/stream", {"text": LONG, "seed": 2}, mid_second)
    first, second = words(starts, ends, LONG)[:2]
    assert term["reason"] == "cancelled" and (term["granularity"], term["estimated"]) == ("word", True)
    assert term["unspoken_start"] == second.text_start and term["text_spoken"] == LONG[:second.text_start]
    assert term["text_spoken"].rstrip().endswith(first.text)

    term, _, _ = _simple(server, "/v1/stream", {"text": LONG, "seed": 2}, lambda s, e: 0)
    assert (term["text_spoken"], term["unspoken_start"], term["granularity"]) == ("", 0, "word")

    # /v1/stream/text, one flushed sentence, all its audio out: played_ms past it hears all of it
    term, starts, ends = _simple(server, "/v1/stream/text", {"text": SHORT, "seed": 2, "flush": True},
                                 lambda s, e: 3_600_000)
    assert len(starts) == len(ends) == 1
    assert term["text_spoken"] == SHORT[:starts[0]["text_end"]] == SHORT.rstrip()
    assert term["granularity"] == "word"
