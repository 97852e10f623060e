"""`review` and `stop`: start or cancel model work on the PR."""

from __future__ import annotations

import time

from bot.agents.budget import budget_used_up
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import text
from bot.config import PROVIDERS
from bot.repo_config import fetch_repo_config
from bot.review.lifecycle import ReviewAsk, enqueue_review, stop_pull_work
from bot.texts import PEOPLE, say


async def cmd_review(pr: PullRequest, cmd: Command) -> str | None:
    pull = await pr.refresh()
    if pull.state != "open":
        raise CommandFailed(say(PEOPLE, "pr_closed"))
    provider = cmd.flag("provider")
    if provider is not None and provider not in PROVIDERS:
        raise CommandFailed(say(PEOPLE, "bad_choice", flag="provider", choices=PROVIDERS))
    spent = await budget_used_up(pr.ctx.settings, pr.ctx.db, pull.installation_id, time.time())
    if spent is not None:
        raise CommandFailed(
            say(PEOPLE, "held.budget", spent=spent.describe(pr.ctx.settings), prefix=pr.prefix)
        )
    config = await fetch_repo_config(pr.gh, pr.owner, pr.name)
    provider = str(provider or config.provider or pr.ctx.settings.provider)
    verify = bool(cmd.flag("verify")) or config.verify
    ask = ReviewAsk(pull.id, pull.head_sha, provider, verify, config, "command", pr.actor)
    await enqueue_review(pr.ctx, ask)
    return text(pr, "review_queued", short_sha=pull.head_sha[:7], provider=provider, verify=verify)


async def cmd_stop(pr: PullRequest, cmd: Command) -> str | None:
    pull = await pr.known()
    count = await stop_pull_work(
        pr.ctx, pull.id, say(PEOPLE, "progress_stopped_by", actor=pr.actor)
    )
    return text(pr, "stopped", count=count)
