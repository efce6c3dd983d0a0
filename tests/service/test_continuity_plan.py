"""service/continuity.py as plain bookkeeping: which segment keeps its codes, which names which, what a later
context of the same VoiceThread gets, and how a failed, dropped or unsent source gives the role up."""

from __future__ import annotations

from realtime_tts.engine.base import SegmentRequest, Voice, VoicePrompt
from realtime_tts.protocol import Params
from realtime_tts.service.continuity import Continuity, VoiceThread, voice_signature

AUTO = Voice(mode="auto")


def gen(rid: str) -> VoicePrompt:
    return VoicePrompt("omnivoice", "First.", b"\x00\x00" * 8, 8, 1, 0.1, key=f"gen:{rid}", generated=True)


def req(rid: str, voice: Voice = AUTO) -> SegmentRequest:
    return SegmentRequest(rid, "Some text.", voice=voice)


def test_concurrent_first_keeps_codes_then_the_rest_follow_it() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent")
    first = c.shape(0, req("a-0"))
    assert first.keep_codes and first.prompt_from is None
    second = c.shape(1, req("a-1"))
    assert second.prompt_from == "a-0" and not second.keep_codes
    c.learn("a-0", gen("a-0"))
    third = c.shape(2, req("a-2"))
    assert third.prompt_from is None and third.voice.mode == "clone" and third.voice.prompt == gen("a-0")
    # a later context on the same thread: conditioned from its first segment on
    later = Continuity("b", thread, AUTO, chunk_mode="concurrent").shape(0, req("b-0"))
    assert later.voice.prompt == gen("a-0") and not later.keep_codes


def test_another_voice_starts_over_and_clone_is_left_alone() -> None:
    thread = VoiceThread()
    thread.adopt(voice_signature(Params()))
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent")
    c.shape(0, req("a-0"))
    c.learn("a-0", gen("a-0"))
    thread.adopt(voice_signature(Params(voice="alloy", preset="alloy")))
    assert thread.prompt is None and thread.source is None
    clone = Voice(mode="clone", prompt=gen("saved"))
    c2 = Continuity("b", thread, clone, chunk_mode="concurrent")
    assert c2.shape(0, req("b-0", clone)) == req("b-0", clone)


def test_a_failed_or_dropped_source_gives_the_role_up() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent")
    assert c.shape(0, req("a-0s1")).keep_codes  # a speculative first unit
    assert c.shape(0, req("a-0")).keep_codes  # it was dropped: the real segment 0 takes over
    assert thread.source == "a-0"
    c.finished("a-0")  # failed before its codes came back
    assert c.shape(1, req("a-1")).keep_codes and thread.source == "a-1"


def test_sequential_chains_on_the_previous_segment() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="sequential")
    assert c.shape(0, req("a-0")).keep_codes
    one = c.shape(1, req("a-1"))
    assert one.keep_codes and one.prompt_from == "a-0"
    c.learn("a-1", gen("a-1"))
    two = c.shape(2, req("a-2"))
    assert two.voice.prompt == gen("a-1") and two.keep_codes
    assert [src for _, src in thread.history] == ["a-0", "a-1"]


def test_sequential_skips_a_segment_that_gave_no_codes() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="sequential")
    c.shape(0, req("a-0"))
    c.learn("a-0", gen("a-0"))
    c.finished("a-0")
    c.shape(1, req("a-1"))  # e.g. only punctuation: never sent
    c.finished("a-1")
    after = c.shape(2, req("a-2"))
    assert after.voice.prompt == gen("a-0")  # chained on a-0, not on a-1


def gen_s(rid: str, seconds: float) -> VoicePrompt:
    frames = round(seconds * 25)
    return VoicePrompt("omnivoice", "Some text.", b"\x00\x00" * 8 * frames, 8, frames, 0.1, key=f"gen:{rid}",
                       generated=True)


def test_a_long_first_prompt_is_replaced_by_the_first_later_segment_within_the_cap() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent", prompt_max_s=4.0)
    assert c.shape(0, req("a-0")).keep_codes
    # conditioned on the first while it generates: they keep their codes too (any may become the prompt)
    second = c.shape(1, req("a-1"))
    assert second.prompt_from == "a-0" and second.keep_codes
    c.learn("a-0", gen_s("a-0", 6.0))  # a 6 s first sentence: 150 frames on every later segment
    assert thread.prompt == gen_s("a-0", 6.0) and not thread.settled
    c.learn("a-1", gen_s("a-1", 1.0))  # too short to carry the voice: not taken
    third = c.shape(2, req("a-2"))
    assert third.voice.prompt == gen_s("a-0", 6.0) and third.keep_codes
    c.learn("a-2", gen_s("a-2", 3.2))  # within [2, 4] s: the prompt from now on, and final
    assert thread.prompt == gen_s("a-2", 3.2) and thread.settled
    fourth = c.shape(3, req("a-3"))
    assert fourth.voice.prompt == gen_s("a-2", 3.2) and not fourth.keep_codes
    c.learn("a-3", gen_s("a-3", 2.5))  # codes it did not ask for change nothing
    assert thread.prompt == gen_s("a-2", 3.2)
    # a later context of the conversation starts on the capped prompt
    later = Continuity("b", thread, AUTO, chunk_mode="concurrent", prompt_max_s=4.0).shape(0, req("b-0"))
    assert later.voice.prompt == gen_s("a-2", 3.2) and not later.keep_codes


def test_a_first_prompt_within_the_cap_stays_and_no_cap_keeps_the_first() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent", prompt_max_s=4.0)
    c.shape(0, req("a-0"))
    c.learn("a-0", gen_s("a-0", 2.4))
    assert thread.settled and not c.shape(1, req("a-1")).keep_codes
    uncapped = VoiceThread()
    c = Continuity("b", uncapped, AUTO, chunk_mode="concurrent", prompt_max_s=0.0)
    c.shape(0, req("b-0"))
    c.learn("b-0", gen_s("b-0", 6.0))
    nxt = c.shape(1, req("b-1"))
    assert nxt.voice.prompt == gen_s("b-0", 6.0) and not nxt.keep_codes
    c.learn("b-1", gen_s("b-1", 3.0))
    assert uncapped.prompt == gen_s("b-0", 6.0)


def test_another_voice_unsettles_the_cap() -> None:
    thread = VoiceThread()
    c = Continuity("a", thread, AUTO, chunk_mode="concurrent", prompt_max_s=4.0)
    c.shape(0, req("a-0"))
    c.learn("a-0", gen_s("a-0", 3.0))
    assert thread.settled
    thread.adopt(voice_signature(Params(voice="alloy", preset="alloy")))
    assert thread.prompt is None and not thread.settled
