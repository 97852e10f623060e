"""What tells two findings apart: one vocabulary of content words and one likeness of two."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

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


# One set of thresholds for "is this the same finding", on the `likeness` of two claims' words
# on one file. A claim at the same place (the same code, or NEAR_LINES lines or fewer away) needs
# only some of the same words: a rewording. One whose code moved on (edited or gone) needs mostly
# the same words. The same words at other code that still stands are another occurrence.
NEAR_LINES = 5
AT_PLACE = 0.4  # Dice; the ledger's old Jaccard 0.25 (same code) and the reviser's 0.3
MOVED_ON = 0.75  # Dice; the ledger's old Jaccard 0.6


def same(
    old: frozenset[str], new: frozenset[str], *, placed: bool, moved: bool = False
) -> float | None:
    """How alike two claims on one file are when they are one finding; None when they are not."""
    alike = likeness(old, new)
    if (placed and alike >= AT_PLACE) or (moved and alike >= MOVED_ON):
        return alike
    return None


def pair(
    olds: int,
    news: int,
    passes: Iterable[Callable[[int, int], float | None]],
    *,
    shared: Collection[int] = (),
) -> dict[int, int]:
    """Which old claim each new one is (index → index), one to one but for the `shared` ones (a
    dropped finding absorbs every repeat). Pass by pass, cheapest first: exact pairs come
    first so a look-alike never takes one."""
    taken: dict[int, int] = {}
    used: set[int] = set()
    for cost in passes:
        ranked = sorted(
            (price, n, o)
            for n in range(news)
            if n not in taken
            for o in range(olds)
            if o not in used and (price := cost(o, n)) is not None
        )
        for _price, n, o in ranked:
            if n not in taken and o not in used:
                taken[n] = o
                if o not in shared:
                    used.add(o)
    return taken


class Claim(Protocol):
    """What tells findings of one head apart: a stored `Finding` or a drafted one."""

    path: str
    line: int | None
    title: str
    body: str


def matched(
    old: Sequence[Claim], new: Sequence[Claim], *, pinned: Callable[[int], bool] = lambda o: False
) -> dict[int, int]:
    """Which old claim each new one of the same head is (index → index), one to one: the same
    title on its file, nearest first (a `pinned` old one only where it was: a person's drop),
    then a rewording at the same place (`same`, by its title or by its title and body). The
    reviser pairs a revision with the draft by it, and a review in groups or passes merges
    its parts' findings by it."""
    titles = [words(f.title) for f in old], [words(f.title) for f in new]
    texts = [words(f"{f.title} {f.body}") for f in old], [words(f"{f.title} {f.body}") for f in new]

    def apart(o: int, n: int) -> int | None:
        if old[o].path != new[n].path:
            return None
        if old[o].line is None or new[n].line is None:
            return NEAR_LINES
        return abs(old[o].line - new[n].line)

    def exact(o: int, n: int) -> float | None:
        lines = apart(o, n)
        if lines is None or titles[0][o] != titles[1][n]:
            return None
        if pinned(o) and lines > NEAR_LINES:
            return None
        return lines

    def reworded(o: int, n: int) -> float | None:
        lines = apart(o, n)
        if lines is None:
            return None
        # the title alone, or title and body: a claim restated keeps one of the two
        placed = lines <= NEAR_LINES
        alike = [same(claims[0][o], claims[1][n], placed=placed) for claims in (titles, texts)]
        best = max((a for a in alike if a is not None), default=None)
        return None if best is None else lines - best

    return pair(len(old), len(new), (exact, reworded))
