"""A revised draft (after `send-back`): stable numbers, a person's decisions stand."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bot.records import review_state
from bot.records.ledger import LedgerWrites, next_ordinal
from bot.records.reviews import get_review, load_findings
from bot.records.types import DraftFinding, Finding, Review, RevisionNote
from bot.records.vocab import FindingState
from bot.repo_config import RepoConfig
from bot.review import ledger
from bot.review.approve import publishing_key
from bot.review.identity import matched
from bot.review.pending import redraft
from bot.review.pipeline import Draft, Reviewer, ReviewRequest, without_left_out
from bot.review.status import show_status
from bot.review.target import Target
from bot.review.verify import verify_unverified
from bot.worktrees import Worktree

if TYPE_CHECKING:
    from bot.context import Context


@dataclass(frozen=True)
class Renumbered:
    assigned: list[tuple[int, DraftFinding]]  # (ordinal, finding) the draft now holds
    kept: list[int]  # old numbers that carry on (a returning withdrawn one too)
    added: list[int]  # numbers taken by new findings
    withdrawn: list[int]  # old numbers no longer in the draft
    dropped: list[int]  # dropped by a person and reported again: they stay dropped
    unverified: list[int]  # indexes (into the revision's findings) with no verdict yet


def match(old: Sequence[Finding], new: Sequence[DraftFinding]) -> dict[int, Finding]:
    """Which old finding each revised one is (by index into `new`), one to one
    (`identity.matched`; a person's drop only where it was)."""
    dropped = [f.state == FindingState.DROPPED for f in old]
    return {n: old[o] for n, o in matched(old, new, pinned=dropped.__getitem__).items()}


def _claim(f: Finding | DraftFinding) -> tuple[object, ...]:
    """What a verifier judged (the verify request shows these)."""
    return (f.path, f.line, f.end_line, f.side, f.severity, f.title, f.body)


def renumber(
    old: Sequence[Finding], new: Sequence[DraftFinding], next_free: int | None = None
) -> Renumbered:
    """The revision's findings under the draft's numbers: a match keeps its number (and its
    verdict when the claim is unchanged); a person's drop stays dropped whatever it says."""
    taken = match(old, new)
    if next_free is None:  # the PR's next number (its ledger's), else after the draft's
        next_free = max((f.ordinal for f in old), default=0) + 1
    assigned, kept, added, dropped, unverified = [], [], [], [], []
    for n, finding in enumerate(new):
        before = taken.get(n)
        if before is not None and before.state == FindingState.DROPPED:
            dropped.append(before.ordinal)
            continue
        if before is None:
            ordinal, next_free = next_free, next_free + 1
            added.append(ordinal)
        else:
            ordinal = before.ordinal
            kept.append(ordinal)
            if finding.verify_status is None and _claim(before) == _claim(finding):
                finding = replace(
                    finding, verify_status=before.verify_status, verify_note=before.verify_note
                )
        if finding.verify_status is None:
            unverified.append(n)
        assigned.append((ordinal, finding))
    matched = {f.ordinal for f in taken.values()}
    return Renumbered(
        assigned,
        kept=sorted(kept),
        added=added,
        withdrawn=[
            f.ordinal
            for f in old
            if f.state in (FindingState.KEPT, FindingState.SKIPPED) and f.ordinal not in matched
        ],
        dropped=sorted(dropped),
        unverified=unverified,
    )


async def apply_revision(
    ctx: Context,
    target: Target,
    review_id: int,
    draft: Draft,
    *,
    by: str,
    after: str,
    tree: Worktree,
) -> Renumbered | None:
    """Store the revised findings under stable numbers, then rebuild the pending review, a new
    check run and the status comment; None when the draft may not be revised any more. While
    GitHub is updated the draft is `revising` (no approve races it) and its publishing lock is
    held (no drop races it)."""
    review = await get_review(ctx.db, review_id)
    assert review is not None
    left_out = {*review.rules.noise, *review.rules.ignored}
    draft, rules = without_left_out(draft, review.rules, left_out)
    findings, verified = draft.findings, {}
    if review.verify_provider:
        findings, verified = await _verified(ctx, target, review, draft, tree)
    async with ctx.db.hold(publishing_key(review_id)):
        findings, repeats, texts = await ledger.without_repeats(ctx.db, tree, review, findings)
        change = renumber(
            await load_findings(ctx.db, review_id),
            findings,
            await next_ordinal(ctx.db, review.pull_id),
        )
        note = RevisionNote(
            by, after, *map(tuple, (change.kept, change.added, change.withdrawn, change.dropped))
        )
        fields = {
            "verdict": draft.verdict,
            "summary": draft.summary,
            "revision_note": note,
            **({"rules": rules} if rules != review.rules else {}),
            **verified,
            **({"run_id": draft.run_id} if draft.run_id else {}),
        }
        added = set(change.added)
        writes = LedgerWrites(
            review.pull_id,
            review.id,
            review.head_sha,
            new=tuple(texts.key(f).entry(n) for n, f in change.assigned if n in added),
            suppressed=tuple(sorted(repeats.items())),
        )
        if not await review_state.begin_revision(
            ctx.db, review_id, change.assigned, change.withdrawn, by=by, texts=fields, writes=writes
        ):
            return None
        try:
            await redraft(target, review_id)
        finally:
            await review_state.end_revision(ctx.db, review_id)
    await show_status(target, await get_review(ctx.db, review_id))
    return change


async def _verified(
    ctx: Context, target: Target, review: Review, draft: Draft, tree: Worktree
) -> tuple[list[DraftFinding], dict[str, object]]:
    """The revision's new or changed findings verified, and the pass's `verify_error`."""
    change = renumber(await load_findings(ctx.db, review.id), draft.findings)
    if not change.unverified:
        return draft.findings, {}
    # The verifier reads the findings and the worktree only: no repository config.
    request = ReviewRequest.of(target.pull, review, RepoConfig())
    findings, error = await verify_unverified(
        Reviewer.of(ctx),
        tree,
        request,
        draft,
        provider=review.verify_provider,
        todo=change.unverified,
    )
    return findings, {"verify_error": error}
