"""Property tests: lossless units, limits kept, and the same units however the text is chunked."""

from __future__ import annotations

import copy
import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from realtime_tts.text import SentenceBuffer, Unit, budget_length, normalize_space, split_text
from realtime_tts.text.punctuation import (
    CLAUSE,
    CLOSERS,
    ELLIPSIS,
    SPACED_CLAUSE,
    SPACED_TERMINATORS,
    TERMINATORS,
)
from realtime_tts.text.script import is_continuation

# Longer hunts: TEXT_EXAMPLES_SCALE=10 .venv/bin/python -m pytest tests/text/test_text_properties.py
SCALE = int(os.environ.get("TEXT_EXAMPLES_SCALE", "1"))

# Fragments that exercise every rule: sentence ends in many scripts, clause marks, closers, abbreviations,
# decimals, versions, URLs, ellipses, newlines, combining marks, emoji ZWJ sequences, CJK without spaces.
FRAGMENTS = [
    "Hello", "world", "the", "a", "I", "Mr.", "Dr.", "e.g.", "U.S.", "etc.", "No.", "3.14", "v1.2.3",
    "https://example.com/a.b?c=d.", "a.b@c.io", "1.", "42.", "...", "…", ".", "!", "?", "?!", ",", ";", ":",
    "\"", "”", "'", ")", "(", "—", "-", " ", " ", " ", "  ", "\n", "\n\n", "\t", "\u3000", "\u00a0",
    "你好", "世界", "。", "！", "？", "；", "，", "、", "……", "」", "「", "こんにちは", "ですね", "안녕하세요",
    "ภาษาไทย", "สวัสดีครับ", "नमस्ते", "।", "हिन्दी", "مرحبا", "؟", "،", "؛", "Привет", "т.е.", "Как",
    "Straße", "z.", "B.", "déjà", "vu", "👍🏽", "👨\u200d👩\u200d👧", "\u200d", "\u0301", "\ufe0f", "🇯🇵", "e\u0301", "12:30", "3,000",
    "ok", "Yes", "no", "x" * 30, "中" * 25, "Oktober", "3.", " »", "\u00a0»", "«", "Bonjour !", "idée. »", "»Nein.«", " »x", "‹", "›",
]

WORDS = [f for f in FRAGMENTS if f.strip() and f[0].isalnum()]
MARKS = list(".!?…。！？；，、।؟،;:,—") + ["...", "?!", "……"]
CLOSING = ["", "", "\"", "”", "」", ")", "’", "*", "」」"]
GAPS = ["", " ", " ", " ", "\n", "\n\n", "  ", "\u3000"]

# Sentence-shaped pieces so terminators, closers and gaps meet often (and meet chunk borders often).
sentence_piece = st.builds(lambda w, m, c, g: w + m + c + g, st.sampled_from(WORDS), st.sampled_from(MARKS),
                           st.sampled_from(CLOSING), st.sampled_from(GAPS))
text_strategy = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3) | sentence_piece,
                         max_size=60).map("".join)


@st.composite
def limits(draw: st.DrawFn) -> dict[str, int]:
    min_chars = draw(st.integers(1, 8))
    first = draw(st.integers(min_chars, 40))
    max_chars = draw(st.integers(max(first, 12), 90))
    target = draw(st.integers(min_chars, max_chars))
    return {"min_chars": min_chars, "first_segment_min_chars": first, "target_chars": target,
            "max_chars": max_chars}


def check_lossless(raw: str, units: list[Unit], whole_graphemes: bool = True) -> None:
    """Units are raw's visible text, in order, once; only whitespace between them; a cut with no whitespace
    at it never splits a grapheme cluster (whole_graphemes=False: the caller cut at flush()/end())."""
    pos = 0
    for unit in units:
        assert pos <= unit.start < unit.end <= len(raw)
        if whole_graphemes and unit.start == pos > 0:
            assert not is_continuation(raw, pos), (raw[pos - 2:pos + 2], units)
        assert raw[pos:unit.start].strip() == "", (raw[pos:unit.start], units)
        assert not raw[unit.start].isspace() and not raw[unit.end - 1].isspace()
        assert unit.text == normalize_space(raw[unit.start:unit.end])
        pos = unit.end
    assert raw[pos:].strip() == ""
    assert "".join("".join(u.text.split()) for u in units) == "".join(raw.split())


def within_max(raw: str, unit: Unit, max_chars: int) -> bool:
    """Within the limit, or one grapheme cluster alone (no cut point inside it) is heavier."""
    if budget_length(raw[unit.start:unit.end]) <= max_chars:
        return True
    return all(is_continuation(raw, k) for k in range(unit.start + 1, unit.end))


def run_chunks(chunks: list[str], params: dict[str, int]) -> list[Unit]:
    buffer = SentenceBuffer(**params)
    units: list[Unit] = []
    fed = ""
    for chunk in chunks:
        units += buffer.feed(chunk)
        fed += chunk
        assert buffer.pending == fed[units[-1].end if units else 0:].lstrip()
    return units + buffer.end()


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


@settings(max_examples=1000 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_strategy, st.lists(st.integers(0, 10_000), max_size=40), limits())
# One ZWJ chain heavier than max_chars: once cut into single code points; it goes whole, as in split_text.
@example("Hello there 👨\u200d👩\u200d👧\u200d👨\u200d👩\u200d👧\u200d👨\u200d👩\u200d👧 and more.", [13, 20],
         {"min_chars": 1, "first_segment_min_chars": 12, "target_chars": 12, "max_chars": 12})
@example("Hello0\x1f0Hello", [6, 7], {"min_chars": 1, "first_segment_min_chars": 12, "target_chars": 12,
                                       "max_chars": 12})
def test_buffer_lossless_and_chunking_invariant(text: str, cuts: list[int], params: dict[str, int]) -> None:
    whole = run_chunks([text], params)
    check_lossless(text, whole)
    assert run_chunks(split_at(text, cuts), params) == whole
    assert run_chunks(list(text), params) == whole
    for unit in whole:
        assert within_max(text, unit, params["max_chars"]), unit
    assert [u.first for u in whole] == [i == 0 for i in range(len(whole))]


@settings(max_examples=150 * SCALE, deadline=None)
@given(st.lists(text_strategy, min_size=1, max_size=4), limits())
def test_buffer_turns_and_flushes_keep_offsets(parts: list[str], params: dict[str, int]) -> None:
    buffer = SentenceBuffer(**params)
    raw = ""
    units: list[Unit] = []
    expect_first = True
    for k, part in enumerate(parts):
        turn = buffer.feed(part)
        turn += buffer.flush() if k % 2 else buffer.end()
        assert buffer.pending == ""
        raw += part
        assert [u.first for u in turn] == [expect_first and i == 0 for i in range(len(turn))]
        expect_first = (expect_first and not turn) if k % 2 else True
        units += turn
    check_lossless(raw, units, whole_graphemes=False)


@settings(max_examples=300 * SCALE, deadline=None)
@given(text_strategy, st.integers(12, 200), st.integers(0, 200), st.none() | st.integers(4, 60))
# A hard cut moved back before a ZWJ sequence once left the last piece over max_chars (15 > 12).
@example("HelloHelloHelloHello👨\u200d👩\u200d👧HelloHello", 12, 0, None)
# U+001F is whitespace to str.isspace() but not to regex's \S: a unit once started with it.
@example("Hello0\x1f0Hello", 12, 0, None)
def test_split_text_lossless_and_within_max(text: str, target: int, extra: int, first: int | None) -> None:
    max_chars = target + extra
    first = None if first is None else min(first, max_chars)
    units = split_text(text, target_chars=target, max_chars=max_chars, first_chars=first)
    check_lossless(text, units)
    for unit in units:
        assert within_max(text, unit, max_chars), unit
    assert [u.first for u in units] == [i == 0 for i in range(len(units))]


# Every mark of the punctuation table, and what may close one.
PEEK_ENDS = frozenset(SPACED_TERMINATORS + ELLIPSIS + TERMINATORS + SPACED_CLAUSE + CLAUSE + CLOSERS + "\n")


@settings(max_examples=500 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text_strategy, st.lists(st.integers(0, 10_000), max_size=40), limits())
@example("Sure, I can help with that. Your order", [27, 28], {"min_chars": 4, "first_segment_min_chars": 24,
                                                             "target_chars": 160, "max_chars": 320})
@example("Hi there\n", [], {"min_chars": 1, "first_segment_min_chars": 2, "target_chars": 6, "max_chars": 12})
def test_peek_first_unit_is_read_only_and_offers_a_prefix(text: str, cuts: list[int], params: dict[str, int]) -> None:
    """peek_first_unit() changes nothing that feed/flush/end emit; what it offers is the pending text up to a
    mark, exactly what flush() would emit and what feed() emits if a new sentence follows; and, like the units,
    it depends only on the text fed so far, not on the chunking."""
    by_char = SentenceBuffer(**params)
    peek_at = [by_char.peek_first_unit()]  # peek_at[k]: the offer once text[:k] has been fed
    for ch in text:
        by_char.feed(ch)
        peek_at.append(by_char.peek_first_unit())
    buffer = SentenceBuffer(**params)
    units: list[Unit] = []
    fed = ""
    for chunk in split_at(text, cuts):
        units += buffer.feed(chunk)
        fed += chunk
        peeked = buffer.peek_first_unit()
        assert peeked == peek_at[len(fed)]
        if peeked is None:
            continue
        assert not units and peeked.first
        assert peeked.text == normalize_space(buffer.pending) and fed[peeked.end:].strip() == ""
        assert (fed[peeked.end - 1] in PEEK_ENDS or is_continuation(fed, peeked.end - 1)
                or "\n" in fed[peeked.end:]), peeked  # a mark ends it, or a newline follows it
        assert buffer.peek_first_unit() == peeked
        assert copy.deepcopy(buffer).flush() == [peeked]
        twin = copy.deepcopy(buffer)
        assert (twin.feed(" Z") + twin.end())[0] == peeked
    units += buffer.end()
    assert units == run_chunks(split_at(text, cuts), params)
