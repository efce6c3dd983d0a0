"""SentenceBuffer: the contract (API, offsets, min_chars, first unit, flush/end) on small real inputs."""

from __future__ import annotations

import pytest

from realtime_tts.errors import BadRequest
from realtime_tts.text import SentenceBuffer, Unit, normalize_space


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
