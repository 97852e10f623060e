"""A vetter's submitted review read back against the draft, by `F` number (pure).

Each finding `vet` put in the vetter's pending review begins with its number
(`**F1 · major** · title`, inline, or as an item of the review's body). What the person
submitted decides: a finding whose comment is still there was **published by that person**
(with its final text, and whether they edited it), one whose comment they deleted was
**dropped by that person**. Comments without a number of ours are the person's own: left alone.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

# A comment that is one of ours starts with its number and severity, as vet wrote it.
_NUMBERED = re.compile(r"^\s*\*\*F(?P<n>\d+) · ")


def number_of(comment: str) -> int | None:
    """The `F` number a comment begins with, or None (a person's own comment)."""
    match = _NUMBERED.match(comment or "")
    return int(match["n"]) if match else None


def _words(text: str) -> str:
    """Text as compared: GitHub may change line endings and trailing spaces."""
    return " ".join((text or "").split())


def in_body(ordinal: int, body: str) -> bool:
    return f"**F{ordinal} · " in (body or "")


@dataclass(frozen=True)
class Reconciled:
    published: dict[int, tuple[str, bool]]  # ordinal → (its text as published, edited)
    removed: tuple[int, ...]  # put in the review, deleted by the person
    own: int  # the person's own comments (no number of ours)


def reconcile(
    placed: dict[int, str], comments: list[str], body: str, inline: Collection[int] = ()
) -> Reconciled:
    """`placed`: ordinal → the text vet put in the review (an inline comment, or the item of
    the review's body for a finding outside the diff); `comments`: the submitted review's
    inline comments; `body`: its body; `inline`: the ordinals vet put in inline comments,
    never looked for in the body (which holds the model's summary: naming `**F2 · …` there
    does not keep a comment the person deleted). A finding's comment counts first; without
    one, its number at the start of an item of the body."""
    by_number: dict[int, str] = {}
    own = 0
    for comment in comments:
        n = number_of(comment)
        if n is None or n not in placed or n in by_number:
            own += 1
            continue
        by_number[n] = comment
    published: dict[int, tuple[str, bool]] = {}
    removed = []
    for n, text in sorted(placed.items()):
        if n in by_number:
            final = by_number[n]
            published[n] = (final, _words(final) != _words(text))
        elif n not in inline and in_body(
            n, body
        ):  # an item of the review's body (outside the diff, folded)
            kept = _words(text) in _words(body)
            published[n] = (text if kept else body, not kept)
        else:
            removed.append(n)
    return Reconciled(published, tuple(removed), own)
