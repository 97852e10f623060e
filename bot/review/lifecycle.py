"""What handlers and commands ask of a PR's reviews (running one is `bot.review.job`'s)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.agents.budget import day_start
from bot.github import permits
from bot.queue import REVIEWS, review_key, turn_key
from bot.records import review_state
from bot.records.pulls import delete_installation, installation_pulls, upsert_pull
from bot.records.reviews import automatic_reviews_since, head_handled
from bot.records.sessions import delete_installation_sessions, end_pull_sessions, open_sessions
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.texts import PEOPLE, say

if TYPE_CHECKING:
    from bot.context import Context

OUTSIDE_DAILY_REVIEWS = 3  # automatic reviews per author without write access, per UTC day
RETRY_AFTER = 3600.0  # a head reviewed, stopped or held this recently is not reviewed again unasked


async def record_pull(ctx: Context, data: dict[str, Any]) -> int:
    installation_id = data.get("installation", {}).get("id")
    return await upsert_pull(ctx.db, installation_id, data["repository"], data["pull_request"])


@dataclass(frozen=True)
class DailyCap:
    installation_id: int | None
    author: str
    day_start: float
    prefix: str
    limit: int = OUTSIDE_DAILY_REVIEWS

    async def reached(self, conn: Any) -> str | None:
        """Why the review is held (inside the transaction that creates it), or None."""
        done = await automatic_reviews_since(
            conn, self.installation_id, self.author, self.day_start
        )
        if done < self.limit:
            return None
        return say(
            PEOPLE, "held.outside_capped", author=self.author, limit=self.limit, prefix=self.prefix
        )


async def new_head(ctx: Context, gh: Any, data: dict[str, Any], pull_id: int) -> None:
    """A PR shows a head: older drafts go stale, and the head is reviewed when the repository
    wants it and it was not reviewed, stopped or held lately."""
    pr, repo = data["pull_request"], data["repository"]
    head_sha = pr["head"]["sha"]
    went_stale = await review_state.mark_stale(ctx.db, pull_id, head_sha)
    config = await fetch_repo_config(gh, repo["owner"]["login"], repo["name"])
    wanted = config.auto_review and (not pr.get("draft") or config.review_drafts)
    now = time.time()
    if not wanted or await head_handled(ctx.db, pull_id, head_sha, now - RETRY_AFTER):
        if went_stale:
            await queue_status_refresh(ctx, pull_id)
        return
    login = (pr.get("user") or {}).get("login")
    author = None  # the PR's author when they lack write access here
    if login:
        level = await ctx.github.permission(gh, repo["owner"]["login"], repo["name"], login)
        author = None if permits(level, "write") else login
    prefix = ctx.settings.command_prefix
    if author is not None and config.outside_prs == "on-command":
        held = say(PEOPLE, "held.outside_on_command", author=author, prefix=prefix)
        provider = config.provider or ctx.settings.provider
        await review_state.create_held(
            ctx.db, pull_id, head_sha, provider, held, reason=data["action"]
        )
        await queue_status_refresh(ctx, pull_id)
        return
    installation_id = data.get("installation", {}).get("id")
    # The new review's status comment also says the older draft went stale.
    cap = None if author is None else DailyCap(installation_id, author, day_start(now), prefix)
    action = data["action"]
    ask = ReviewAsk(pull_id, head_sha, config.provider, config.verify, config, action, cap=cap)
    await enqueue_review(ctx, ask)


@dataclass(frozen=True)
class ReviewAsk:
    pull_id: int
    head_sha: str
    provider: str | None  # None: the server's
    verify: bool
    config: RepoConfig
    reason: str
    requested_by: str | None = None
    cap: DailyCap | None = None


async def enqueue_review(ctx: Context, ask: ReviewAsk) -> int:
    """Queue a review, superseding the PR's queued or running one. A `cap` is counted in the
    transaction that creates the review, so concurrent deliveries count right."""
    provider = ask.provider or ctx.settings.provider
    held: list[str] = []

    async def create_review(conn: Any) -> dict:
        why = await ask.cap.reached(conn) if ask.cap is not None else None
        held.extend([why] if why else [])
        review_id = await review_state.create(
            conn,
            ask.pull_id,
            ask.head_sha,
            provider,
            reason=ask.reason,
            requested_by=ask.requested_by,
            held=why,
        )
        return {"review_id": review_id}

    job_id = await ctx.jobs.enqueue(
        "review",
        review_key(ask.pull_id),
        {
            "pull_id": ask.pull_id,
            "head_sha": ask.head_sha,
            "provider": provider,
            "verify": ask.verify,
            "config": ask.config.to_payload(),
            "reason": ask.reason,
            "requested_by": ask.requested_by,
        },
        queue=REVIEWS,
        supersede=True,
        max_attempts=2,
        prepare=create_review,
    )
    if held:
        await queue_status_refresh(ctx, ask.pull_id)
    return job_id


async def queue_status_refresh(ctx: Context, pull_id: int) -> None:
    await ctx.jobs.enqueue(
        "refresh_status", f"status:{pull_id}", {"pull_id": pull_id}, queue=REVIEWS, supersede=True
    )


async def stop_pull_work(ctx: Context, pull_id: int, why: str) -> int:
    """Cancel the PR's running review or session turns and drop what is queued behind them;
    returns how many jobs were affected."""
    count = await ctx.jobs.cancel(review_key(pull_id))
    if count:
        await review_state.cancel_pull(ctx.db, pull_id, why, queued_only=True)
    for session in await open_sessions(ctx.db, pull_id):
        count += await ctx.jobs.cancel(turn_key(session.id))
    return count


async def close_pull(ctx: Context, pull_id: int) -> None:
    await ctx.jobs.cancel(review_key(pull_id))
    await review_state.cancel_pull(ctx.db, pull_id, say(PEOPLE, "progress", step="closed"))
    await end_sessions(ctx, pull_id)
    await ctx.jobs.enqueue(
        "cleanup_pull", f"cleanup:{pull_id}", {"pull_id": pull_id}, queue=REVIEWS
    )


async def end_sessions(ctx: Context, pull_id: int, *, keep_review: int | None = None) -> None:
    """End the PR's conversations (but those of `keep_review`), their queued and running
    turns first, so no late turn of an old draft can touch the PR again."""
    for session in await open_sessions(ctx.db, pull_id):
        if keep_review is None or session.review_id != keep_review:
            await ctx.jobs.cancel(turn_key(session.id))
    await end_pull_sessions(ctx.db, pull_id, keep_review=keep_review)


async def forget_installation(ctx: Context, installation_id: int) -> None:
    for pull_id in await installation_pulls(ctx.db, installation_id):
        await ctx.jobs.cancel(review_key(pull_id))
        await end_sessions(ctx, pull_id)
    await delete_installation_sessions(ctx.db, installation_id)
    repos = await delete_installation(ctx.db, installation_id)
    ctx.github.forget_installation(installation_id)
    await ctx.jobs.enqueue(
        "cleanup_installation",
        f"cleanup-installation:{installation_id}",
        {"installation_id": installation_id, "repos": repos},
        queue=REVIEWS,
    )
