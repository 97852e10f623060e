"""PR comments (`issue_comment`, `pull_request_review_comment`): `/cockpit …` commands.

Only `created` comments run anything (edits and deletions never do). The commenter must
have write, maintain or admin permission; an `eyes` reaction acknowledges at once, then
`rocket` on success or `confused` plus a short reply on failure.
"""

from __future__ import annotations

import logging
from typing import Any

import gidgethub
from gidgethub import routing, sansio

from bot.chatops import (
    COMMANDS,
    MODEL_COMMANDS,
    CommandFailed,
    PullRequest,
    allowed,
    help_text,
    reply,
)
from bot.context import Context
from bot.pulls import get_pull
from handlers.commands import parse_commands

router = routing.Router()
log = logging.getLogger(__name__)


@router.register("issue_comment", action="created")
async def on_pr_comment(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    if "pull_request" not in event.data["issue"]:
        return  # a plain issue, not a PR
    await run_comment(ctx, gh, event, event.data["issue"]["number"], "issues")


@router.register("pull_request_review_comment", action="created")
async def on_review_thread_comment(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    await run_comment(ctx, gh, event, event.data["pull_request"]["number"], "pulls")


async def react(gh: Any, repo: dict, comment_id: int, kind: str, content: str) -> None:
    """An acknowledgement; failing to add one must never fail (and so re-run) the commands."""
    try:
        await _react(gh, repo, comment_id, kind, content)
    except gidgethub.GitHubException:
        log.warning("could not add a reaction", exc_info=True)


async def _react(gh: Any, repo: dict, comment_id: int, kind: str, content: str) -> None:
    await gh.post(
        "/repos/{owner}/{repo}/" + kind + "/comments/{id}/reactions",
        {"owner": repo["owner"]["login"], "repo": repo["name"], "id": comment_id},
        data={"content": content},
    )


async def run_comment(ctx: Context, gh: Any, event: sansio.Event, number: int, kind: str) -> None:
    comment = event.data["comment"]
    if (comment.get("user") or {}).get("type") == "Bot":
        return
    commands = parse_commands(comment.get("body"), ctx.settings.command_prefix)
    if not commands:
        return
    repo = event.data["repository"]
    actor = comment["user"]["login"]
    installation_id = (event.data.get("installation") or {}).get("id")
    pull = await get_pull(ctx.db, repo["full_name"], number)
    pr = PullRequest(ctx, gh, repo, number, pull, actor, installation_id)
    await react(gh, repo, comment["id"], kind, "eyes")
    level = await ctx.permissions.level(gh, repo, actor)
    if not allowed(level):
        await react(gh, repo, comment["id"], kind, "confused")
        await reply(pr, "not_allowed")
        return
    ok = True
    for cmd in commands:
        try:
            ok = await run_one(ctx, pr, cmd) and ok
        except CommandFailed as exc:
            ok = False
            await safe_reply(pr, "failed", command=cmd.name, reason=str(exc))
        except Exception:
            # One broken command must not fail the delivery: a retry would re-run the
            # commands before it in this comment.
            log.exception("command crashed", extra={"fields": {"command": cmd.name}})
            ok = False
            await safe_reply(
                pr,
                "failed",
                command=cmd.name,
                reason="an internal error occurred; the operator's logs have details",
            )
    await react(gh, repo, comment["id"], kind, "rocket" if ok else "confused")


async def safe_reply(pr: PullRequest, kind: str, **context: Any) -> None:
    try:
        await reply(pr, kind, **context)
    except gidgethub.GitHubException:
        log.warning("could not post a reply", exc_info=True)


async def run_one(ctx: Context, pr: PullRequest, cmd: Any) -> bool:
    """Run one command; False (after replying) when it could not run."""
    handler = COMMANDS.get(cmd.name)
    if handler is None:
        await pr.gh.post(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            pr.owner_repo,
            data={"body": await help_text(pr, unknown=cmd.name)},
        )
        return False
    if cmd.name in MODEL_COMMANDS:
        limited = ctx.limits.check(f"{pr.repo['full_name']}#{pr.number}", pr.actor)
        if limited:
            why, wait = limited
            await reply(pr, "rate_limited", why=why, minutes=max(1, round(wait / 60)))
            return False
    answer = await handler(pr, cmd)
    if answer:
        await pr.gh.post(
            "/repos/{owner}/{repo}/issues/{number}/comments", pr.owner_repo, data={"body": answer}
        )
    return True
