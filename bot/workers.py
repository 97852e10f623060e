"""Job handlers for the background workers, registered when the server starts."""

from __future__ import annotations

import functools
import logging
import time
import zlib

import orjson
from gidgethub import routing, sansio

from bot.context import Context
from bot.logs import log_context
from bot.queue import REVIEWS, JobQueue
from bot.records import deliveries as delivery_rows
from bot.records import review_state
from bot.records.database import Database
from bot.records.notices import forget_before
from bot.records.pulls import closed_pull_refs
from bot.records.reviews import prune_closed_reviews
from bot.records.runs import close_interrupted_runs, prune_runs
from bot.records.sessions import prune_closed_sessions, settle_sessions_at_start
from bot.records.stats import mark_uncounted, recount_stale
from bot.records.types import Job, StoredDelivery
from bot.records.vocab import DeliveryStatus
from bot.review.approve import queue_interrupted, recover_posting_job
from bot.review.checkout import cleanup_pull_job
from bot.review.job import report_failure_job, review_gave_up, run_review_job
from bot.review.status import refresh_status_job
from bot.review.vet import vet_job
from bot.sessions.turns import session_turn_job

log = logging.getLogger(__name__)

WORKTREE_TTL = 7 * 86400
# Processed deliveries and finished jobs are kept this long. GitHub redelivers only from the
# last 3 days (7 on GitHub Enterprise Server), so a repeated delivery id still acts once.
HISTORY_TTL = 30 * 86400
CONVERSATION_TTL = 30 * 86400  # sessions, messages, reviews of PRs closed this long ago
# Runs (and their per-model usage) older than this go once nothing shows them any more (their
# review and session pruned): the daily budget reads today's, `cockpit stats` and /metrics
# the review figures that outlive them. A quarter stays to audit spend by installation.
RUN_TTL = 90 * 86400
MAINTENANCE_EVERY = 86400
MAINTENANCE_CRON = "17 3 * * *"  # daily, for procrastinate's periodic tasks (UTC)
PRUNE_CHUNK = 500  # rows per delete: the write lock is never held long against the inbox


def ignore_reason(event: sansio.Event, bot_login: str | None) -> str | None:
    """Why an event must not start work (bots, including this app, never trigger anything)."""
    sender = event.data.get("sender")
    if not isinstance(sender, dict):
        return None
    login = sender.get("login")
    if sender.get("type") == "Bot" or (isinstance(login, str) and login.endswith("[bot]")):
        return "sender is a bot"
    if bot_login and login == bot_login:
        return "sender is this app"
    return None


def _pr_number(data: dict) -> int | None:
    for holder in ("pull_request", "issue"):
        number = (data.get(holder) or {}).get("number")
        if isinstance(number, int):
            return number
    return None


async def process_delivery(ctx: Context, router: routing.Router, job: Job) -> None:
    """Once; the body is parsed here, and only here."""
    stored = await delivery_rows.queued_delivery(ctx.db, job.payload["delivery_id"])
    if stored is None:
        return
    try:
        data = orjson.loads(zlib.decompress(stored.body))
    except orjson.JSONDecodeError as exc:  # valid at the ack, which reads only the envelope
        await _record(ctx, stored, job, DeliveryStatus.FAILED, f"body cannot be parsed: {exc}")
        log.error("delivery body cannot be parsed", extra={"fields": {"delivery": stored.id}})
        return
    event = sansio.Event(data, event=stored.event, delivery_id=stored.id)
    with log_context(
        delivery=stored.id, gh_event=stored.event, repo=stored.repo, pr=_pr_number(data)
    ):
        reason = ignore_reason(event, ctx.settings.app_slug and f"{ctx.settings.app_slug}[bot]")
        if reason is None and not router.fetch(event):
            reason = "no handler"
        if reason:
            await _record(ctx, stored, job, DeliveryStatus.IGNORED, reason)
            return
        installation_id = stored.installation_id
        gh = ctx.github.installation_api(installation_id) if installation_id else None
        try:
            await router.dispatch(event, gh, ctx=ctx)
        except Exception as exc:
            if job.attempts >= job.max_attempts:
                reason = f"{exc.__class__.__name__}: {exc}"
                await _record(ctx, stored, job, DeliveryStatus.FAILED, reason)
            raise
        await _record(ctx, stored, job, DeliveryStatus.DONE, "processed")
        log.info("delivery processed")


async def delivery_gave_up(ctx: Context, job: Job, reason: str) -> None:
    """A delivery's job failed for good without recording it (the process died each time)."""
    stored = await delivery_rows.queued_delivery(ctx.db, job.payload["delivery_id"])
    if stored is not None:
        await _record(ctx, stored, job, DeliveryStatus.FAILED, reason)


async def _record(
    ctx: Context, stored: StoredDelivery, job: Job, status: str, outcome: str
) -> None:
    await delivery_rows.record(ctx.db, stored.id, status, outcome, job.attempts, time.time())
    ctx.metrics.deliveries.labels(event=stored.event, outcome=status).inc()


async def prune_history(db: Database, jobs: JobQueue, older_than: float) -> tuple[int, int]:
    return (
        await delivery_rows.prune(db, older_than, PRUNE_CHUNK),
        await jobs.prune(older_than, chunk=PRUNE_CHUNK),
    )


async def prune_closed_conversations(db: Database, older_than: float) -> int:
    """Forget what was said about PRs closed before `older_than`, once their review figures are
    counted (a PR still to count waits for the next time). Runs and their spend stay for
    `prune_runs`."""
    await mark_uncounted(db)
    await recount_stale(db)
    sessions = await prune_closed_sessions(db, older_than, PRUNE_CHUNK)
    return sessions + await prune_closed_reviews(db, older_than, PRUNE_CHUNK)


async def cleanup_installation(ctx: Context, job: Job) -> None:
    for repo in job.payload["repos"]:
        await ctx.mirrors.remove_repo(repo)


async def tend_disk(ctx: Context) -> None:
    """In every worker process (mirrors and worktrees are local to each)."""
    removed = await ctx.mirrors.prune(WORKTREE_TTL)
    refs = 0
    for repo, numbers in (await closed_pull_refs(ctx.db)).items():
        refs += await ctx.mirrors.drop_pull_refs(repo, numbers)
    collected = await ctx.mirrors.collect_garbage()
    found = {"worktrees": removed, "pull_refs_dropped": refs, "mirrors_collected": collected}
    log.info("disk tended", extra={"fields": found})


async def count_figures(ctx: Context, job: Job) -> None:
    """Queued at start-up when reviews were found whose figures were never counted: count them
    at once rather than a few at each scrape."""
    counted = await recount_stale(ctx.db)
    log.info("review figures counted", extra={"fields": {"changes": counted}})


async def maintenance(ctx: Context, job: Job) -> None:
    """The database's housekeeping: one job whichever workers run (`JobQueue.every`)."""
    now = time.time()
    deliveries, jobs = await prune_history(ctx.db, ctx.jobs, now - HISTORY_TTL)
    conversations = await prune_closed_conversations(ctx.db, now - CONVERSATION_TTL)
    runs = await prune_runs(ctx.db, now - RUN_TTL, PRUNE_CHUNK)
    await forget_before(ctx.db, now - 86400)
    found = {
        "deliveries": deliveries,
        "jobs": jobs,
        "conversation_rows": conversations,
        "run_rows": runs,
    }
    log.info("maintenance done", extra={"fields": found})


async def finish_leftovers(ctx: Context) -> None:
    """What a dead process left mid-way outside the queue: a revision being written (its
    draft is approvable again), runs left `running` (failed, cost unknown), busy sessions."""
    await review_state.recover_revisions(ctx.db)
    await close_interrupted_runs(ctx.db)
    ended = await settle_sessions_at_start(ctx.db)
    if ended:
        log.info("ended sessions of closed PRs", extra={"fields": {"count": ended}})


async def setup_workers(ctx: Context, router: routing.Router) -> None:
    """Every job kind's handler, then the jobs a dead process left running back in line."""
    ctx.jobs.handlers["delivery"] = functools.partial(process_delivery, ctx, router)
    for kind, handler in {
        "review": run_review_job,
        "refresh_status": refresh_status_job,
        "cleanup_pull": cleanup_pull_job,
        "cleanup_installation": cleanup_installation,
        "maintenance": maintenance,
        "count_figures": count_figures,
        "recover_posting": recover_posting_job,
        "report_failure": report_failure_job,
        "session_turn": session_turn_job,
        "vet": vet_job,
    }.items():
        ctx.jobs.handlers[kind] = functools.partial(handler, ctx)
    ctx.jobs.on_gave_up["delivery"] = functools.partial(delivery_gave_up, ctx)
    ctx.jobs.on_gave_up["review"] = functools.partial(review_gave_up, ctx)
    ctx.jobs.on_finished = ctx.metrics.job_finished
    ctx.jobs.every_here("tend_disk", MAINTENANCE_EVERY, functools.partial(tend_disk, ctx))
    await ctx.jobs.every(
        "maintenance", cron=MAINTENANCE_CRON, seconds=MAINTENANCE_EVERY, queue=REVIEWS
    )
    if await mark_uncounted(ctx.db):
        await ctx.jobs.enqueue("count_figures", "count_figures", {}, queue=REVIEWS, supersede=True)
    # Approves left `posting`: a recovery waits for the publishing lock, which a live process
    # holds until it is done, and a dead one no longer holds.
    await queue_interrupted(ctx)
    await ctx.jobs.finish_leftovers(functools.partial(finish_leftovers, ctx))
    recovered = await ctx.jobs.recover()
    if recovered:
        log.info("re-queued jobs left running", extra={"fields": {"count": recovered}})
