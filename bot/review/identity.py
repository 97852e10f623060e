"""What tells two findings apart: one vocabulary of content words and one likeness of two."""

from __future__ import annotations

import re

# Words that do not tell two findings apart (the eval judge's list; it holds the ledger's).
_STOP = """a an and are as at be been but by can could do does for from has have how if in into
is it its may might more must no not of on once only or other should so some such than that the
their them then there these they this those to too under up use used uses using was were what
when where which while will with would you your"""
STOP_WORDS = frozenset(_STOP.split())
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def words(text: str) -> frozenset[str]:
    """Content words: identifiers split (camelCase, snake_case), casefolded, one-letter and
    stop words out, a plural or -ed/-ing ending cut off a long enough word."""
    split = _CAMEL.sub(r"\1 \2", text).casefold()
    return frozenset(_stem(w) for w in _WORD.findall(split) if len(w) > 1 and w not in STOP_WORDS)


def likeness(a: frozenset[str], b: frozenset[str]) -> float:
    """Dice coefficient of two word sets: 1 when equal, 0 when disjoint or either is empty."""
    if not a or not b:
        return 0.0
    return 2 * len(a & b) / (len(a) + len(b))
