"""Publishing a draft exactly once: claim, submit, and recovery after a crash."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import gidgethub

from bot.github import github_transient
from bot.queue import REVIEWS
from bot.records import review_state
from bot.records.pulls import pull_by_id
from bot.records.reviews import get_review, load_findings, mid_publish, update_review
from bot.records.types import Job
from bot.records.vocab import FindingState, ReviewState
from bot.review.checkrun import finish_check
from bot.review.pending import pending_review
from bot.review.status import show_status
from bot.review.target import Target
from bot.texts import PEOPLE, say

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

POSTING_ATTEMPTS = 100_000  # with backoff capped at 5 minutes: most of a year


class PublishFailed(Exception):
    """Publishing did not complete; the message says what happens next (shown on the PR)."""


async def approve(
    ctx: Context, target: Target, review_id: int, actor: str, event: str, chosen: list[int]
) -> bool:
    """Publish the chosen findings as `event`; False when another approve got there first.
    The claim is made holding the publishing lock, so no recovery can start in between."""
    try:
        async with ctx.db.hold(publishing_key(review_id)):
            if not await review_state.claim_posting(ctx.db, review_id, actor, event, chosen):
                return False
            await publish(ctx, target, review_id, chosen)
    except Exception as exc:
        if not github_transient(exc) and not isinstance(exc, gidgethub.GitHubException):
            await queue_recovery(ctx, review_id)
            raise
        review = await get_review(ctx.db, review_id)
        try:
            pending = await _pending_review(target, review.pending_review_id)
        except Exception as check:
            if not github_transient(check):
                raise
            pending = None  # GitHub cannot tell us now: the recovery job will
        if pending is not None and pending.get("state") == "PENDING":  # nothing went out
            await review_state.release(ctx.db, review_id)
            raise PublishFailed(say(PEOPLE, "publish_refused", reason=_describe(exc))) from exc
        await waiting_for_github(ctx, target, review_id, exc)
        await queue_recovery(ctx, review_id)
        raise PublishFailed(say(PEOPLE, "publish_waiting", reason=_describe(exc))) from exc
    return True


def _describe(exc: BaseException) -> str:
    if isinstance(exc, gidgethub.HTTPException):
        return say(PEOPLE, "github_status", status=int(exc.status_code))
    return say(PEOPLE, "github_unreachable", error_class=exc.__class__.__name__)


async def waiting_for_github(
    ctx: Context, target: Target, review_id: int, exc: BaseException
) -> None:
    """Say on the review (and, if GitHub lets us, the status comment) that publishing waits."""
    review = await update_review(
        ctx.db, review_id, progress=say(PEOPLE, "progress_waiting", reason=_describe(exc))
    )
    try:
        await show_status(target, review)
    except Exception as failed:
        if not github_transient(failed) and not isinstance(failed, gidgethub.GitHubException):
            raise
        log.info("status comment not updated while GitHub is unavailable")


async def publish(ctx: Context, target: Target, review_id: int, chosen: list[int]) -> None:
    """Rebuild the pending review with exactly the chosen findings and submit it. Called holding
    the publishing lock; a review no longer `posting` was published meanwhile."""
    review = await get_review(ctx.db, review_id)
    if review is None or review.state != ReviewState.POSTING:
        return
    pending_id = await pending_review(target, review, only=set(chosen))
    await target.gh.post(
        "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}/events",
        {**target.owner_repo, "id": pending_id},
        data={"event": review.posted_event},
    )
    await review_state.mark_posted(ctx.db, review_id)
    review = await get_review(ctx.db, review_id)
    try:
        await finish_check(target, review, with_annotations=False)
        await show_status(target, review)
    except gidgethub.GitHubException:
        log.warning("published, but refreshing the check run or status failed", exc_info=True)


async def _pending_review(target: Target, review_id: int | None) -> dict | None:
    if not review_id:
        return None
    try:
        return await target.gh.getitem(
            "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
            {**target.owner_repo, "id": review_id},
        )
    except gidgethub.BadRequest as exc:
        if int(exc.status_code) == 404:
            return None
        raise


async def queue_recovery(ctx: Context, review_id: int) -> None:
    """Finish a publish in a job that retries with backoff (capped at 5 minutes) for as long
    as GitHub does not answer."""
    await ctx.jobs.enqueue(
        "recover_posting",
        f"posting:{review_id}",
        {"review_id": review_id},
        queue=REVIEWS,
        supersede=True,
        max_attempts=POSTING_ATTEMPTS,
    )


async def queue_interrupted(ctx: Context) -> None:
    """At start-up: every review left `posting` is checked and finished (one left `revising`
    is given back as a draft); each waits for whoever may still be publishing it."""
    for review_id in await mid_publish(ctx.db):
        await queue_recovery(ctx, review_id)


def publishing_key(review_id: int) -> str:
    """Whoever publishes a review holds this: an approve, or the recovery of one (so with
    several processes a recovery never races an approve that is still under way)."""
    return f"publishing:{review_id}"


async def recover_posting(ctx: Context, review_id: int) -> str:
    """After a crash between the approve claim and GitHub's answer: look before retrying."""
    async with ctx.db.hold(publishing_key(review_id)):
        review = await get_review(ctx.db, review_id)
        if review is not None and review.state == ReviewState.REVISING:
            await review_state.end_revision(ctx.db, review_id)  # its reviser died mid-way
            return "revision given back"
        if review is None or review.state != ReviewState.POSTING:
            return "nothing to do"
        pull = await pull_by_id(ctx.db, review.pull_id)
        target = Target.of(ctx, pull)
        found = await _pending_review(target, review.pending_review_id)
        if found is not None and found.get("state") not in ("PENDING", None):
            await review_state.mark_posted(ctx.db, review_id)
            await show_status(target, await get_review(ctx.db, review_id))
            return "already published"
        findings = await load_findings(ctx.db, review_id)
        kept = [f.ordinal for f in findings if f.state == FindingState.KEPT]
        await publish(ctx, target, review_id, kept)
        return "published"


async def recover_posting_job(ctx: Context, job: Job) -> None:
    review_id = job.payload["review_id"]
    try:
        outcome = await recover_posting(ctx, review_id)
    except Exception as exc:
        review = await get_review(ctx.db, review_id)
        pull = await pull_by_id(ctx.db, review.pull_id) if review else None
        if pull is None:
            raise
        target = Target.of(ctx, pull)
        if github_transient(exc):  # retried by the queue, with backoff
            await waiting_for_github(ctx, target, review_id, exc)
            raise
        if not isinstance(exc, gidgethub.HTTPException):
            raise
        # GitHub answered no (the PR is locked, the review was removed …): nothing went out.
        await review_state.release(ctx.db, review_id)
        released = await update_review(
            ctx.db,
            review_id,
            progress=say(PEOPLE, "progress_publish_failed", reason=_describe(exc)),
        )
        await show_status(target, released)
        log.warning("GitHub refused an interrupted approve", extra={"fields": {"error": str(exc)}})
        return
    log.info("recovered an interrupted approve", extra={"fields": {"outcome": outcome}})
