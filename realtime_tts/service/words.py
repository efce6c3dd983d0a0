"""Word timings of a segment. No engine reports word times yet, so they are estimated: the segment's audio span
is shared among its words by spoken weight (letters and digits; each CJK/kana/hangul character is a word of its
own), and every timing says "estimated". Pure Python; imports nothing of the package.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A CJK ideograph, kana or hangul syllable is a word of its own; anything else is cut at whitespace.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_WORD_RE = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


@dataclass(frozen=True, slots=True)
class Word:
    text: str
    text_start: int  # code-point offsets into the context's raw text
    text_end: int
    start_sample: int  # at the engine's sample rate, from the context's first sample
    end_sample: int


def estimate_words(raw: str, text_start: int, start_sample: int, end_sample: int) -> list[Word]:
    """Words of raw (the raw text of a segment, which starts at text_start in the context's text) spread over the
    audio [start_sample, end_sample) by weight: a word of 8 letters gets twice the time of one of 4."""
    matches = list(_WORD_RE.finditer(raw))
    if not matches:
        return []
    weights = [max(1, sum(ch.isalnum() for ch in m.group())) for m in matches]
    total = sum(weights)
    span = max(0, end_sample - start_sample)
    words: list[Word] = []
    done = 0
    for m, w in zip(matches, weights, strict=True):
        a = start_sample + span * done // total
        done += w
        b = start_sample + span * done // total
        words.append(Word(m.group(), text_start + m.start(), text_start + m.end(), a, b))
    return words
