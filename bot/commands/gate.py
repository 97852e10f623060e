"""Who may run commands, and how often the commands that start a model may run."""

from __future__ import annotations

from bot.commands.catalog import BY_NAME
from bot.commands.pr import PullRequest
from bot.github import permits


async def permission(pr: PullRequest) -> str:
    return await pr.ctx.github.permission(pr.gh, pr.owner, pr.name, pr.actor)


async def may_run(pr: PullRequest, required: str = "write") -> bool:
    return permits(await permission(pr), required)


def rate_limited(pr: PullRequest, command: str) -> tuple[str, float] | None:
    """(why, seconds to wait) when a model-starting command is over its limit, else None."""
    spec = BY_NAME.get(command)
    if spec is None or not spec.starts_model:
        return None
    return pr.ctx.limits.check(f"{pr.repo['full_name']}#{pr.number}", pr.actor)
