"""SentenceBuffer: turns streamed text (LLM tokens) into units to synthesise, as early as is safe.

Pure Python; imports only realtime_tts.errors and realtime_tts.text.*. Never imports the engine.

Rules (all lengths in budget units, see realtime_tts.text.script; whitespace rule: see unit.py):
- Cuts come from the punctuation table (realtime_tts.text.punctuation): sentence ends, blank lines, single
  newlines, clause marks. A unit shorter than min_chars is only ever emitted by flush() / end().
- The first unit of a turn ends at the first sentence end at >= min_chars or the first clause mark / newline
  at >= first_segment_min_chars (time to first audio). Later units pack whole sentences up to target_chars
  (a single longer sentence goes alone while it fits max_chars).
- No sentence end within the limit (later units: max_chars; the first unit: first_max_chars =
  min(max_chars, max(first_segment_min_chars, min(target_chars, 4 * first_segment_min_chars))), 96 by
  default) → cascade: the strongest clause mark / newline, else the last space (at >= first_segment_min_chars
  for the first unit, >= target_chars // 2 for later ones, else >= min_chars), else the last change of script
  in a CJK run, else a hard cut at the limit on a grapheme boundary (URLs, unpunctuated CJK runs); a
  single grapheme cluster heavier than the limit (a long ZWJ chain) is the one unit allowed over it.
- Output depends only on the text, never on how it was chunked: every cut is taken only once the characters
  that decide it have arrived (look-ahead is bounded: punctuation.MAX_GAP spaces, MAX_WORD letters).
- Cost: each character is scanned once (a scan position is kept); the kept buffer is bounded by max_chars
  plus a little look-back, so feed() is amortised O(1) per character.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from itertools import accumulate

from realtime_tts.errors import BadRequest
from realtime_tts.text.punctuation import CLAUSE_LEVEL, MARK_RE, MAX_WORD, SENTENCE, Mark, scan_marks
from realtime_tts.text.script import is_continuation, is_script_break, weights
from realtime_tts.text.unit import Unit, normalize_space

# Characters kept before the current unit so the scanner's look-back (abbreviations, Thai spaces) sees the
# same context however the text was chunked.
_HISTORY = MAX_WORD + 8
# What peek_first_unit() assumes comes next: a new sentence (a space, then a capital letter).
_NEW_SENTENCE = " Z"


def check_limits(min_chars: int, first_segment_min_chars: int, target_chars: int, max_chars: int) -> None:
    for name, value in (("min_chars", min_chars), ("first_segment_min_chars", first_segment_min_chars),
                        ("target_chars", target_chars), ("max_chars", max_chars)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadRequest(f"{name} must be an integer, got {value!r}", field=name)
    if not 1 <= min_chars <= first_segment_min_chars <= max_chars:
        raise BadRequest(f"need 1 <= min_chars ({min_chars}) <= first_segment_min_chars "
                         f"({first_segment_min_chars}) <= max_chars ({max_chars})", field="min_chars")
    if not min_chars <= target_chars <= max_chars:
        raise BadRequest(f"need min_chars ({min_chars}) <= target_chars ({target_chars}) <= max_chars "
                         f"({max_chars})", field="target_chars")


class SentenceBuffer:
    """Streaming segmenter for one text stream (a WS /v1/stream/text connection or a session context)."""

    def __init__(self, *, min_chars: int = 4, first_segment_min_chars: int = 24,
                 target_chars: int = 160, max_chars: int = 320) -> None:
        check_limits(min_chars, first_segment_min_chars, target_chars, max_chars)
        self.min_chars = min_chars
        self.first_segment_min_chars = first_segment_min_chars
        self.target_chars = target_chars
        self.max_chars = max_chars
        self.first_max_chars = min(max_chars, max(first_segment_min_chars,
                                                  min(target_chars, 4 * first_segment_min_chars)))
        self._spill_chars = max(min_chars, target_chars // 2)
        self._total = 0  # code points ever fed (offsets are absolute over all turns)
        self._new_turn()

    def _new_turn(self) -> None:
        self._buf = ""  # raw text from absolute offset _origin on
        self._origin = self._total
        self._cum = [0]  # _cum[i] = budget weight of _buf[:i]
        self._start = self._total  # absolute offset of the current unit's first character
        self._scan = self._total  # absolute offset the scanner resumes at
        self._frontier = self._total  # everything before it is decided
        self._marks: deque[Mark] = deque()  # resolved cut marks after _start, absolute offsets
        self._first = True

    @property
    def pending(self) -> str:
        """Text buffered and not yet emitted (leading whitespace excluded)."""
        return self._buf[max(0, self._start - self._origin):]

    def feed(self, chunk: str) -> list[Unit]:
        """Append chunk verbatim; return the units that are now complete."""
        if not isinstance(chunk, str):
            raise BadRequest(f"text must be a string, got {type(chunk).__name__}", field="text")
        if not chunk:
            return []
        last = self._cum[-1]
        if chunk.isascii():
            self._cum.extend(range(last + 1, last + len(chunk) + 1))
        else:
            self._cum.extend(accumulate(weights(chunk), initial=last))
            del self._cum[-len(chunk) - 1]  # accumulate starts with `last`, already there
        self._buf += chunk
        self._total += len(chunk)
        return self._advance(final=False)

    def flush(self) -> list[Unit]:
        """Everything buffered, now (even under min_chars); the turn goes on."""
        return self._advance(final=True)

    def end(self) -> list[Unit]:
        """The rest of the turn; the buffer starts a new turn (offsets keep counting)."""
        units = self._advance(final=True)
        self._new_turn()
        return units

    def peek_first_unit(self) -> Unit | None:
        """The turn's first unit as it will be if the next word starts a new sentence, or None. Read-only.

        Offered only while the first unit is undecided and the pending text ends at a cut mark that waits on
        look-ahead alone ("Sure, I can help with that." before the next word: ' Your' confirms the cut, ' in'
        does not) and that would end the first unit once confirmed (a sentence end at >= min_chars, a clause mark
        or newline at >= first_segment_min_chars). Then the unit is the whole pending text, exactly as flush()
        would emit it now; the text that follows decides whether feed() later emits this very unit (same text
        and offsets) or a longer one. Abbreviations ("approx.", "Dr.") and partial text are never offered.
        """
        if not self._first or self._frontier >= self._total:
            return None  # decided up to the end: no mark waits on the next characters
        buf, origin, cum = self._buf, self._origin, self._cum
        n = len(buf)
        s = self._start - origin
        while s < n and buf[s].isspace():
            s += 1
        f = self._frontier - origin
        if f < s:
            return None
        # Resolve the waiting mark as if a new sentence began after it (a space, then a capital). Only the
        # frontier's own mark can end the unit: everything before it is resolved and did not cut.
        found: list[Mark] = []
        scan_marks(buf + _NEW_SENTENCE, f, True, found)
        for cut, level in found:
            if cut > n:
                break  # a mark of the probe itself
            length = cum[cut] - cum[s]
            if length > self.first_max_chars:
                break
            if not self._ends_first_unit(length, level):
                continue
            if cut < n and not buf[cut:].isspace():
                return None  # visible text follows the cut: it is still waiting on a later word
            e = cut
            while e > s and buf[e - 1].isspace():
                e -= 1
            return Unit(normalize_space(buf[s:e]), s + origin, e + origin, True)
        return None

    # --- internals ----------------------------------------------------------------------------------

    def _weight(self, a: int, b: int) -> int:
        return self._cum[b - self._origin] - self._cum[a - self._origin]

    def _skip_space(self) -> None:
        buf, i, n = self._buf, self._start - self._origin, len(self._buf)
        while i < n and buf[i].isspace():
            i += 1
        self._start = i + self._origin

    def _advance(self, final: bool) -> list[Unit]:
        self._skip_space()
        origin = self._origin
        scan = max(self._scan, self._start) - origin
        found: list[Mark] = []
        if final or MARK_RE.search(self._buf, scan):
            frontier = scan_marks(self._buf, scan, final, found)
        else:
            frontier = len(self._buf)  # fast path: no punctuation, space-after-Thai or newline arrived
        for cut, level in found:
            cut += origin
            if cut <= self._start:
                continue
            if self._marks and self._marks[-1][0] == cut:
                if self._marks[-1][1] < level:
                    self._marks[-1] = (cut, level)
                continue
            self._marks.append((cut, level))
        self._scan = self._frontier = frontier + origin
        units: list[Unit] = []
        while self._start < self._total:
            next_cut = self._next_cut()
            if next_cut is None:
                break
            self._emit(next_cut, units)
        if final and self._start < self._total:
            self._emit(self._total, units)
        self._trim()
        return units

    def _ends_first_unit(self, length: int, level: int) -> bool:
        """Does a resolved mark `length` into the turn's first unit end it (within first_max_chars)? A sentence
        end at >= min_chars, a clause mark or newline at >= first_segment_min_chars. One rule for the cut
        (_next_cut) and the guess (peek_first_unit), so the guess is the unit the cut later emits."""
        return ((level >= SENTENCE and length >= self.min_chars)
                or (level >= CLAUSE_LEVEL and length >= self.first_segment_min_chars))

    def _next_cut(self) -> int | None:
        """Where the current unit ends, if that is decided yet."""
        start = self._start
        reach = self._weight(start, self._frontier)
        if self._first:
            limit = self.first_max_chars
            for cut, level in self._marks:
                length = self._weight(start, cut)
                if length > limit:
                    break
                if self._ends_first_unit(length, level):
                    return cut
            if reach > limit:
                return self._cascade(limit, self.first_segment_min_chars)
            return None
        if reach <= self.target_chars:
            return None  # the common case, O(1): the unit may still grow
        best = None
        for cut, level in self._marks:
            if level < SENTENCE:
                continue
            length = self._weight(start, cut)
            if length < self.min_chars:
                continue
            if length <= self.target_chars:
                best = cut
                continue
            if best is None and length <= self.max_chars:
                return cut  # one sentence longer than the target goes alone
            break
        if best is not None:
            return best
        if reach > self.max_chars:
            return self._cascade(self.max_chars, self._spill_chars)
        return None

    def _cascade(self, limit: int, low: int) -> int | None:
        """Cut a unit that found no sentence end within limit: clause/newline → space → grapheme
        (None: wait for more text)."""
        origin, buf, cum = self._origin, self._buf, self._cum
        s = self._start - origin
        # hi: the furthest cut (buffer index) keeping the unit within limit
        hi = bisect_right(cum, cum[s] + limit, s, self._frontier - origin + 1) - 1
        best, best_level = None, 0
        for cut, level in self._marks:
            length = self._weight(self._start, cut)
            if length > limit:
                break
            if length >= low and level >= best_level:
                best, best_level = cut, level
        if best is not None:
            return best
        fallback = None
        q = hi
        while q > s and cum[q] - cum[s] >= self.min_chars:
            if buf[q].isspace() and not buf[q - 1].isspace():
                if cum[q] - cum[s] >= low:
                    return q + origin
                if fallback is None:
                    fallback = q + origin
            q -= 1
        if fallback is not None:
            return fallback
        q = hi  # no space: a change of script inside a CJK run ("用|Python", "を|飲む") beats a hard cut
        while q > s and cum[q] - cum[s] >= self.min_chars:
            if is_script_break(buf, q):
                return q + origin
            q -= 1
        p = hi
        while p > s and is_continuation(buf, p):
            p -= 1
        if p > s:
            return p + origin
        # One grapheme cluster (a long ZWJ chain) alone is over the limit: it goes whole, once its end has
        # arrived (the next character decides whether it goes on).
        decided = self._frontier - origin
        p = s + 1
        while p < decided and is_continuation(buf, p):
            p += 1
        return p + origin if p < decided else None

    def _emit(self, cut: int, units: list[Unit]) -> None:
        buf, origin = self._buf, self._origin
        s, e = self._start - origin, cut - origin
        while e > s and buf[e - 1].isspace():
            e -= 1
        if e > s:
            units.append(Unit(normalize_space(buf[s:e]), self._start, e + origin, self._first))
            self._first = False
        self._start = cut
        marks = self._marks
        while marks and marks[0][0] <= cut:
            marks.popleft()
        self._skip_space()
        while marks and marks[0][0] <= self._start:
            marks.popleft()

    def _trim(self) -> None:
        drop = self._start - self._origin - _HISTORY
        if drop > 4 * _HISTORY:
            self._buf = self._buf[drop:]
            del self._cum[:drop]
            self._origin += drop
