"""Script-aware lengths: the budget weight of each character and text_length (spoken tokens).

Pure Python + `regex`; imports nothing from the package.

Budgets (min/target/max chars of the buffer and the chunker) are in Latin-character equivalents so that one
number means about the same speaking time in every script: a Han or Hangul character (about one syllable,
as long as ~3 Latin letters) weighs 3, a kana 2, a combining mark 0, anything else (spaces included) 1.
160 ≈ 10 s of speech in English, Chinese or Korean alike.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import regex

_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u3000-\u303f\uff00-\uffef]")
_HEAVY = regex.compile(r"[\p{Han}\p{Hangul}]")
_KANA = regex.compile(r"[\p{Hiragana}\p{Katakana}]")

# One token per match: CJK/kana/Hangul/Thai per character (Thai combining marks do not count), words of
# other scripts (with inner apostrophes/hyphens), numbers (3.14, 1,000, 12:30) and emoji clusters as one.
_TOKEN = regex.compile(
    r"""
    (?P<char>[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\u30fc])
  | (?P<thai>\p{Thai})
  | (?P<word>[[\p{L}\p{M}]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}]]
              [[\p{L}\p{M}\p{Nd}]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}]]*
      (?:['\u2019\-][[\p{L}\p{M}\p{Nd}]--[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}]]+)*)
  | (?P<number>\p{Nd}+(?:[.,:/]\p{Nd}+)*)
  | (?P<emoji>(?=\p{Extended_Pictographic}|\p{Regional_Indicator})\X)
    """,
    regex.VERBOSE | regex.V1,
)


def is_cjk(ch: str) -> bool:
    """Han, kana, Hangul or CJK/fullwidth punctuation: scripts written without spaces between sentences."""
    return _CJK.match(ch) is not None


@lru_cache(maxsize=8192)
def char_weight(ch: str) -> int:
    """Budget weight of one code point (see the module docstring)."""
    if ch < "\u0300":
        return 1
    if _HEAVY.match(ch):
        return 3
    if _KANA.match(ch):
        return 2
    if unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 1


def weights(text: str) -> list[int]:
    """Per-code-point budget weights of text."""
    if text.isascii():
        return [1] * len(text)
    return [char_weight(ch) for ch in text]


def budget_length(text: str) -> int:
    """Length of text in budget units (Latin-character equivalents)."""
    if text.isascii():
        return len(text)
    return sum(char_weight(ch) for ch in text)


def text_length(text: str) -> int:
    """Mixed-language spoken length: CJK/kana/Hangul/Thai per character (Thai combining marks excluded),
    other scripts per word, numbers and emoji as one each; punctuation and spaces count nothing."""
    count = 0
    for m in _TOKEN.finditer(text):
        if m.lastgroup == "thai" and unicodedata.category(m.group()) in ("Mn", "Mc", "Me"):
            continue
        count += 1
    return count


_CLASS = regex.compile(r"(\p{Han})|(\p{Hiragana})|([\p{Katakana}\u30fc])|(\p{Hangul})|([\p{L}\p{N}])")


def _script_class(ch: str) -> int:
    """1 Han, 2 hiragana, 3 katakana, 4 Hangul, 5 any other letter or digit, 0 anything else."""
    m = _CLASS.match(ch)
    return (m.lastindex or 0) if m else 0


def is_script_break(text: str, i: int) -> bool:
    """A cut before text[i] falls between two scripts of a CJK run ("用|Python", "を|飲む"): the best cut
    left in text with no space or punctuation. Not before hiragana after kanji/katakana (okurigana,
    particles: "食|べる", "コーヒー|を")."""
    if i <= 0 or i >= len(text):
        return False
    before, after = _script_class(text[i - 1]), _script_class(text[i])
    if not before or not after or before == after:
        return False  # (two non-CJK letters are one class, so one side is always CJK here)
    return not (before in (1, 3) and after == 2)


def is_continuation(text: str, i: int) -> bool:
    """True if a cut before text[i] would split a grapheme (combining mark, ZWJ sequence, variation
    selector, emoji modifier or tag, CR LF)."""
    if i <= 0 or i >= len(text):
        return False
    ch = text[i]
    prev = text[i - 1]
    if prev == "\u200d" or ch == "\u200d" or (prev == "\r" and ch == "\n"):
        return True
    o = ord(ch)
    if 0xFE00 <= o <= 0xFE0F or 0x1F3FB <= o <= 0x1F3FF or 0xE0020 <= o <= 0xE01EF:
        return True
    return ch >= "\u0300" and unicodedata.category(ch) in ("Mn", "Mc", "Me")
