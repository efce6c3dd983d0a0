"""SentenceBuffer: the contract (API, offsets, min_chars, first unit, flush/end) on small real inputs."""

from __future__ import annotations

import pytest

from realtime_tts.errors import BadRequest
from realtime_tts.text import SentenceBuffer, Unit, normalize_space, number_may_go_on


def feed_all(buffer: SentenceBuffer, chunks: list[str]) -> list[Unit]:
    units: list[Unit] = []
    for chunk in chunks:
        units += buffer.feed(chunk)
    return units


def check_offsets(raw: str, units: list[Unit]) -> None:
    pos = 0
    for unit in units:
        assert raw[pos:unit.start].strip() == ""
        assert unit.text == normalize_space(raw[unit.start:unit.end])
        assert unit.text and not raw[unit.start].isspace() and not raw[unit.end - 1].isspace()
        pos = unit.end
    assert raw[pos:].strip() == ""


def test_empty_and_whitespace_give_nothing() -> None:
    buffer = SentenceBuffer()
    assert buffer.feed("") == []
    assert buffer.end() == []
    assert buffer.feed("   \n\t ") == []
    assert buffer.flush() == []
    assert buffer.end() == []


def test_first_sentence_cut_as_soon_as_the_next_word_starts() -> None:
    buffer = SentenceBuffer()
    assert buffer.feed("Sure! ") == []  # "!" + space: could still be '"Sure!" she said' → wait
    units = buffer.feed("I")
    assert [u.text for u in units] == ["Sure!"]
    assert units[0].first and (units[0].start, units[0].end) == (0, 5)
    assert buffer.pending == "I"


def test_fragment_under_min_chars_stays_buffered() -> None:
    buffer = SentenceBuffer()
    assert buffer.feed("Hi. ") == []
    assert buffer.feed("Ok") == []  # "Hi." is under 4 characters: no cut after it
    assert [u.text for u in buffer.feed(". Then")] == ["Hi. Ok."]
    assert [u.text for u in buffer.end()] == ["Then"]


def test_first_unit_cuts_at_a_clause_once_long_enough() -> None:
    buffer = SentenceBuffer()
    raw = "Well, the weather in Paris today is sunny, with highs of 22 degrees and light wind. "
    units = feed_all(buffer, raw.split(" "))  # words without their spaces: still fine
    buffer = SentenceBuffer()
    units = feed_all(buffer, [w + " " for w in raw.split(" ") if w])
    assert units[0].text == "Well, the weather in Paris today is sunny,"
    assert units[0].first
    rest = buffer.end()
    assert [u.text for u in rest] == ["with highs of 22 degrees and light wind."]
    assert not rest[0].first
    check_offsets(raw, units + rest)


def test_later_units_pack_sentences_up_to_target() -> None:
    buffer = SentenceBuffer(target_chars=60, max_chars=120)
    raw = ("Okay. One two three four five six. Seven eight nine ten. Eleven twelve thirteen. "
           "Fourteen fifteen sixteen seventeen. Done.")
    units = feed_all(buffer, list(raw)) + buffer.end()
    check_offsets(raw, units)
    assert units[0].text == "Okay."
    assert [u.text for u in units[1:]] == [
        "One two three four five six. Seven eight nine ten.",  # + the next sentence would pass 60
        "Eleven twelve thirteen. Fourteen fifteen sixteen seventeen.",
        "Done.",
    ]


def test_flush_emits_short_text_and_keeps_the_turn() -> None:
    buffer = SentenceBuffer()
    assert buffer.feed("Hi") == []
    assert [(u.text, u.first) for u in buffer.flush()] == [("Hi", True)]
    assert buffer.pending == ""
    units = buffer.feed(" there. And more. ") + buffer.end()
    assert [(u.text, u.first, u.start) for u in units] == [("there. And more.", False, 3)]
    # a new turn: first again, offsets keep counting over everything fed
    units = buffer.feed("Next turn. ") + buffer.end()
    assert [(u.text, u.first, u.start) for u in units] == [("Next turn.", True, 20)]


def peeks(chunks: list[str]) -> list[tuple[str, list[str], str | None]]:
    """(chunk, units feed() emitted, the text peek_first_unit() offers after it) per chunk."""
    buffer = SentenceBuffer()
    out = []
    for chunk in chunks:
        units = buffer.feed(chunk)
        peeked = buffer.peek_first_unit()
        out.append((chunk, [u.text for u in units], peeked.text if peeked else None))
    return out


def test_peek_offers_the_first_sentence_before_the_next_word() -> None:
    tokens = ["Sure", ",", " I", " can", " help", " with", " that", ".", " Your", " order", "."]
    got = peeks(tokens)
    sentence = "Sure, I can help with that."
    assert [p for _, _, p in got] == [None] * 7 + [sentence, None, None, None]  # only once the first unit is out
    assert got[8][1] == [sentence]  # " Your" confirms it: the very unit that was offered
    buffer = SentenceBuffer()
    buffer.feed("Sure, I can help with that.")
    peeked = buffer.peek_first_unit()
    assert peeked == Unit(sentence, 0, 27, True)
    assert buffer.peek_first_unit() == peeked and buffer.pending == sentence  # read-only
    assert buffer.feed(" ") == [] and buffer.peek_first_unit() == peeked  # trailing space: still waiting
    assert buffer.feed(" Thanks") == [peeked]


def test_peek_is_wrong_only_when_the_sentence_goes_on() -> None:
    got = peeks(["The price went up by 3", ".", "5", " percent", "."])
    assert got[1] == (".", [], "The price went up by 3.")
    assert got[2] == ("5", [], None)  # "3.5": the offer is withdrawn
    got = peeks(["She asked", " \"why", "?\"", " and", " left", "."])
    assert got[2][2] == 'She asked "why?"' and got[3][2] is None  # lowercase next word: the sentence goes on


def test_peek_skips_abbreviations_short_text_and_plain_words() -> None:
    for text in ("Please call Dr.", "It takes approx.", "Hi.", "Sure, I can help with that", "Well,"):
        buffer = SentenceBuffer()
        assert buffer.feed(text) == [] and buffer.peek_first_unit() is None, text
    buffer = SentenceBuffer()  # a clause mark counts once the first unit may cut at a clause
    buffer.feed("Of course I can help you with that one,")
    assert buffer.peek_first_unit() == Unit("Of course I can help you with that one,", 0, 39, True)


def test_a_number_before_the_dot_may_go_on() -> None:
    assert number_may_go_on("The price went up by 3.") and number_may_go_on("Use v1.") and number_may_go_on("2.")
    assert not number_may_go_on("Sure, I can help with that.") and not number_may_go_on("It is 3")
    assert not number_may_go_on("Is it 3?") and not number_may_go_on(".") and not number_may_go_on("")


def test_bad_limits_raise_bad_request_naming_the_field() -> None:
    with pytest.raises(BadRequest) as err:
        SentenceBuffer(min_chars=0)
    assert err.value.field == "min_chars"
    with pytest.raises(BadRequest) as err:
        SentenceBuffer(target_chars=400, max_chars=320)
    assert err.value.field == "target_chars"
    with pytest.raises(BadRequest) as err:
        SentenceBuffer().feed(b"bytes")  # type: ignore[arg-type]
    assert err.value.field == "text"


def test_text_package_is_pure_python_and_loads_jieba_lazily() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from realtime_tts.text import SentenceBuffer, split_text\n"
        "b = SentenceBuffer(); b.feed('Hello there. 你好。'); b.end()\n"
        "split_text('Hello there. 你好，世界。' * 40)\n"
        "heavy = [m for m in ('torch', 'numpy', 'jieba') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "split_text('没有标点的很长的中文句子' * 40, target_chars=40, max_chars=80)\n"
        "assert 'jieba' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
