"""count_sentences: the "sentences" of simple mode's terminal frame (the input's sentences, docs/protocol.md)."""

from __future__ import annotations

import pytest

from realtime_tts.text.sentences import count_sentences


@pytest.mark.parametrize(("text", "n"), [
    ("Hello there. How are you? I am fine", 3),  # a trailing piece without a terminator counts
    ("Mr. Smith went to Washington. He paid $3.50 for it.", 2),  # abbreviation and decimal point: no cut
    ("Hi there. !!!  Bye now.", 2),  # punctuation alone says nothing
    ("你好。我很好。", 2),
    ("One\n\nTwo", 2),  # a blank line ends a sentence
    ("Wait... what?!", 1),  # the table reads an ellipsis as a pause, not a sentence end
    ("", 0),
    ("…", 0),
])
def test_count_sentences(text: str, n: int) -> None:
    assert count_sentences(text) == n
