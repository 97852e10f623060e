"""Cross-AI sessions: `codex-review`, `ask`, `send-back` and `end`."""

from __future__ import annotations

import sqlite3
import time
from importlib import resources

from bot.agents.base import AgentError
from bot.agents.providers import other_provider
from bot.budget import DailyBudgetSpent, refuse_when_spent
from bot.commands.draft import current_draft
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import text
from bot.config import PROVIDERS
from bot.review import state
from bot.review.store import latest_review
from bot.sessions import store
from bot.sessions.store import Session
from bot.sessions.transcript import answer_text, feedback
from bot.sessions.turns import ASK, CRITIQUE, REVISE, draft_message_id, queue_turn


def default_instructions() -> str:
    path = resources.files("templates").joinpath("prompts", "cross_review_default.md")
    return path.read_text().strip()


async def _draft_and_reviewer(pr: PullRequest) -> tuple[sqlite3.Row, Session]:
    review = await current_draft(pr)
    newest = await latest_review(pr.ctx.db, review["pull_id"])
    if newest is not None and newest["state"] in state.ACTIVE:
        raise CommandFailed(
            "a new review of this PR is running; its draft replaces this one when it is done"
        )
    parent = await store.primary_of_review(pr.ctx.db, review["id"])
    if parent is None:
        raise CommandFailed(
            "this draft has no reviewer conversation (nothing was reviewed); "
            f"run `{pr.prefix} review` for a new draft"
        )
    if parent.status not in store.OPEN:
        raise CommandFailed(
            "this draft's conversation has ended (the PR was closed or the review was "
            f"replaced); run `{pr.prefix} review` for a new draft"
        )
    return review, parent


async def _room_for_a_run(pr: PullRequest) -> None:
    """A command that starts a model run says at once when today's budget is spent (the run
    itself is refused anyway, wherever it starts: `bot.budget.charge_run`)."""
    assert pr.pull is not None
    try:
        await refuse_when_spent(pr.ctx.settings, pr.ctx.db, pr.pull["installation_id"], time.time())
    except DailyBudgetSpent as exc:
        raise CommandFailed(str(exc)) from None


async def _active_child(pr: PullRequest, parent: Session) -> tuple[sqlite3.Row, Session] | None:
    row = await store.active_cross_review(pr.ctx.db, parent.id)
    if row is None:
        return None
    return row, await store.get_session(pr.ctx.db, row["child_session_id"])


async def _end(pr: PullRequest, child: Session) -> None:
    await pr.ctx.jobs.cancel(store.turn_key(child.id))
    await store.end_session(pr.ctx.db, child.id)


async def cmd_codex_review(pr: PullRequest, cmd: Command) -> str | None:
    review, parent = await _draft_and_reviewer(pr)
    if review["state"] != state.DRAFT:
        raise CommandFailed("the draft is already published; run `review` for a new one")
    provider = str(
        cmd.flag("with") or other_provider(review["provider"], pr.ctx.models.available())
    )
    if provider not in PROVIDERS:
        raise CommandFailed(f"--with must be one of {', '.join(PROVIDERS)}")
    active = await _active_child(pr, parent)
    if active is not None and not cmd.flag("restart"):
        return text(pr, "cross_review_active", provider=active[1].provider)
    await _room_for_a_run(pr)
    try:
        model = pr.ctx.models.provider(provider).model
    except AgentError as exc:
        raise CommandFailed(str(exc)) from exc
    if active is not None:
        await _end(pr, active[1])
    instructions = cmd.prose or default_instructions()
    try:
        child = await store.start_cross_review(
            pr.ctx.db,
            parent=parent,
            provider=provider,
            model=model,
            anchor_message_id=await draft_message_id(pr.ctx, parent.id),
            anchor_comment_id=pr.comment_id,
            prompt=instructions,
            title=f"{provider} critique of the draft for {review['head_sha'][:7]}",
        )
    except store.OneActive:  # another codex-review got there first
        current = await _active_child(pr, parent)
        return text(
            pr, "cross_review_active", provider=current[1].provider if current else provider
        )
    await queue_turn(
        pr.ctx, child, CRITIQUE, text=instructions, comment_id=pr.comment_id, line=cmd.line
    )
    return text(
        pr,
        "cross_review_started",
        provider=provider,
        short_sha=review["head_sha"][:7],
        restarted=active is not None,
    )


async def cmd_ask(pr: PullRequest, cmd: Command) -> str | None:
    if not cmd.text:
        raise CommandFailed(f"say what to ask, e.g. `{pr.prefix} ask is F2 a real problem?`")
    _review, parent = await _draft_and_reviewer(pr)
    await _room_for_a_run(pr)
    active = await _active_child(pr, parent)
    target = active[1] if active else parent
    busy = await queue_turn(
        pr.ctx, target, ASK, text=cmd.text, comment_id=pr.comment_id, line=cmd.line
    )
    return text(pr, "asked", provider=target.provider, busy=busy)


async def cmd_send_back(pr: PullRequest, cmd: Command) -> str | None:
    review, parent = await _draft_and_reviewer(pr)
    if review["state"] != state.DRAFT or review["stale"]:
        raise CommandFailed(
            f"only a current, unpublished draft can be revised; run `{pr.prefix} review`"
        )
    active = await _active_child(pr, parent)
    if active is None:
        raise CommandFailed(f"no cross-review is active: start one with `{pr.prefix} codex-review`")
    row, child = active
    answers = [
        answer_text(item)
        for item in await store.load_messages(pr.ctx.db, child.id)
        if answer_text(item)
    ]
    if not answers:
        raise CommandFailed(
            f"{child.provider.title()} has not answered yet; send it back once its critique is"
            " posted"
        )
    await _room_for_a_run(pr)
    message = feedback(row["child_adapter"], answers[-1], cmd.text, pr.actor)
    busy = await queue_turn(
        pr.ctx,
        parent,
        REVISE,
        text=message,
        comment_id=pr.comment_id,
        line=cmd.line,
        child=child.provider,
    )
    return text(pr, "sent_back", child=child.provider, parent=parent.provider, busy=busy)


async def cmd_end(pr: PullRequest, cmd: Command) -> str | None:
    _review, parent = await _draft_and_reviewer(pr)
    active = await _active_child(pr, parent)
    if active is None:
        raise CommandFailed("no cross-review is active on this draft")
    child = active[1]
    await _end(pr, child)
    return text(
        pr,
        "ended",
        provider=child.provider,
        count=await store.count_messages(pr.ctx.db, child.id),
        cost=await store.session_cost(pr.ctx.db, child.id),
    )
