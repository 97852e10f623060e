"""Job handlers for the background workers, registered when the server starts."""

from __future__ import annotations

import functools
import logging
import time

from bot.context import Context
from bot.queue import REVIEWS, Job
from bot.review.approve import queue_interrupted, recover_posting_job
from bot.review.job import cleanup_pull_job, refresh_status_job, run_review_job
from bot.sessions.store import reconcile
from bot.sessions.turns import session_turn_job
from bot.storage import Database

log = logging.getLogger(__name__)

WORKTREE_TTL = 7 * 86400
# Processed deliveries and finished jobs are kept this long. GitHub redelivers only from the
# last 3 days (7 on GitHub Enterprise Server), so a repeated delivery id still acts once.
HISTORY_TTL = 30 * 86400
MAINTENANCE_EVERY = 86400
MAINTENANCE_CRON = "17 3 * * *"  # daily, for procrastinate's periodic tasks (UTC)
PRUNE_CHUNK = 500  # rows per delete: the write lock is never held long against the inbox


async def prune_history(db: Database, older_than: float) -> tuple[int, int]:
    """Delete processed deliveries and finished jobs from before `older_than`, in chunks."""
    removed = []
    for sql in (
        "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
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


async def cleanup_installation(ctx: Context, job: Job) -> None:
    for repo in job.payload["repos"]:
        await ctx.mirrors.remove_repo(repo)


async def maintenance(ctx: Context, job: Job) -> None:
    """Housekeeping at start-up and then daily: worktrees past their TTL (on this worker's
    disk), old history."""
    removed = await ctx.mirrors.prune(WORKTREE_TTL)
    deliveries, jobs = await prune_history(ctx.db, time.time() - HISTORY_TTL)
    if ctx.db.shared:  # procrastinate's finished jobs
        await ctx.jobs.prune(HISTORY_TTL // 3600)
    log.info(
        "pruned worktrees and history",
        extra={"fields": {"worktrees": removed, "deliveries": deliveries, "jobs": jobs}},
    )
    if not ctx.db.shared:  # on Postgres, procrastinate's periodic task brings it back
        await ctx.jobs.enqueue(  # waits behind this one, then for its time
            "maintenance", "maintenance", {}, queue=REVIEWS, delay=MAINTENANCE_EVERY
        )


async def setup_workers(ctx: Context) -> None:
    """Attach the job kinds this build knows how to run; queue start-up housekeeping."""
    for kind, handler in {
        "review": run_review_job,
        "refresh_status": refresh_status_job,
        "cleanup_pull": cleanup_pull_job,
        "cleanup_installation": cleanup_installation,
        "maintenance": maintenance,
        "recover_posting": recover_posting_job,
        "session_turn": session_turn_job,
    }.items():
        ctx.jobs.handlers[kind] = functools.partial(handler, ctx)
    if ctx.db.shared:
        # Several workers: the daily run is one periodic job for all of them; each worker
        # prunes its own disk (worktrees and mirrors are local to it) as it starts.
        ctx.jobs.every("maintenance", MAINTENANCE_CRON, queue=REVIEWS)
        removed = await ctx.mirrors.prune(WORKTREE_TTL)
        log.info("pruned worktrees", extra={"fields": {"worktrees": removed}})
    else:
        await ctx.jobs.enqueue("maintenance", "maintenance", {}, queue=REVIEWS, supersede=True)
    await queue_interrupted(ctx)
    ended = await reconcile(ctx.db)
    if ended:
        log.info("ended sessions of closed PRs", extra={"fields": {"count": ended}})
