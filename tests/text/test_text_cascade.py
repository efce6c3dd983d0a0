"""The cut cascade (clause → newline → space → grapheme-safe hard cut), the balanced chunker with jieba,
text_length, and the bounded buffer behind the O(1)-per-character cost."""

from __future__ import annotations

import pytest
from text_samples import MORE, SAMPLES

from realtime_tts.errors import BadRequest
from realtime_tts.text import SentenceBuffer, Unit, budget_length, normalize_space, split_text, text_length
from realtime_tts.text.script import is_continuation


def stream(text: str, step: int = 3, **params: int) -> list[Unit]:
    buffer = SentenceBuffer(**params)
    units: list[Unit] = []
    for i in range(0, len(text), step):
        units += buffer.feed(text[i:i + step])
    return units + buffer.end()


def check(raw: str, units: list[Unit], max_chars: int = 320) -> list[int]:
    pos = 0
    for unit in units:
        assert raw[pos:unit.start].strip() == ""
        assert unit.text == normalize_space(raw[unit.start:unit.end])
        assert not is_continuation(raw, unit.start) and not is_continuation(raw, unit.end)
        pos = unit.end
    assert raw[pos:].strip() == ""
    sizes = [budget_length(raw[u.start:u.end]) for u in units]
    assert max(sizes) <= max_chars
    return sizes


def test_long_url_is_hard_cut_within_limits() -> None:
    url = "https://example.com/" + "abcdefghij" * 100
    text = f"See {url} now."
    units = stream(text)
    sizes = check(text, units)
    assert sizes[0] <= 96  # the first unit's limit: time to first audio
    assert "".join(u.text.replace(" ", "") for u in units) == f"See{url}now."
    assert sizes[1:-1] == [320] * (len(sizes) - 2)


def test_long_cjk_run_without_punctuation_is_hard_cut() -> None:
    text = "我们今天在这里讨论一个非常重要的问题" * 30
    units = stream(text, step=2)
    sizes = check(text, units)
    assert "".join(u.text for u in units) == text
    assert sizes[0] <= 96 and all(s > 300 for s in sizes[1:-1])


def test_unpunctuated_cjk_run_cuts_at_a_change_of_script() -> None:
    text = "我们用Python写demo然后deploy到server上" * 20
    units = stream(text, step=3)
    check(text, units)
    for unit in units[:-1]:
        a, b = text[unit.end - 1], text[unit.end]
        assert a.isascii() != b.isascii(), (a, b)
    text = "今日はコーヒーを飲みながら本を読んでいます" * 30
    units = stream(text, step=2)
    check(text, units)
    assert all(u.text.endswith("す") for u in units[:-1])


def test_over_long_sentence_cuts_at_clause_marks() -> None:
    clause = "and then we walked along the river for a while"
    text = ", ".join([clause] * 20) + "."
    units = stream(text, step=5)
    check(text, units)
    assert units[0].text == clause + ","  # first unit: first clause past 24 chars
    for unit in units[:-1]:
        assert unit.text.endswith(",")
    assert all(budget_length(u.text) >= 80 for u in units[1:-1])


def test_over_long_sentence_without_marks_cuts_at_spaces() -> None:
    text = " ".join(["word"] * 300)
    units = stream(text, step=4)
    sizes = check(text, units)
    assert all(u.text.endswith("word") and u.text.startswith("word") for u in units)
    assert all(s >= 80 for s in sizes[1:-1])


def test_newlines_beat_commas_in_the_cascade() -> None:
    text = "".join(f"- item {i}, with some detail, more detail\n" for i in range(30))
    units = stream(text, step=7)
    check(text, units)
    assert units[0].text == "- item 0, with some detail,"  # the first unit: first clause past 24
    assert text[units[1].end] == "\n"
    for unit in units[2:]:
        assert unit.text.startswith("- item") and unit.text.endswith("more detail")


def test_blank_line_is_a_sentence_end() -> None:
    text = "Heading without a stop\n\nFirst paragraph here. Second one"
    units = stream(text, step=1, target_chars=4)
    assert [u.text for u in units] == ["Heading without a stop", "First paragraph here.", "Second one"]


@pytest.mark.parametrize("piece", ["e\u0301", "क्षि", "👨\u200d👩\u200d👧\u200d👦", "👍🏽", "ก้", "\u0915\u093f"])
def test_hard_cuts_never_split_a_grapheme(piece: str) -> None:
    text = piece * 400
    for step in (1, 3, 7):
        units = stream(text, step=step, max_chars=40, target_chars=20, first_segment_min_chars=10)
        check(text, units, max_chars=40)
        units = split_text(text, target_chars=20, max_chars=40)
        check(text, units, max_chars=40)


def test_split_text_uses_jieba_word_boundaries_for_unpunctuated_chinese() -> None:
    import jieba

    text = "".join(ch for ch in MORE["zh"] + SAMPLES["zh"] if ch not in "，。！？；：“”") * 3
    units = split_text(text, target_chars=60, max_chars=120)
    sizes = check(text, units, max_chars=120)
    words = list(jieba.cut(text))
    bounds = {sum(len(w) for w in words[:k]) for k in range(len(words) + 1)}
    assert len(units) > 3 and all(u.end in bounds for u in units)
    assert min(sizes) >= 30, sizes


def test_split_text_is_balanced_not_long_plus_tiny() -> None:
    long_sentence = ", ".join(["the quick brown fox jumps over the lazy dog"] * 6) + "."  # 275 chars
    text = long_sentence + " Then it slept for a while."
    units = split_text(text, target_chars=160, max_chars=320)
    sizes = check(text, units)
    assert len(units) == 2 and min(sizes) >= 100, sizes
    # a short tail joins the previous chunk rather than standing alone
    text = "A" * 10 + " " + "b" * 130 + ". Tail end."
    assert len(split_text(text)) == 1


def test_split_text_prefers_paragraph_ends() -> None:
    one = "This sentence is exactly as long as the others."
    text = f"{one}\n\n{one}  {one}"  # [1][2  3] or [1 2][3]: equal sizes, the blank line wins
    units = split_text(text, target_chars=75, max_chars=150)
    check(text, units, max_chars=150)
    assert [u.text for u in units] == [one, f"{one} {one}"]


def test_split_text_first_chunk_short_for_streaming() -> None:
    text = SAMPLES["en"].replace("Sure! ", "") + " " + MORE["en"]
    units = split_text(text, first_chars=24)
    check(text, units)
    assert units[0].first and not any(u.first for u in units[1:])
    assert 24 <= budget_length(units[0].text) <= 96
    assert units[0].text.endswith((".", ",", "!", "?"))
    assert budget_length(split_text(text)[0].text) > 96


def test_split_text_edges() -> None:
    assert split_text("") == []
    assert split_text(" \n\t\u3000") == []
    assert [u.text for u in split_text("  Hello  world  ")] == ["Hello world"]
    with pytest.raises(BadRequest) as err:
        split_text("x", target_chars=400, max_chars=320)
    assert err.value.field == "target_chars"
    with pytest.raises(BadRequest) as err:
        split_text("x", first_chars=0)
    assert err.value.field == "first_chars"


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("Hello, world!", 2),
    ("don't stop well-known", 3),
    ("你好，世界。", 4),
    ("こんにちは", 5),
    ("안녕하세요", 5),
    ("สวัสดีครับ", 7),  # 10 code points, 3 of them combining marks
    ("I paid 3.14 and 1,000.50 at 12:30", 7),
    ("Great 👍🏽 👨\u200d👩\u200d👧 🇯🇵", 4),
    ("我们用Python写demo", 6),
    ("नमस्ते दुनिया", 2),
    ("Привет, мир", 2),
])
def test_text_length(text: str, expected: int) -> None:
    assert text_length(text) == expected


def test_buffer_stays_bounded_on_a_long_stream() -> None:
    """The O(1) claim's structure: the kept text does not grow with the stream."""
    text = (SAMPLES["en"] + " " + MORE["en"] + " ") * 60  # ~40k characters
    buffer = SentenceBuffer()
    largest = 0
    count = 0
    for i in range(0, len(text), 4):
        count += len(buffer.feed(text[i:i + 4]))
        largest = max(largest, len(buffer._buf))
    count += len(buffer.end())
    assert count > 200
    assert largest < 320 + 300


def test_hard_cut_moved_before_a_zwj_sequence_keeps_every_piece_within_max() -> None:
    # Regression (found by hypothesis): equal hard pieces whose second cut snapped back before a family
    # emoji left the last piece at 15 > max_chars 12. Three pieces cannot fit here; four must.
    text = "HelloHelloHelloHello👨\u200d👩\u200d👧HelloHello"
    units = split_text(text, target_chars=12, max_chars=12)
    sizes = check(text, units, max_chars=12)
    assert "".join(u.text for u in units) == text
    assert len(units) == 4 and min(sizes) >= 6, sizes
