"""Running the commands of one comment: acknowledge, check permission, run, say how it went."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.catalog import COMMANDS
from bot.commands import draft, gate, info, review, session, signin
from bot.commands.parse import Command, parse_commands
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import post, react, reply
from bot.records.pulls import find_pull
from bot.texts import PEOPLE, say

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

CommandFn = Callable[[PullRequest, Command], Awaitable[str | None]]
HANDLERS: dict[str, CommandFn] = {
    "help": info.cmd_help,
    "status": info.cmd_status,
    "review": review.cmd_review,
    "stop": review.cmd_stop,
    "drop": draft.cmd_drop,
    "approve": draft.cmd_approve,
    "vet": draft.cmd_vet,
    "codex-review": session.cmd_codex_review,
    "ask": session.cmd_ask,
    "send-back": session.cmd_send_back,
    "end": session.cmd_end,
    "config": info.cmd_config,
    "signout": signin.cmd_signout,
}
assert HANDLERS.keys() == {spec.name for spec in COMMANDS}, "the catalog lists every command"


async def run_comment(ctx: Context, gh: Any, data: dict[str, Any], number: int, kind: str) -> None:
    comment = data["comment"]
    commands = parse_commands(comment.get("body"), ctx.settings.command_prefix)
    if not commands:
        return
    repo = data["repository"]
    installation_id = (data.get("installation") or {}).get("id")
    pull = await find_pull(ctx.db, repo, number)
    if pull is not None and installation_id and pull.installation_id != installation_id:
        log.warning(  # the repository moved to another installation: read the PR afresh
            "stored PR belongs to another installation",
            extra={"fields": {"stored": pull.installation_id, "now": installation_id}},
        )
        pull = None
    user = comment["user"]
    pr = PullRequest(
        ctx, gh, repo, number, pull, user["login"], installation_id, comment["id"], user.get("id")
    )
    if not await gate.may_run(pr):  # answered once an hour at most: a flood costs nothing
        if await gate.first_notice(pr, "not-allowed", gate.NOT_ALLOWED_EVERY):
            await react(pr, comment["id"], kind, "confused")
            await reply(pr, "not_allowed")
        return
    await react(pr, comment["id"], kind, "eyes")
    ok = True
    for cmd in commands:
        ok = await run_one(pr, cmd) and ok
    await react(pr, comment["id"], kind, "rocket" if ok else "confused")


async def run_one(pr: PullRequest, cmd: Command) -> bool:
    """Run one command; False (after replying) when it could not run. One broken command
    never fails the delivery: a retry would re-run the commands before it."""
    handler = HANDLERS.get(cmd.name)
    if handler is None:
        await post(pr, await info.help_text(pr, unknown=cmd.name))
        return False
    limited = await gate.rate_limited(pr, cmd.name)
    if limited:
        why, wait = limited
        await reply(pr, "rate_limited", why=why, minutes=max(1, round(wait / 60)))
        return False
    try:
        answer = await handler(pr, cmd)
        if answer:
            await post(pr, answer)
    except CommandFailed as exc:
        await reply(pr, "failed", command=cmd.name, reason=str(exc))
        return False
    except Exception:
        log.exception("command crashed", extra={"fields": {"command": cmd.name}})
        await reply(pr, "failed", command=cmd.name, reason=say(PEOPLE, "internal_error"))
        return False
    return True
