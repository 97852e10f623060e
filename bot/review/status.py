"""The PR's one status comment, and where on GitHub the draft goes (`Target`)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import gidgethub

from bot.catalog import suggested
from bot.records.pulls import pull_by_id
from bot.records.reviews import (
    latest_draft,
    latest_review,
    load_findings,
    status_comment_of,
    update_review,
    vetter_before,
)
from bot.records.runs import pass_costs, review_costs
from bot.records.sessions import has_active_cross_review
from bot.records.types import Finding, Job, Pull, Review
from bot.records.vocab import ACTIVE, FindingState, ReviewState
from bot.redaction import redact
from bot.review.checkrun import finish_check
from bot.review.target import Target
from bot.texts import PEOPLE, STATUS_MARKER, fit, refs, render, say, usd

if TYPE_CHECKING:
    from bot.context import Context


async def show_status(target: Target, review: Review) -> int:
    body = fit(redact(await render_status(target, review)))
    comment_id = review.status_comment_id or await _find_status_comment(target)
    if comment_id:
        try:
            await target.gh.patch(
                "/repos/{owner}/{repo}/issues/comments/{id}",
                {**target.owner_repo, "id": comment_id},
                data={"body": body},
            )
        except gidgethub.BadRequest as exc:
            if int(exc.status_code) != 404:
                raise
            comment_id = None  # someone deleted it: start a new one
    if not comment_id:
        comment_id = await target.comment(body)
    if review.status_comment_id != comment_id:
        await update_review(target.ctx.db, review.id, status_comment_id=comment_id)
    return int(comment_id)


async def _find_status_comment(target: Target) -> int | None:
    known = await status_comment_of(target.ctx.db, target.pull.id)
    if known:
        return known
    login = await target.ctx.github.bot_login()
    async for comment in target.gh.getiter(
        "/repos/{owner}/{repo}/issues/{number}/comments", target.owner_repo
    ):
        if (
            STATUS_MARKER in (comment.get("body") or "")
            and (comment.get("user") or {}).get("login") == login
        ):
            return int(comment["id"])
    return None


async def render_status(target: Target, review: Review) -> str:
    db = target.ctx.db
    findings = await load_findings(db, review.id)
    rules = review.rules
    costs = await review_costs(db, review.id)
    stale_sha = None
    if review.state in ACTIVE:
        previous = await latest_draft(db, target.pull.id)
        if previous is not None and previous.stale:
            stale_sha = previous.head_sha[:7]
    cost_line = " · ".join(
        f"{provider}: {runs} model run(s), {usd(cost)}" for provider, runs, cost in costs
    )
    passes = [(n, runs, usd(cost)) for n, runs, cost in await pass_costs(db, review.id)]
    if passes:
        cost_line += f" ({say(PEOPLE, 'pass_costs', passes=passes)})"
    cross_review = await has_active_cross_review(db, review.id)
    vetting = await _vetting(target, review, findings)
    return render(
        "status.md.j2",
        review=review,
        headline=say(PEOPLE, "headline", state=review.state),
        progress=review.progress or review.state,
        stale_sha=stale_sha,
        findings=[f for f in findings if not rules.folds(f)],
        links={f.ordinal: _link(target.pull, f) for f in findings},
        not_reviewed=review.not_reviewed,
        revision_note=review.revision_note,
        ledger=review.ledger,
        cost_line=cost_line,
        commands=suggested(review.state, bool(review.stale), cross_review),
        prefix=target.ctx.settings.command_prefix,
        repo_url=target.repo_url,
        rules=rules,
        minor=[f for f in findings if rules.folds(f)],
        capped=refs(sorted(rules.over_cap(rules.approvable(findings)))),
        vetting=vetting,
        vet_holds=bool(review.vetter) and review.state == ReviewState.DRAFT,
    )


async def _vetting(target: Target, review: Review, findings: list[Finding]) -> str | None:
    """What the status says of a vetter (`vet`): whose pending review holds the draft, what
    they published, or that a push made the new draft the bot's again."""
    prefix = target.ctx.settings.command_prefix
    if review.vetter and review.state == ReviewState.DRAFT:
        left_out = [
            f"F{f.ordinal}"
            for f in findings
            if f.state == FindingState.KEPT and review.rules.published(f) and not f.vetted_text
        ]
        return say(PEOPLE, "vet.holds", vetter=review.vetter, left_out=left_out, prefix=prefix)
    if review.vetter and review.state == ReviewState.POSTED and review.posted_by == review.vetter:
        published = [f for f in findings if f.published_text is not None]
        return say(
            PEOPLE,
            "vet.published",
            vetter=review.vetter,
            kept=[f"F{f.ordinal}" for f in published],
            edited=[f"F{f.ordinal}" for f in published if f.edited],
            removed=[f"F{f.ordinal}" for f in findings if f.dropped_by_person and f.vetted_text],
        )
    if review.state == ReviewState.DRAFT:
        earlier = await vetter_before(target.ctx.db, target.pull.id, review.id)
        if earlier is not None:
            sha = earlier.head_sha[:7]
            return say(PEOPLE, "vet.bots_again", vetter=earlier.vetter, sha=sha, prefix=prefix)
    return None


def _link(pull: Pull, finding: Finding) -> str | None:
    """The finding's line in the PR's "Files changed" tab."""
    if not (pull.html_url and finding.line):
        return None
    anchor = hashlib.sha256(finding.path.encode()).hexdigest()
    side = "L" if finding.side == "LEFT" else "R"
    return f"{pull.html_url}/files#diff-{anchor}{side}{finding.line}"


async def refresh_status_job(ctx: Context, job: Job) -> None:
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    review = await latest_review(ctx.db, job.payload["pull_id"]) if pull else None
    if pull is None or review is None:
        return
    target = Target.of(ctx, pull)
    await show_status(target, review)
    if review.stale and review.state == ReviewState.DRAFT:
        await finish_check(target, review, with_annotations=False)
