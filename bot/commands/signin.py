"""`signout`: the commenter's stored GitHub sign-in (their user token) is deleted."""

from __future__ import annotations

from bot.commands.parse import Command
from bot.commands.pr import PullRequest
from bot.texts import PEOPLE, say


async def cmd_signout(pr: PullRequest, cmd: Command) -> str | None:
    tokens = pr.ctx.user_tokens
    had = tokens is not None and await tokens.forget_login(pr.actor)
    return say(PEOPLE, "sign_in.signed_out", had=had, prefix=pr.prefix)
