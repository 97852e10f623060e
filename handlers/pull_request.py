"""`pull_request` events: review new heads, mark stale drafts, clean up on close."""

from __future__ import annotations

import time
from typing import Any

from gidgethub import routing, sansio

from bot.agents.budget import day_start
from bot.context import Context
from bot.github import permits
from bot.records.pulls import upsert_pull
from bot.records.reviews import automatic_reviews_since, head_handled
from bot.repo_config import fetch_repo_config
from bot.review import state
from bot.review.job import close_pull, enqueue_review, held_text, queue_status_refresh

router = routing.Router()

OUTSIDE_DAILY_REVIEWS = 3  # automatic reviews per author without write access, per UTC day
RETRY_AFTER = 3600.0  # a head reviewed, stopped or held this recently is not reviewed again unasked


async def outside_author(ctx: Context, gh: Any, event: sansio.Event) -> str | None:
    """The PR author's login when they lack write access to the repository."""
    repo, pr = event.data["repository"], event.data["pull_request"]
    author = (pr.get("user") or {}).get("login")
    if not author:
        return None
    level = await ctx.github.permission(gh, repo["owner"]["login"], repo["name"], author)
    return None if permits(level, "write") else author


@router.register("pull_request", action="opened")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
@router.register("pull_request", action="synchronize")
async def review_new_head(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    pr = event.data["pull_request"]
    repo = event.data["repository"]
    installation_id = event.data.get("installation", {}).get("id")
    pull_id = await upsert_pull(ctx.db, installation_id, repo, pr)
    head_sha = pr["head"]["sha"]
    went_stale = await state.mark_stale(ctx.db, pull_id, head_sha)
    config = await fetch_repo_config(gh, repo["owner"]["login"], repo["name"])
    wanted = config.auto_review and (not pr.get("draft") or config.review_drafts)
    now = time.time()
    if wanted and not await head_handled(ctx.db, pull_id, head_sha, now - RETRY_AFTER):
        author = await outside_author(ctx, gh, event)
        prefix = ctx.settings.command_prefix
        if author is not None and config.outside_prs == "on-command":
            held = held_text("outside_on_command", author=author, prefix=prefix)
            provider = config.provider or ctx.settings.provider
            await state.create_held(
                ctx.db, pull_id, head_sha, provider, held, reason=event.data["action"]
            )
            await queue_status_refresh(ctx, pull_id)
            return

        async def over_daily_cap(conn: Any) -> str | None:
            if author is None:
                return None
            done = await automatic_reviews_since(conn, installation_id, author, day_start(now))
            if done < OUTSIDE_DAILY_REVIEWS:
                return None
            return held_text(
                "outside_capped", author=author, limit=OUTSIDE_DAILY_REVIEWS, prefix=prefix
            )

        # The new review's status comment also says the older draft went stale.
        await enqueue_review(
            ctx,
            pull_id,
            head_sha,
            provider=config.provider,
            verify=config.verify,
            config=config,
            reason=event.data["action"],
            hold_if=over_daily_cap,
        )
    elif went_stale:
        await queue_status_refresh(ctx, pull_id)


@router.register("pull_request", action="closed")
async def clean_up_closed(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    pr = event.data["pull_request"]
    repo = event.data["repository"]
    pull_id = await upsert_pull(ctx.db, event.data.get("installation", {}).get("id"), repo, pr)
    await close_pull(ctx, pull_id)
