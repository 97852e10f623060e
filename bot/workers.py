"""Job handlers for the background workers, registered when the server starts."""

from __future__ import annotations

import functools
import logging
import time

from bot.agents.loop import close_interrupted_runs
from bot.context import Context
from bot.queue import REVIEWS, Job
from bot.ratelimit import forget_command_uses
from bot.review import state
from bot.review.approve import queue_interrupted, recover_posting_job
from bot.review.job import (
    cleanup_pull_job,
    refresh_status_job,
    report_failure_job,
    review_gave_up,
    run_review_job,
)
from bot.review.store import prune_closed_reviews
from bot.sessions.store import prune_closed_sessions, reconcile
from bot.sessions.turns import session_turn_job
from bot.storage import Database, delete_in_chunks

log = logging.getLogger(__name__)

WORKTREE_TTL = 7 * 86400
# Processed deliveries and finished jobs are kept this long. GitHub redelivers only from the
# last 3 days (7 on GitHub Enterprise Server), so a repeated delivery id still acts once.
HISTORY_TTL = 30 * 86400
CONVERSATION_TTL = 30 * 86400  # sessions, messages, reviews of PRs closed this long ago
MAINTENANCE_EVERY = 86400
MAINTENANCE_CRON = "17 3 * * *"  # daily, for procrastinate's periodic tasks (UTC)
PRUNE_CHUNK = 500  # rows per delete: the write lock is never held long against the inbox


async def prune_history(db: Database, older_than: float) -> tuple[int, int]:
    """Delete processed deliveries and finished jobs from before `older_than`, in chunks."""
    deliveries = await delete_in_chunks(
        db,
        "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
        " WHERE status != 'queued' AND received_at < ? LIMIT ?)",
        older_than,
        PRUNE_CHUNK,
    )
    jobs = await delete_in_chunks(
        db,
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs"
        " WHERE state IN ('done', 'failed', 'cancelled')"
        " AND COALESCE(finished_at, created_at) < ? LIMIT ?)",
        older_than,
        PRUNE_CHUNK,
    )
    return deliveries, jobs


async def prune_closed_conversations(db: Database, older_than: float) -> int:
    """Forget what was said about PRs closed before `older_than`: sessions and messages
    (their store), reviews and findings (theirs). The cost ledger (`runs`, `run_usage`)
    stays."""
    sessions = await prune_closed_sessions(db, older_than, PRUNE_CHUNK)
    return sessions + await prune_closed_reviews(db, older_than, PRUNE_CHUNK)


async def closed_pull_refs(db: Database) -> dict[str, list[int]]:
    rows = await db.fetchall("SELECT repo, number FROM pulls WHERE state = 'closed'")
    found: dict[str, list[int]] = {}
    for row in rows:
        found.setdefault(row["repo"], []).append(row["number"])
    return found


async def cleanup_installation(ctx: Context, job: Job) -> None:
    for repo in job.payload["repos"]:
        await ctx.mirrors.remove_repo(repo)


async def tend_disk(ctx: Context, job: Job) -> None:
    """This worker's own disk, at start-up and then daily in every worker process (mirrors
    and worktrees are local to each): worktrees past their TTL, closed PRs' refs, mirror gc."""
    removed = await ctx.mirrors.prune(WORKTREE_TTL)
    refs = 0
    for repo, numbers in (await closed_pull_refs(ctx.db)).items():
        refs += await ctx.mirrors.drop_pull_refs(repo, numbers)
    collected = await ctx.mirrors.collect_garbage()
    found = {"worktrees": removed, "pull_refs_dropped": refs, "mirrors_collected": collected}
    log.info("disk tended", extra={"fields": found})


async def maintenance(ctx: Context, job: Job) -> None:
    """The database's housekeeping at start-up and then daily (one job whichever workers
    run): old history, conversations of long-closed PRs, old notices and command uses."""
    now = time.time()
    deliveries, jobs = await prune_history(ctx.db, now - HISTORY_TTL)
    conversations = await prune_closed_conversations(ctx.db, now - CONVERSATION_TTL)
    await ctx.db.execute("DELETE FROM notices WHERE sent_at < ?", (now - 86400,))
    await forget_command_uses(ctx.db, now - 86400)
    if ctx.db.shared:  # procrastinate's finished jobs
        await ctx.jobs.prune(HISTORY_TTL // 3600)
    log.info(
        "maintenance done",
        extra={
            "fields": {"deliveries": deliveries, "jobs": jobs, "conversation_rows": conversations}
        },
    )
    if ctx.db.shared:
        return  # on Postgres, procrastinate's periodic task brings it back
    later = await ctx.db.fetchone(  # a restart mid-run may have queued one already
        "SELECT 1 FROM jobs WHERE key = 'maintenance' AND state IN ('queued', 'waiting')"
        " AND id != ?",
        (job.id,),
    )
    if later is None:
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
        "tend_disk": tend_disk,
        "recover_posting": recover_posting_job,
        "report_failure": report_failure_job,
        "session_turn": session_turn_job,
    }.items():
        ctx.jobs.handlers[kind] = functools.partial(handler, ctx)
    ctx.jobs.on_gave_up["review"] = functools.partial(review_gave_up, ctx)
    ctx.jobs.every_here("tend_disk", MAINTENANCE_EVERY)  # each worker process, its own disk
    if ctx.db.shared:
        # Several workers: the database's daily run is one periodic job for all of them.
        ctx.jobs.every("maintenance", MAINTENANCE_CRON, queue=REVIEWS)
        # Approves left `posting`: a recovery waits for the publishing lock, which a live
        # process holds until it is done, and a dead one no longer holds.
        await queue_interrupted(ctx)
        return  # the rest a dead worker left mid-way is procrastinate's to retry
    await ctx.jobs.enqueue("maintenance", "maintenance", {}, queue=REVIEWS, supersede=True)
    # One process: whatever was mid-way when it died is this process's to finish.
    await queue_interrupted(ctx)
    await state.recover_revisions(ctx.db)
    await close_interrupted_runs(ctx.db)
    ended = await reconcile(ctx.db)
    if ended:
        log.info("ended sessions of closed PRs", extra={"fields": {"count": ended}})
