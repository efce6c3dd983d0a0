"""The multilingual punctuation table (the one place that says which characters end sentences, mark clauses
or close them) and the boundary scanner that applies it to text. Pure Python + `regex`; imports nothing
from the package but realtime_tts.text.script.
"""

from __future__ import annotations

import regex

from realtime_tts.text.script import is_cjk, is_continuation

# --- the table -------------------------------------------------------------------------------------------

# Latin-style sentence ends: a boundary only when followed by whitespace, end of text or a CJK character
# (so 3.14, v1.2.3, a.b@c.io, example.com/x and "Hello!World" never cut). Runs ("?!", "!!!") are one mark.
SPACED_TERMINATORS = ".!?\u203c\u2047\u2048\u2049"  # . ! ? ‼ ⁇ ⁈ ⁉
# Ellipses are soft everywhere (clause level): mid-sentence use ("Well… I think") is as common as final.
ELLIPSIS = "\u2026"  # … (and any run of two or more '.')
# Sentence ends that need no following space: CJK 。｡！？；．, Devanagari । ॥, Arabic/Urdu ؟ ۔, Armenian ։,
# Ethiopic ።, Myanmar ။, Khmer ។ ៕, Thai ๚ ๛, Greek question mark ;.
TERMINATORS = (
    "\u3002\uff61\uff01\uff1f\uff1b\uff0e"
    "\u0964\u0965"
    "\u061f\u06d4"
    "\u0589"
    "\u1362"
    "\u104b"
    "\u17d4\u17d5"
    "\u0e5a\u0e5b"
    "\u037e"
)
# Thai has no full stop: a space between two Thai characters ranks as a sentence end (see _resolve).
# Clause marks that need a following space (or end / CJK): 3,000 12:30 https:// a;b never cut.
SPACED_CLAUSE = ",;:"
# Clause marks that need no space: CJK 、，：､, Arabic ، ؛, Myanmar ၊, Ethiopic ፣ ፤, Armenian ՝, em dash —.
CLAUSE = "\u3001\uff0c\uff1a\uff64\u060c\u061b\u104a\u1363\u1364\u055d\u2014"
# Closing quotes/brackets (and markdown emphasis) stay with the sentence they close. « and ‹ count only
# when glued to the mark (German »Satz.«); French opens with « after a space.
CLOSERS = (
    "\"'\u201d\u2019\u00bb\u203a\u00ab\u2039)]}*"
    "\u300d\u300f\u3011\u300b\u3009\uff09\uff3d\uff5d\u3015\u3017\u3019\u301b\uff02\uff07"
)
# Stripped from the front of a word before the abbreviation check.
OPENERS = "\"'\u201c\u2018\u00ab\u2039([{\u00bf\u00a1\u300c\u300e*"

# A "." after one of these never ends a sentence (lowercase, without the final dot).
_ABBREVIATION_WORDS = """
    mr mrs ms mx dr prof sr jr st mt rev capt lt sgt cpl
    vs cf approx ca dept ibid
    feb apr jun jul aug sep sept oct nov tue thu fri
    e.g i.e a.m p.m u.s u.k u.n e.u ph.d b.a m.a b.sc m.sc
    z.b d.h u.a bzw ggf evtl inkl vgl sog hr fr hrn
    mme mlle p.ex sra srta dra
    т.е т.к т.д т.п г гг им ул стр др проф
"""
# Left out: short forms that are far more often ordinary words ending a sentence (sun, sat, fig, Ed, Al,
# est, mar...); "fig", "vol", "no"... count only before a number (below).
ABBREVIATIONS = frozenset(_ABBREVIATION_WORDS.split())
# These are abbreviations only before a number ("No. 5", "pp. 12", "Fig. 3"); elsewhere they can end one.
NUMERIC_ABBREVIATIONS = frozenset(
    ["no", "nos", "nr", "art", "p", "pp", "ch", "sec", "para", "tel", "n", "fig", "figs", "vol", "vols", "eq",
     "eqs", "ft"]
)

# A day number + "." before one of these is an ordinal date (German, Danish, Norwegian: "am 3. Oktober"),
# not a sentence end.
_MONTH_WORDS = """
    januar jänner februar märz marts mars april mai juni juli august september oktober november
    dezember december desember
"""
MONTHS = frozenset(_MONTH_WORDS.split())

# Cut levels, strongest first. The stream buffer treats PARAGRAPH like SENTENCE; the chunker prefers it.
PARAGRAPH = 4  # blank line
SENTENCE = 3
LINE = 2  # single newline (list items, headings)
CLAUSE_LEVEL = 1

# Whitespace after a mark is inspected up to this many characters; a longer gap is itself a break.
# Bounding the look-ahead keeps the streaming scan O(1) per character.
MAX_GAP = 16
# How far back the abbreviation check looks for the word before a ".".
MAX_WORD = 40

_ALL_MARKS = SPACED_TERMINATORS + ELLIPSIS + TERMINATORS + SPACED_CLAUSE + CLAUSE + "\n"
# Whitespace after Thai other than a newline; str.isspace() (which _resolve uses) also counts U+001C..U+001F.
MARK_RE = regex.compile("[" + regex.escape(_ALL_MARKS) + r"]|(?<=\p{Thai})(?:(?!\n)[\s\x1c-\x1f])")
_SPACED_RUN = frozenset(SPACED_TERMINATORS + ELLIPSIS)
_ANY_RUN = frozenset(SPACED_TERMINATORS + ELLIPSIS + TERMINATORS)
_CLAUSE_RUN = frozenset(CLAUSE)
_CLOSERS = frozenset(CLOSERS)
_GUILLEMETS = frozenset("\u00bb\u203a")
_GUILLEMET_SPACE = frozenset(" \u00a0\u202f")
_WORD_CHAR = regex.compile(r"[\p{L}\p{M}]")
_STRONG_LATIN = frozenset("!?\u203c\u2047\u2048\u2049")
_SINGLE_LETTER = regex.compile(r"[\p{Lu}\p{Ll}]")
_DOTTED = regex.compile(r"(?:\p{L}{1,3}\.)+\p{L}{1,3}")
_LOWER = regex.compile(r"\p{Ll}")
_THAI = regex.compile(r"\p{Thai}")


# --- the scanner ----------------------------------------------------------------------------------------

Mark = tuple[int, int]  # (cut offset: the unit ends here, level)


def scan_marks(text: str, pos: int, final: bool, out: list[Mark]) -> int:
    """Append the cut marks of text[pos:] to out, in order; return the frontier.

    Everything before the frontier is decided; a mark whose meaning depends on characters not yet received
    stops the scan at its first character (final=True: the text ends here, so everything resolves). The
    look-back context is text before pos; callers keep at least MAX_WORD + 1 characters of it.
    """
    n = len(text)
    while True:
        m = MARK_RE.search(text, pos)
        if m is None:
            return n
        i: int = m.start()
        got = _resolve(text, i, final)
        if got is None:
            return i
        cut, level, pos = got
        if level and (not out or out[-1][0] != cut):
            out.append((cut, level))
        elif level and out[-1][1] < level:
            out[-1] = (cut, level)


def _gap(text: str, i: int, final: bool) -> tuple[int, int, bool] | None:
    """Skip whitespace from i: (index of the next visible char or len, newlines seen, gap too long)."""
    n = len(text)
    j = i
    newlines = 0
    while j < n and text[j].isspace():
        if text[j] == "\n":
            newlines += 1
        j += 1
        if j - i > MAX_GAP:
            return j, newlines, True
    if j == n and not final:
        return None
    return j, newlines, False


def _resolve(text: str, i: int, final: bool) -> tuple[int, int, int] | None:
    """Decide the mark at text[i]: (cut, level or 0 for "not a cut", where to scan next) or None to wait."""
    n = len(text)
    c = text[i]
    if c == "\n":
        got = _gap(text, i, final)
        if got is None:
            return None
        j, newlines, long_gap = got
        return i, PARAGRAPH if newlines >= 2 or long_gap else LINE, j
    if c.isspace():
        # A space between Thai words: Thai writes a space where other scripts end a sentence (it has no
        # full stop), so it ranks as a sentence end; the space also separates phrases, which only makes
        # Thai units pack from more, shorter pieces.
        got = _gap(text, i, final)
        if got is None:
            return None
        j, newlines, long_gap = got
        if newlines:
            return i, 0, i + 1  # the newline rule decides
        if long_gap or (j < n and _THAI.match(text, j)):
            return i, SENTENCE, j
        return i, 0, j
    if c in _SPACED_RUN:
        return _resolve_latin(text, i, final)
    if c in TERMINATORS:
        r = i
        while r < n and text[r] in _ANY_RUN:
            r += 1
        if c == "\uff0e" and r == i + 1 and 0 < i and text[i - 1].isdigit() and r < n and text[r].isdigit():
            return i, 0, r  # fullwidth decimal point
        e = _closers(text, r)
        if not final and _open_end(text, e):
            return None
        return e, SENTENCE, e
    if c in SPACED_CLAUSE:
        e = _closers(text, i + 1)
        if not final and _open_end(text, e):
            return None
        if e == n:
            return e, CLAUSE_LEVEL, e
        if text[e].isspace() or is_cjk(text[e]):
            return e, CLAUSE_LEVEL, e
        return i, 0, i + 1
    # CLAUSE: no space needed
    r = i
    while r < n and text[r] in _CLAUSE_RUN:
        r += 1
    e = _closers(text, r)
    if not final and _open_end(text, e):
        return None
    return e, CLAUSE_LEVEL, e


def _closers(text: str, i: int) -> int:
    """End of the closers (and grapheme continuations: "‼️", "。\u0301") after a mark ending at text[i]."""
    n = len(text)
    while i < n:
        if text[i] in _CLOSERS or is_continuation(text, i):
            i += 1
        elif (text[i] in _GUILLEMET_SPACE and i + 1 < n and text[i + 1] in _GUILLEMETS
              and (i + 2 == n or not text[i + 2].isalnum())):
            # French « … idée. » puts a (no-break) space before the closing guillemet; German »Wort«
            # opens with » right before a word, so a » glued to a letter is not a closer
            i += 2
        else:
            break
    return i


def _open_end(text: str, e: int) -> bool:
    """Could more closers follow text[:e] once more text arrives?"""
    n = len(text)
    if e == n:
        return True
    return text[e] in _GUILLEMET_SPACE and (e + 1 == n or (e + 2 == n and text[e + 1] in _GUILLEMETS))


def _resolve_latin(text: str, i: int, final: bool) -> tuple[int, int, int] | None:
    n = len(text)
    r = i
    while r < n and text[r] in _ANY_RUN:
        r += 1
    e = _closers(text, r)
    if not final and _open_end(text, e):
        return None  # the run, its closers or what follows may still grow
    run = text[i:r]
    strong = any(ch in _STRONG_LATIN for ch in run)
    if e == n:
        return e, (SENTENCE if strong or run == "." else CLAUSE_LEVEL), e
    follower = text[e]
    if follower.isspace():
        got = _gap(text, e, final)
        if got is None:
            return None
        j, _, long_gap = got
        visible = "" if long_gap or j == n else text[j]
    elif is_cjk(follower):
        j, visible = e, follower
    else:
        return i, 0, r  # glued to the next word: 3.14, v1.2, a.b@c.io, example.com, "Hi!there"
    if not strong and run != ".":
        return e, CLAUSE_LEVEL, e  # an ellipsis: soft
    if visible and _LOWER.match(visible):
        return i, 0, e  # the sentence goes on: 'he asked "why?" and left', 'approx. five'
    if not strong and _is_abbreviation(text, i, visible):
        return i, 0, e
    if not strong and visible and j < n and _day_number(text, i):
        word_end = j
        while word_end < n and word_end - j < MAX_WORD and _WORD_CHAR.match(text, word_end):
            word_end += 1
        if word_end == n and not final and word_end - j < MAX_WORD:
            return None  # need the whole next word: "3. Oktober" is a date
        if text[j:word_end].lower() in MONTHS:
            return i, 0, e
    return e, SENTENCE, e


def number_may_go_on(text: str) -> bool:
    """Does text end with a digit and a "." (nothing after it)? Then the next characters make a decimal or
    version ("3." → "3.5", "v1." → "v1.2") about as often as they end the sentence."""
    return len(text) >= 2 and text[-1] == "." and text[-2].isdigit()


def _day_number(text: str, dot: int) -> bool:
    """Is the word before text[dot] a 1–2 digit number ("3." in "am 3. Oktober", not "2023.")?"""
    k = dot
    while k > 0 and dot - k <= 2 and text[k - 1].isdigit():
        k -= 1
    return 1 <= dot - k <= 2 and (k == 0 or not text[k - 1].isalnum())


def _is_abbreviation(text: str, dot: int, visible: str) -> bool:
    """Is the word ending at text[dot] == '.' an abbreviation, initial or list number (not a sentence end)?"""
    k = dot
    low = max(0, dot - MAX_WORD)
    while k > low and not text[k - 1].isspace():
        k -= 1
    if k == low and low > 0 and not text[k - 1].isspace():
        return False  # a very long "word" (URL, path): never an abbreviation
    line_start = k == 0 or text[k - 1] == "\n"
    word = text[k:dot].lstrip(OPENERS)
    if not word:
        return False
    lowered = word.lower()
    if lowered in ABBREVIATIONS:
        return True
    if lowered in NUMERIC_ABBREVIATIONS and visible[:1].isdigit():
        return True
    if _SINGLE_LETTER.fullmatch(word) or _DOTTED.fullmatch(word):
        return True  # initials (J. K. Rowling, z. B.) and dotted acronyms (U.S., e.g., Ph.D., т.е.)
    return line_start and word.isdigit() and len(word) <= 3  # "1. Install" (list item), not "is 42."
