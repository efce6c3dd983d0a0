"""count_sentences: how many sentences a text has, for the "sentences" field of the simple-mode terminal frame
(LunaVox counts the input's sentences, not the units they were merged into). A sentence ends at a sentence mark
of the shared punctuation table (terminators, with its abbreviation and number rules) or a blank line; a
trailing piece without a terminator counts when it has something to say. Pure Python: imports only
text.punctuation.
"""

from __future__ import annotations

from realtime_tts.text.punctuation import SENTENCE, Mark, scan_marks


def count_sentences(text: str) -> int:
    marks: list[Mark] = []
    scan_marks(text, 0, True, marks)
    count, start = 0, 0
    for cut, level in marks:
        if level >= SENTENCE:
            count += _says_something(text[start:cut])
            start = cut
    return count + _says_something(text[start:])


def _says_something(piece: str) -> bool:
    return any(ch.isalnum() for ch in piece)
