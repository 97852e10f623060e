"""`pull_request` events: review new heads, mark stale drafts, clean up on close."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.context import Context
from bot.repo_config import fetch_repo_config
from bot.review import state
from bot.review.job import close_pull, enqueue_review, queue_status_refresh
from bot.review.store import has_draft_for, upsert_pull

router = routing.Router()


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
    if wanted and not await has_draft_for(ctx.db, pull_id, head_sha):
        # The new review's status comment also says the older draft went stale.
        await enqueue_review(
            ctx,
            pull_id,
            head_sha,
            provider=config.provider,
            verify=config.verify,
            config=config,
            reason=event.data["action"],
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
