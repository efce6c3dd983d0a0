"""split_text: the long-text chunker for whole inputs (HTTP synthesis, WS /v1/stream, chunk_mode).

Pure Python + `regex`, `jieba` (imported lazily, only for over-long Chinese runs); imports only
realtime_tts.errors and realtime_tts.text.*. Lengths are budget units (see realtime_tts.text.script).

Recursive split: sentences (blank lines and sentence ends from the punctuation table) → clauses (for
sentences over the target) → words (clauses over max_chars; jieba for Han text) → about equal hard
pieces on grapheme boundaries (words over max_chars: URLs, unpunctuated runs). Then balanced packing: a dynamic
programme over the pieces picks the cuts minimising the squared relative distance of each chunk from the
target plus a penalty for cutting at a weaker boundary, with every chunk <= max_chars, so a text becomes
chunks near the target instead of one long and one tiny.
"""

from __future__ import annotations

import functools
import logging
import math
from bisect import bisect_left, bisect_right
from itertools import accumulate
from types import ModuleType

import regex

from realtime_tts.errors import BadRequest
from realtime_tts.text.punctuation import CLAUSE_LEVEL, LINE, PARAGRAPH, SENTENCE, Mark, scan_marks
from realtime_tts.text.script import is_continuation, weights
from realtime_tts.text.unit import Unit, normalize_space

WORD = 0
HARD = -1
# Cost of cutting at each boundary level, in units of (relative distance from target)².
# Paragraph ends win a near tie with sentence ends.
_PENALTY = {PARAGRAPH: 0.0, SENTENCE: 0.05, LINE: 0.2, CLAUSE_LEVEL: 0.5, WORD: 1.5, HARD: 4.0}
# Runs of non-whitespace as str.isspace() sees it (the units' whitespace rule), which also counts the
# information separators U+001C..U+001F that regex's \s does not.
_VISIBLE = regex.compile(r"[^\s\x1c-\x1f]+")
_HAN = regex.compile(r"\p{Han}")

Atom = tuple[int, int, int]  # (start, end, level of the boundary after it)


@functools.cache
def _jieba() -> ModuleType:
    import jieba  # ~1 s to build its dictionary: only when Chinese text needs word boundaries

    jieba.setLogLevel(logging.WARNING)
    module: ModuleType = jieba
    return module


def warm_up() -> None:
    """Build jieba's dictionary now (~1-2 s of CPU) rather than inside the first split_text that needs it.
    Blocking: call it from a worker thread at startup (never on the event loop)."""
    _jieba().initialize()


def split_text(text: str, *, target_chars: int = 160, max_chars: int = 320,
               first_chars: int | None = None) -> list[Unit]:
    """Chunk a whole text into units near target_chars (never over max_chars unless a single grapheme
    cluster is). first_chars: make the first unit about this long (streaming: time to first audio)."""
    if not isinstance(text, str):
        raise BadRequest(f"text must be a string, got {type(text).__name__}", field="text")
    if not 1 <= target_chars <= max_chars:
        raise BadRequest(f"need 1 <= target_chars ({target_chars}) <= max_chars ({max_chars})",
                         field="target_chars")
    if first_chars is not None and not 1 <= first_chars <= max_chars:
        raise BadRequest(f"need 1 <= first_chars ({first_chars}) <= max_chars ({max_chars})",
                         field="first_chars")
    if not text or text.isspace():
        return []
    cum = list(accumulate(weights(text), initial=0))  # cum[i] = budget weight of text[:i]
    marks: list[Mark] = []
    scan_marks(text, 0, True, marks)
    first_limit = None
    if first_chars is not None:
        first_limit = min(max_chars, max(first_chars, min(target_chars, 4 * first_chars)))
    atoms = _atoms(text, cum, marks, target_chars, max_chars, first_chars, first_limit)
    cuts = _pack(atoms, cum, target_chars, max_chars, first_chars, first_limit)
    units = []
    for k, (i, j) in enumerate(cuts):
        a, b = atoms[i][0], atoms[j][1]
        units.append(Unit(normalize_space(text[a:b]), a, b, k == 0))
    return units


def _spans(text: str, a: int, b: int, cuts: list[Mark], tail_level: int) -> list[Atom]:
    """Split text[a:b] at cut offsets: visible spans with the level of the boundary after each."""
    out: list[Atom] = []
    pos = a
    for cut, level in cuts:
        if cut <= pos or cut >= b:
            continue
        s, e = _trim(text, pos, cut)
        if s < e:
            out.append((s, e, level))
        pos = cut
    s, e = _trim(text, pos, b)
    if s < e:
        out.append((s, e, tail_level))
    elif out:
        out[-1] = (out[-1][0], out[-1][1], tail_level)
    return out


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _atoms(text: str, cum: list[int], marks: list[Mark], target: int, max_chars: int,
           first_chars: int | None, first_limit: int | None) -> list[Atom]:
    sentence_cuts = [m for m in marks if m[1] >= SENTENCE]
    soft_cuts = [m for m in marks if m[1] < SENTENCE]
    atoms: list[Atom] = []
    for index, (a, b, after) in enumerate(_spans(text, 0, len(text), sentence_cuts, 0)):
        split_at, word_at = target, max_chars
        if index == 0 and first_chars is not None and first_limit is not None:
            split_at, word_at = first_chars, first_limit
        if cum[b] - cum[a] <= split_at:
            atoms.append((a, b, after))
            continue
        inner = soft_cuts[bisect_right(soft_cuts, (a, PARAGRAPH)):bisect_left(soft_cuts, (b, 0))]
        for ca, cb, clevel in _spans(text, a, b, inner, after):
            if cum[cb] - cum[ca] <= word_at:
                atoms.append((ca, cb, clevel))
            else:
                atoms.extend(_words(text, cum, ca, cb, clevel, target, max_chars))
    return atoms


def _words(text: str, cum: list[int], a: int, b: int, after: int, target: int, max_chars: int) -> list[Atom]:
    pieces: list[tuple[int, int]] = []
    for m in _VISIBLE.finditer(text, a, b):
        s, e = m.span()
        if _HAN.search(text, s, e) and cum[e] - cum[s] > 3:
            pos = s
            for word in _jieba().cut(text[s:e]):
                if pos > s and is_continuation(text, pos):
                    pieces[-1] = (pieces[-1][0], pos + len(word))  # jieba split a grapheme: rejoin
                else:
                    pieces.append((pos, pos + len(word)))
                pos += len(word)
        else:
            pieces.append((s, e))
    # Consecutive words are grouped up to a small grain so the packing works on ~8 pieces per target
    # rather than one per word (a 50,000-character unpunctuated input stays fast); cuts stay between words.
    grain = max(1, target // 8)
    out: list[Atom] = []
    for s, e in pieces:
        if cum[e] - cum[s] > max_chars:
            out.extend(_hard(text, cum, s, e, target))
        elif out and out[-1][2] == WORD and cum[e] - cum[out[-1][0]] <= grain:
            out[-1] = (out[-1][0], e, WORD)
        else:
            out.append((s, e, WORD))
    out[-1] = (out[-1][0], out[-1][1], after)
    return out


def _hard(text: str, cum: list[int], a: int, b: int, target: int) -> list[Atom]:
    """Pieces of about target (never over it unless one grapheme is) on grapheme boundaries: the last resort.

    Each cut aims at an equal share of what is left and snaps back to a grapheme boundary; the share is
    recomputed after every cut, so a cut moved back (before a ZWJ sequence, a combining mark) lengthens the
    remaining pieces a little instead of leaving the last one over the limit.
    """
    out: list[Atom] = []
    pos = a
    while cum[b] - cum[pos] > target:
        rest = cum[b] - cum[pos]
        aim = cum[pos] + rest / math.ceil(rest / target)
        cut = bisect_right(cum, aim, pos + 1, b) - 1  # furthest cut with cum[cut] <= aim
        while cut > pos and is_continuation(text, cut):
            cut -= 1
        if cut <= pos:  # the first grapheme alone is heavier than the share: it goes alone
            cut = pos + 1
            while cut < b and is_continuation(text, cut):
                cut += 1
            if cut >= b:
                break
        out.append((pos, cut, HARD))
        pos = cut
    out.append((pos, b, HARD))
    return out


def _pack(atoms: list[Atom], cum: list[int], target: int, max_chars: int,
          first_chars: int | None, first_limit: int | None) -> list[tuple[int, int]]:
    """Dynamic programme: best[j] = least cost of chunking atoms[:j]; chunks are atom ranges [i, j)."""
    n = len(atoms)
    best = [0.0] + [math.inf] * n
    back = [0] * (n + 1)
    for j in range(1, n + 1):
        end = atoms[j - 1][1]
        for i in range(j - 1, -1, -1):
            length = cum[end] - cum[atoms[i][0]]
            if length > max_chars and i < j - 1:
                break
            if i == 0 and first_chars is not None and first_limit is not None:
                cost = _first_cost(length, first_chars, first_limit)
            else:
                cost = ((length - target) / target) ** 2
            if i > 0:
                cost += _PENALTY[atoms[i - 1][2]]
            total = best[i] + cost
            if total < best[j]:
                best[j], back[j] = total, i
    cuts = []
    j = n
    while j > 0:
        i = back[j]
        cuts.append((i, j - 1))
        j = i
    cuts.reverse()
    return cuts


def _first_cost(length: int, first_chars: int, first_limit: int) -> float:
    """Zero-ish between first_chars and first_limit, growing quadratically outside."""
    if length < first_chars:
        return ((first_chars - length) / first_chars) ** 2
    if length <= first_limit:
        return 0.25 * (length - first_chars) / (first_limit - first_chars + 1)
    return 0.25 + ((length - first_limit) / first_chars) ** 2
