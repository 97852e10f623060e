"""`help`, `status` and `config`."""

from __future__ import annotations

from bot.catalog import COMMANDS
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import text
from bot.records.reviews import latest_review
from bot.repo_config import CONFIG_PATH, effective, fetch_repo_config
from bot.review.status import show_status
from bot.texts import PEOPLE, say


async def help_text(pr: PullRequest, unknown: str | None = None) -> str:
    review = await latest_review(pr.ctx.db, pr.pull.id) if pr.pull else None
    state = say(PEOPLE, "latest_review", review=review)
    rows = [(spec.usage, spec.what) for spec in COMMANDS]
    return text(pr, "help", unknown=unknown, state_line=state, commands=rows)


async def cmd_help(pr: PullRequest, cmd: Command) -> str | None:
    return await help_text(pr)


async def cmd_status(pr: PullRequest, cmd: Command) -> str | None:
    pull = await pr.known()
    review = await latest_review(pr.ctx.db, pull.id)
    if review is None:
        raise CommandFailed(say(PEOPLE, "no_review_yet", prefix=pr.prefix))
    await show_status(pr.target(), review)
    return None


async def cmd_config(pr: PullRequest, cmd: Command) -> str | None:
    """What applies here now: the default branch's file (never the PR's), key by key."""
    config = await fetch_repo_config(pr.gh, pr.owner, pr.name)
    return text(
        pr,
        "config",
        path=CONFIG_PATH,
        branch=pr.repo.get("default_branch"),
        source=config.source,
        settings=effective(config),
        problems=config.problems,
        unusable=config.unusable,
        server_provider=pr.ctx.settings.provider,
    )
