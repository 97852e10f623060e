"""Publishing a draft exactly once: claim (`draft → posting`), submit, and recovery after a
crash or a GitHub error between the claim and GitHub's answer."""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

import gidgethub

from bot.queue import REVIEWS, Job
from bot.review import state
from bot.review.publish import Publisher
from bot.review.store import get_review, load_findings, pull_by_id

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)


class PublishFailed(Exception):
    """Publishing did not complete; the message says what happens next (shown on the PR)."""


def select_findings(findings: list[sqlite3.Row], listed: tuple[int, ...]) -> list[int]:
    """What `approve` publishes: the listed findings, or every kept one that verification
    did not refute (a refuted finding is published only when listed explicitly)."""
    if listed:
        return sorted(listed)
    return [
        f["ordinal"]
        for f in findings
        if f["state"] == state.KEPT and f["verify_status"] != "refuted"
    ]


async def approve(
    ctx: Context, publisher: Publisher, review_id: int, actor: str, event: str, chosen: list[int]
) -> bool:
    """Publish the chosen findings as `event`; False when another approve got there first."""
    if not await state.claim_posting(ctx.db, review_id, actor, event, chosen):
        return False
    try:
        await publish(ctx, publisher, review_id, chosen)
    except gidgethub.GitHubException as exc:
        review = await get_review(ctx.db, review_id)
        if await _pending_exists(publisher, review["pending_review_id"]):
            await state.release(ctx.db, review_id)  # nothing went out
            raise PublishFailed(
                f"GitHub refused to publish ({exc}); the draft is unchanged"
            ) from exc
        await queue_recovery(ctx, review_id)
        raise PublishFailed(
            f"GitHub answered with an error ({exc}) while publishing; PR Cockpit is checking "
            "what was published and will finish it"
        ) from exc
    except Exception:
        await queue_recovery(ctx, review_id)
        raise
    return True


async def publish(ctx: Context, publisher: Publisher, review_id: int, chosen: list[int]) -> None:
    """Rebuild the pending review with exactly the chosen findings, submit it, then refresh
    the check run and status comment (their failures are logged, never reverted)."""
    review = await get_review(ctx.db, review_id)
    pending_id = await publisher.pending_review(review, only=set(chosen))
    await publisher.gh.post(
        "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}/events",
        {**publisher.owner_repo, "id": pending_id},
        data={"event": review["posted_event"]},
    )
    await state.mark_posted(ctx.db, review_id)
    review = await get_review(ctx.db, review_id)
    try:
        await publisher.finish_check(review, with_annotations=False)
        await publisher.status(review)
    except gidgethub.GitHubException:
        log.warning("published, but refreshing the check run or status failed", exc_info=True)


async def _pending_review(publisher: Publisher, review_id: int | None) -> dict | None:
    if not review_id:
        return None
    try:
        return await publisher.gh.getitem(
            "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
            {**publisher.owner_repo, "id": review_id},
        )
    except gidgethub.BadRequest as exc:
        if int(exc.status_code) == 404:
            return None
        raise


async def _pending_exists(publisher: Publisher, review_id: int | None) -> bool:
    found = await _pending_review(publisher, review_id)
    return found is not None and found.get("state") == "PENDING"


async def queue_recovery(ctx: Context, review_id: int) -> None:
    await ctx.jobs.enqueue(
        "recover_posting",
        f"posting:{review_id}",
        {"review_id": review_id},
        queue=REVIEWS,
        supersede=True,
    )


async def queue_interrupted(ctx: Context) -> None:
    """At start-up: every review left `posting` is checked and finished."""
    for row in await ctx.db.fetchall("SELECT id FROM reviews WHERE state = 'posting'"):
        await queue_recovery(ctx, row["id"])


async def recover_posting(ctx: Context, review_id: int) -> str:
    """After a crash between the approve claim and GitHub's answer: look before retrying."""
    review = await get_review(ctx.db, review_id)
    if review is None or review["state"] != state.POSTING:
        return "nothing to do"
    pull = await pull_by_id(ctx.db, review["pull_id"])
    publisher = Publisher(ctx, ctx.github.installation_api(pull["installation_id"]), pull)
    found = await _pending_review(publisher, review["pending_review_id"])
    if found is not None and found.get("state") not in ("PENDING", None):
        await state.mark_posted(ctx.db, review_id)
        await publisher.status(await get_review(ctx.db, review_id))
        return "already published"
    findings = await load_findings(ctx.db, review_id)
    await publish(
        ctx, publisher, review_id, [f["ordinal"] for f in findings if f["state"] == "kept"]
    )
    return "published"


async def recover_posting_job(ctx: Context, job: Job) -> None:
    outcome = await recover_posting(ctx, job.payload["review_id"])
    log.info("recovered an interrupted approve", extra={"fields": {"outcome": outcome}})
