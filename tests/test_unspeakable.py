"""Text a voice cannot say (only punctuation or emoji) and whitespace at the edges, against a real server: such
units never reach the engine, keep their offsets and never break the stream; long texts are split off the
event loop and still speak in order."""

from __future__ import annotations

from typing import Any

from live_server import Server, WsResult, assert_speech, ws_exchange


def _segments(r: WsResult) -> list[dict[str, Any]]:
    return [m for m in r.texts if m.get("type") == "segment.start"]


def test_punctuation_inside_a_text_is_spoken_around(server: Server) -> None:
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": "Hi there. !!! Bye now.", "seed": 4}])
    assert r.close_code == 1000, (r.close_code, r.close_reason)
    assert r.terminal["done"] is True
    assert_speech(r.pcm, min_s=0.8, max_s=4.0)


def test_a_punctuation_only_unit_keeps_its_offsets_and_the_stream_goes_on(server: Server) -> None:
    # Three flushed units; the middle one has nothing to say.
    msgs: list[dict[str, Any] | str | bytes] = [{"events": True, "seed": 4}, {"text": "Hi there."}, {"flush": True},
                                     {"text": " !!! "}, {"flush": True}, {"text": " Bye now."}, {"end": True}]
    r = ws_exchange(f"{server.ws}/v1/stream/text", msgs)
    assert r.close_code == 1000, (r.close_code, r.close_reason)
    starts = _segments(r)
    ends = [m for m in r.texts if m.get("type") == "segment.end"]
    assert [m["text"] for m in starts] == ["Hi there.", "!!!", "Bye now."]
    # "sentences" counts the input's sentences (docs/protocol.md): "!!!" has nothing to say, so it is not one
    assert len(ends) == 3 and r.terminal["sentences"] == 2
    raw = "Hi there. !!!  Bye now."
    for m in starts:
        assert raw[m["text_start"]:m["text_end"]] == m["text"]
    # The silent unit adds no audio of its own: it starts where it ends.
    assert ends[1]["audio_end_sample"] == starts[1]["audio_start_sample"]
    assert_speech(r.pcm, min_s=1.0, max_s=5.0)
    alone = ws_exchange(f"{server.ws}/v1/stream/text", [{"seed": 4}, {"text": "Hi there."}, {"flush": True},
                                                          {"text": " Bye now."}, {"end": True}])
    assert abs(len(alone.pcm) - len(r.pcm)) < 0.05 * len(alone.pcm)


def test_only_an_ellipsis_ends_cleanly_without_audio(server: Server) -> None:
    cases: list[tuple[str, list[dict[str, Any] | str | bytes]]] = [
        ("/v1/stream", [{"text": "…", "events": True}]),
        ("/v1/stream/text", [{"events": True}, {"text": "…"}, {"end": True}])]
    for path, msgs in cases:
        r = ws_exchange(f"{server.ws}{path}", msgs)
        assert r.close_code == 1000, (path, r.close_code, r.close_reason)
        assert r.terminal["done"] is True and "error" not in r.terminal, r.terminal
        assert len(r.pcm) < 24_000 * 0.2, path  # at most the pacing's tail of silence
        assert [m["text"] for m in _segments(r)] == ["…"], path
    # and the server goes on speaking
    assert_speech(ws_exchange(f"{server.ws}/v1/stream", [{"text": "Still here."}]).pcm, min_s=0.4, max_s=3.0)


def test_chunk_mode_none_offsets_skip_edge_whitespace(server: Server) -> None:
    raw = "  \n Hello   there,\tfriend.  \n"
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": raw, "chunk_mode": "none", "events": True, "seed": 2}])
    assert r.close_code == 1000, (r.close_code, r.close_reason)
    (start,) = _segments(r)
    assert start["text"] == "Hello there, friend."
    assert raw[start["text_start"]:start["text_end"]] == "Hello   there,\tfriend."
    assert_speech(r.pcm, min_s=0.8, max_s=4.0)


def test_a_long_text_split_off_the_event_loop_speaks_in_order(server: Server) -> None:
    # Over the 2,000 characters that send a text's split to a thread (service/planning.SPLIT_INLINE_CHARS), as a
    # laid-out document is: indented lines, most of their characters whitespace, so the CPU voice speaks ~40 s
    # of audio rather than the ~3 minutes of 2,000 characters of prose (the suite's slowest test until then).
    words = ("one", "two", "three", "four", "five", "six", "seven", "eight")
    lines = [f"Line {words[i % 8]} says a short thing." for i in range(24)]
    raw = ("\n" + " " * 64).join(lines)
    assert len(raw) > 2_000
    r = ws_exchange(f"{server.ws}/v1/stream", [{"text": raw, "events": True, "seed": 5}])
    assert r.close_code == 1000, (r.close_code, r.close_reason)
    starts = _segments(r)
    assert [m["segment_index"] for m in starts] == list(range(len(starts))) and len(starts) > 5
    assert " ".join(m["text"] for m in starts) == " ".join(lines)  # every line, once, in order
    offsets = [(m["text_start"], m["text_end"]) for m in starts]
    assert offsets == sorted(offsets) and offsets[0][0] == 0 and offsets[-1][1] == len(raw)
    assert all(raw[a:b].split() == m["text"].split() for (a, b), m in zip(offsets, starts, strict=True))
    assert r.terminal["stats"]["segments"] == len(starts)
