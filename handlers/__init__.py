"""The gidgethub `router`: each event a stored delivery brings, handed to its owner."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.commands.run import run_comment
from bot.context import Context
from bot.review import lifecycle

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


@router.register("issue_comment", action="created")  # only new comments run commands
async def on_pr_comment(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    if "pull_request" not in event.data["issue"]:
        return  # a plain issue, not a PR
    await run_comment(ctx, gh, event.data, event.data["issue"]["number"], "issues")


@router.register("pull_request_review_comment", action="created")
async def on_review_thread_comment(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    await run_comment(ctx, gh, event.data, event.data["pull_request"]["number"], "pulls")


@router.register("installation", action="deleted")
async def uninstalled(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    await lifecycle.forget_installation(ctx, event.data["installation"]["id"])
