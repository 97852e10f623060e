"""`pull_request` events: review new heads, mark stale drafts, clean up on close."""

from __future__ import annotations

import logging
from typing import Any

from gidgethub import routing, sansio

from bot.context import Context
from bot.review import lifecycle, vet

log = logging.getLogger(__name__)
router = routing.Router()


@router.register("pull_request", action="opened")
@router.register("pull_request", action="reopened")
@router.register("pull_request", action="ready_for_review")
@router.register("pull_request", action="synchronize")
async def review_new_head(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    pull_id = await lifecycle.record_pull(ctx, event.data)
    await lifecycle.new_head(ctx, gh, event.data, pull_id)


@router.register("pull_request", action="closed")
async def clean_up_closed(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    pull_id = await lifecycle.record_pull(ctx, event.data)
    await lifecycle.close_pull(ctx, pull_id)


@router.register("pull_request_review", action="submitted")
async def reconcile_submitted(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    """A vetter submitted the pending review holding a draft: read it back by `F` number."""
    outcome = await vet.on_submitted(ctx, gh, event.data)
    log.info("submitted review read", extra={"fields": {"outcome": outcome}})
