"""Who may run commands, and how often the commands that start a model may run."""

from __future__ import annotations

import time

from bot.catalog import BY_NAME
from bot.commands.pr import CommandFailed, PullRequest
from bot.github import permits
from bot.records import notices
from bot.repo_config import fetch_repo_config
from bot.texts import PEOPLE, say


async def may_run(pr: PullRequest, required: str = "write") -> bool:
    return permits(await pr.ctx.github.permission(pr.gh, pr.owner, pr.name, pr.actor), required)


async def may_decide(pr: PullRequest, command: str) -> None:
    """`approve`, `drop` and `send-back` (whose revision may withdraw findings) decide what
    is published: they need the repository's `approve_permission` (read from the default
    branch), not only the write access every command needs. CommandFailed, saying which
    permission, when the person lacks it."""
    config = await fetch_repo_config(pr.gh, pr.owner, pr.name)
    if not await may_run(pr, config.approve_permission):
        raise CommandFailed(
            say(PEOPLE, "needs_permission", command=command, permission=config.approve_permission)
        )


NOT_ALLOWED_EVERY = 3600.0  # one "not allowed" answer per person per PR in this time


async def first_notice(pr: PullRequest, kind: str, every: float) -> bool:
    """True at most once per `every` seconds per person and PR (kept in the database, so
    several processes agree): the notice may be given."""
    now = time.time()
    key = f"{kind}:{pr.repo.get('id') or pr.repo['full_name']}#{pr.number}:{pr.actor.casefold()}"
    return await notices.first_notice(pr.ctx.db, key, now, every)


async def rate_limited(pr: PullRequest, command: str) -> tuple[str, float] | None:
    """(why, seconds to wait) when a model-starting command is over its limit, else None
    (counted in the database: every process shares one window)."""
    spec = BY_NAME.get(command)
    if spec is None or not spec.starts_model:
        return None
    where = f"{pr.repo.get('id') or pr.repo['full_name']}#{pr.number}"
    return await pr.ctx.limits.check(pr.ctx.db, where, pr.actor.casefold())
