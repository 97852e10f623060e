"""The draft as the bot's pending review: inline comments where GitHub takes them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.records.reviews import get_review, load_findings, update_review
from bot.records.types import Finding, Review
from bot.records.vocab import FindingState
from bot.review.checkrun import finish_check, start_check
from bot.texts import PEOPLE, fit, render, say

if TYPE_CHECKING:
    from bot.review.target import Target

log = logging.getLogger(__name__)


async def redraft(target: Target, review_id: int) -> None:
    """The draft as it now stands on GitHub: its pending review (unless a vetter's pending
    review holds it: what is in theirs is theirs to change), and a new check run (the old
    one's annotations cannot be withdrawn)."""
    review = await get_review(target.ctx.db, review_id)
    if review is not None and not review.vetter:  # a vetter's pending review holds it: theirs
        await pending_review(target, review)
    review = await update_review(target.ctx.db, review_id, check_run_id=None)
    if review is not None:
        await finish_check(target, await start_check(target, review))


async def pending_review(target: Target, review: Review, *, only: set[int] | None = None) -> int:
    """Create the pending review (`only`: those ordinals, a partial approve; else what a plain
    approve publishes). When GitHub refuses the inline comments (422) they move to the body:
    the draft is never lost."""
    stored = await load_findings(target.ctx.db, review.id)
    if only is not None:
        findings = [f for f in stored if f.state == FindingState.KEPT and f.ordinal in only]
    else:
        findings = review.rules.approvable(stored)
    await drop_own_pending(target)  # GitHub allows one pending review per user and PR
    url = "/repos/{owner}/{repo}/pulls/{number}/reviews"
    try:
        created = await target.gh.post(
            url,
            target.owner_repo,
            data=_review_payload(target, review, findings, inline=True),
        )
    except gidgethub.BadRequest as exc:
        if int(exc.status_code) != 422:
            raise
        log.warning("GitHub refused inline comments; moving them to the review body")
        created = await target.gh.post(
            url, target.owner_repo, data=_review_payload(target, review, findings, inline=False)
        )
    await update_review(target.ctx.db, review.id, pending_review_id=created["id"])
    return int(created["id"])


def _review_payload(
    target: Target,
    review: Review,
    findings: list[Finding],
    *,
    inline: bool,
) -> dict[str, Any]:
    comments, other, summarised = [], [], []
    capped = review.rules.over_cap(findings) if inline else set()
    for f in findings:
        listed = {
            "ordinal": f.ordinal,
            "severity": f.severity,
            "where": f.path + (f":{f.line}" if f.line else ""),
            "title": f.title,
        }
        if f.ordinal in capped:
            summarised.append(listed)
        elif inline and f.in_diff:
            comments.append(inline_comment(target, f))
        else:
            reason = say(PEOPLE, "not_inline", in_diff=f.in_diff)
            other.append({**listed, "body": f.body, "evidence": f.evidence, "reason": reason})
    body = fit(
        render(
            "review_body.md.j2",
            review=review,
            other=other,
            summarised=summarised,
            max_findings=review.rules.max_findings if inline else None,
            repo_url=target.repo_url,
        )
    )
    return {"commit_id": review.head_sha, "body": body, "comments": comments}


def inline_comment(target: Target, f: Finding) -> dict[str, Any]:
    comment: dict[str, Any] = {
        "path": f.path,
        "line": f.end_line or f.line,
        "side": f.side,
        "body": fit(
            render(
                "inline_comment.md.j2",
                f=f,
                suggestion=f.suggestion if f.side == "RIGHT" else None,
                repo_url=target.repo_url,
            )
        ),
    }
    if f.end_line:
        comment.update(start_line=f.line, start_side=f.side)
    return comment


async def drop_own_pending(target: Target) -> None:
    """Delete the bot's pending review of the PR (a pending review is seen only by its
    author, so the one listed is the bot's own)."""
    async for existing in target.gh.getiter(
        "/repos/{owner}/{repo}/pulls/{number}/reviews", target.owner_repo
    ):
        if existing.get("state") == "PENDING":
            await target.gh.delete(
                "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
                {**target.owner_repo, "id": existing["id"]},
            )
