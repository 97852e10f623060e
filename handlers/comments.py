"""PR comments: `/cockpit …` commands (only `created` ones run anything)."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.commands.run import run_comment
from bot.context import Context

router = routing.Router()


@router.register("issue_comment", action="created")
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
