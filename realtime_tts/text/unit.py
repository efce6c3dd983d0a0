"""Unit: one piece of text to synthesise, with its offsets into the raw text, and the whitespace rule.

Leaf module: imports nothing from the package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Unit:
    """text = normalize_space(raw[start:end]); raw[start] and raw[end - 1] are never whitespace.

    Offsets are code-point offsets into the raw text (for SentenceBuffer: every chunk ever fed, concatenated,
    across turns). Between consecutive units (and before the first / after the last) the raw text holds
    only whitespace, so the units of an input are exactly its non-whitespace text, in order, once.
    """

    text: str
    start: int
    end: int
    first: bool


def normalize_space(text: str) -> str:
    """The documented normalisation: edge whitespace stripped, each inner whitespace run (str.isspace:
    spaces, tabs, newlines, NBSP, ideographic space...) replaced by one ASCII space."""
    return " ".join(text.split())
