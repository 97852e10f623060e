"""PR comments: `/cockpit …` commands (only `created` ones run anything)."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.commands.run import run_comment
from bot.context import Context
from bot.review.reconcile import number_of

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
    if number_of(event.data["comment"].get("body") or "") is not None:
        # A finding `vet` put in a person's review (`**F1 · …`): the model's text, delivered
        # as theirs when they submit; a command line in it is not theirs to run.
        return
    await run_comment(ctx, gh, event.data, event.data["pull_request"]["number"], "pulls")
