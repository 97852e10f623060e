"""Job handlers for the background workers, registered when the server starts."""

from __future__ import annotations

import functools
import logging
import time

from bot.chatops import recover_posting
from bot.context import Context
from bot.pulls import pull_by_id
from bot.queue import Job
from bot.review.engine import run_review_job, worktree_name
from bot.review.publish import Publisher
from bot.reviews import REVIEWS_QUEUE, latest_review
from bot.storage import Database

log = logging.getLogger(__name__)

WORKTREE_TTL = 7 * 86400
# Processed deliveries and finished jobs are kept this long. GitHub redelivers only from the
# last 3 days (7 on GitHub Enterprise Server), so a repeated delivery id still acts once.
HISTORY_TTL = 30 * 86400
MAINTENANCE_EVERY = 86400
PRUNE_CHUNK = 500  # rows per delete: the write lock is never held long against the inbox


async def prune_history(db: Database, older_than: float) -> tuple[int, int]:
    """Delete processed deliveries and finished jobs from before `older_than`, in chunks."""
    removed = []
    for sql in (
        "DELETE FROM deliveries WHERE rowid IN (SELECT rowid FROM deliveries"
        " WHERE status != 'queued' AND received_at < ? LIMIT ?)",
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs"
        " WHERE state IN ('done', 'failed', 'cancelled')"
        " AND COALESCE(finished_at, created_at) < ? LIMIT ?)",
    ):
        total = 0
        while count := await db.execute(sql, (older_than, PRUNE_CHUNK)):
            total += count
        removed.append(total)
    return removed[0], removed[1]


async def refresh_status(ctx: Context, job: Job) -> None:
    """Re-render the PR's status comment (and the check run of a stale draft)."""
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    review = await latest_review(ctx.db, job.payload["pull_id"]) if pull else None
    if review is None:
        return
    publisher = Publisher(ctx, ctx.github.installation_api(pull["installation_id"]), pull)
    await publisher.status(review)
    if review["stale"] and review["state"] == "draft":
        await publisher.finish_check(review, with_annotations=False)


async def cleanup_pull(ctx: Context, job: Job) -> None:
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    if pull is None:
        return
    rows = await ctx.db.fetchall("SELECT id FROM reviews WHERE pull_id = ?", (pull["id"],))
    for row in rows:
        path = ctx.mirrors.tree_path(worktree_name(pull, row["id"]))
        await ctx.mirrors.remove_worktree(pull["repo"], path)


async def cleanup_installation(ctx: Context, job: Job) -> None:
    for repo in job.payload["repos"]:
        await ctx.mirrors.remove_repo(repo)


async def recover_posting_job(ctx: Context, job: Job) -> None:
    outcome = await recover_posting(ctx, job.payload["review_id"])
    log.info("recovered an interrupted approve", extra={"fields": {"outcome": outcome}})


async def maintenance(ctx: Context, job: Job) -> None:
    """Housekeeping at start-up and then daily: worktrees past their TTL, old history."""
    removed = await ctx.mirrors.prune(WORKTREE_TTL)
    deliveries, jobs = await prune_history(ctx.db, time.time() - HISTORY_TTL)
    log.info(
        "pruned worktrees and history",
        extra={"fields": {"worktrees": removed, "deliveries": deliveries, "jobs": jobs}},
    )
    await ctx.jobs.enqueue(  # waits behind this one, then for its time
        "maintenance", "maintenance", {}, queue=REVIEWS_QUEUE, delay=MAINTENANCE_EVERY
    )


async def setup_workers(ctx: Context) -> None:
    """Attach the job kinds this build knows how to run; queue start-up housekeeping."""
    for kind, handler in {
        "review": run_review_job,
        "refresh_status": refresh_status,
        "cleanup_pull": cleanup_pull,
        "cleanup_installation": cleanup_installation,
        "maintenance": maintenance,
        "recover_posting": recover_posting_job,
    }.items():
        ctx.jobs.handlers[kind] = functools.partial(handler, ctx)
    await ctx.jobs.enqueue("maintenance", "maintenance", {}, queue=REVIEWS_QUEUE, supersede=True)
    for row in await ctx.db.fetchall("SELECT id FROM reviews WHERE state = 'posting'"):
        await ctx.jobs.enqueue(
            "recover_posting",
            f"posting:{row['id']}",
            {"review_id": row["id"]},
            queue=REVIEWS_QUEUE,
            supersede=True,
        )
