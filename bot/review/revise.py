"""A revised draft (after `send-back`): finding numbers stay stable across revisions, and the
draft's pending review, check run and status comment follow the new findings."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.review import state
from bot.review.approve import publishing_key
from bot.review.pipeline import Draft
from bot.review.publish import Publisher
from bot.review.store import get_review, load_findings

if TYPE_CHECKING:
    from bot.context import Context

NEAR_LINES = 5
_WORD = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True)
class Renumbered:
    assigned: list[tuple[int, dict[str, Any]]]  # (ordinal, finding) for every new finding
    kept: list[int]  # old numbers that carry on
    added: list[int]  # numbers taken by new findings
    withdrawn: list[int]  # old numbers no longer in the draft


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.casefold()))


def _same(old: Mapping[str, Any], new: Mapping[str, Any], *, strict: bool) -> bool:
    if old["path"] != new["path"]:
        return False
    if strict:
        return (
            " ".join(old["title"].split()).casefold() == " ".join(new["title"].split()).casefold()
        )
    a, b = old.get("line"), new.get("line")
    if a is not None and b is not None and abs(a - b) > NEAR_LINES:
        return False
    words_a, words_b = _words(old["title"]), _words(new["title"])
    union = words_a | words_b
    return bool(union) and len(words_a & words_b) / len(union) >= 0.5


def renumber(old: Sequence[Mapping[str, Any]], new: Sequence[dict[str, Any]]) -> Renumbered:
    """Match the revised findings to the draft's (same path and title, else same path, a
    nearby line and mostly the same title words; one to one, in order): a match keeps its
    `F` number, a new finding takes the next free number, an unmatched old one is withdrawn
    (one already withdrawn stays so, and takes its number back if it returns)."""
    taken: dict[int, int] = {}  # new index -> old ordinal
    used: set[int] = set()
    for strict in (True, False):
        for n, finding in enumerate(new):
            if n in taken:
                continue
            for candidate in old:
                if candidate["ordinal"] not in used and _same(candidate, finding, strict=strict):
                    taken[n] = candidate["ordinal"]
                    used.add(candidate["ordinal"])
                    break
    next_free = max((f["ordinal"] for f in old), default=0) + 1
    assigned, added = [], []
    for n, finding in enumerate(new):
        if n not in taken:
            taken[n] = next_free
            added.append(next_free)
            next_free += 1
        assigned.append((taken[n], finding))
    in_draft = [f["ordinal"] for f in old if f["state"] in (state.KEPT, state.SKIPPED)]
    return Renumbered(
        assigned,
        kept=sorted(used),  # carried on (a returning withdrawn one too, under its number)
        added=added,
        withdrawn=sorted(o for o in in_draft if o not in used),  # a person's drop stays a drop
    )


async def apply_revision(
    ctx: Context, publisher: Publisher, review_id: int, draft: Draft, *, by: str, after: str
) -> Renumbered | None:
    """Store the revised findings under stable numbers, then rebuild the pending review, give
    the revision its own check run (annotations cannot be withdrawn from the old one) and
    refresh the status comment. `by` revised it after `after`'s critique. None when the draft
    may not be revised any more (published, stale, or a newer review exists): nothing changes.
    While GitHub is being updated the draft is `revising`, so an approve cannot race it."""
    change = renumber(await load_findings(ctx.db, review_id), draft.findings)
    note = {
        "by": by,
        "after": after,
        "kept": change.kept,
        "added": change.added,
        "withdrawn": change.withdrawn,
    }
    texts = {
        "verdict": draft.verdict,
        "summary": draft.summary,
        "revision_note": json.dumps(note),
        "check_run_id": None,
        **({"run_id": draft.run_id} if draft.run_id else {}),
    }
    async with ctx.db.hold(publishing_key(review_id)):
        if not await state.begin_revision(
            ctx.db, review_id, change.assigned, change.withdrawn, by=by, texts=texts
        ):
            return None
        try:
            await publisher.pending_review(await get_review(ctx.db, review_id))
            await publisher.start_check(await get_review(ctx.db, review_id))
            await publisher.finish_check(await get_review(ctx.db, review_id))
        finally:
            await state.end_revision(ctx.db, review_id)
    await publisher.status(await get_review(ctx.db, review_id))
    return change

