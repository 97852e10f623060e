"""Cross-AI sessions: `codex-review`, `ask`, `send-back` and `end`."""

from __future__ import annotations

import time
from importlib import resources

from bot.agents.base import AgentError
from bot.agents.budget import DailyBudgetSpent, refuse_when_spent
from bot.agents.providers import other_provider
from bot.agents.transcript import answer_text, feedback
from bot.commands import gate
from bot.commands.draft import current_draft
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import text
from bot.config import PROVIDERS
from bot.queue import turn_key
from bot.records import messages, sessions
from bot.records.reviews import latest_review
from bot.records.runs import session_cost
from bot.records.types import CrossReview, Review, Session
from bot.records.vocab import ACTIVE, OPEN_SESSION, ReviewState
from bot.sessions.turns import ASK, CRITIQUE, REVISE, draft_message_id, queue_turn
from bot.texts import PEOPLE, say


async def _draft_and_reviewer(pr: PullRequest) -> tuple[Review, Session]:
    review = await current_draft(pr)
    newest = await latest_review(pr.ctx.db, review.pull_id)
    if newest is not None and newest.state in ACTIVE:
        raise CommandFailed(say(PEOPLE, "review_running"))
    parent = await sessions.primary_of_review(pr.ctx.db, review.id)
    if parent is None:
        raise CommandFailed(say(PEOPLE, "no_conversation", prefix=pr.prefix))
    if parent.status not in OPEN_SESSION:
        raise CommandFailed(say(PEOPLE, "conversation_ended", prefix=pr.prefix))
    return review, parent


async def _room_for_a_run(pr: PullRequest) -> None:
    """A command that starts a model run says at once when today's budget is spent (the run
    itself is refused anyway, wherever it starts: `bot.agents.budget.admission`)."""
    assert pr.pull is not None
    try:
        await refuse_when_spent(pr.ctx.settings, pr.ctx.db, pr.pull.installation_id, time.time())
    except DailyBudgetSpent as exc:
        raise CommandFailed(str(exc)) from None


async def _active_child(pr: PullRequest, parent: Session) -> tuple[CrossReview, Session] | None:
    found = await sessions.active_cross_review(pr.ctx.db, parent.id)
    if found is None:
        return None
    return found, await sessions.get_session(pr.ctx.db, found.child_session_id)


async def _end(pr: PullRequest, child: Session) -> None:
    await pr.ctx.jobs.cancel(turn_key(child.id))
    await sessions.end_session(pr.ctx.db, child.id)


async def cmd_codex_review(pr: PullRequest, cmd: Command) -> str | None:
    review, parent = await _draft_and_reviewer(pr)
    if review.state != ReviewState.DRAFT:
        raise CommandFailed(say(PEOPLE, "published_review_again"))
    provider = str(cmd.flag("with") or other_provider(review.provider, pr.ctx.models.available()))
    if provider not in PROVIDERS:
        raise CommandFailed(say(PEOPLE, "bad_choice", flag="with", choices=PROVIDERS))
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
    default = resources.files("templates").joinpath("prompts", "cross_review_default.md")
    instructions = cmd.prose or default.read_text().strip()
    try:
        child = await sessions.start_cross_review(
            pr.ctx.db,
            parent=parent,
            provider=provider,
            model=model,
            anchor_message_id=await draft_message_id(pr.ctx, parent.id),
            anchor_comment_id=pr.comment_id,
            prompt=instructions,
            title=say(PEOPLE, "critique_title", provider=provider, sha=review.head_sha[:7]),
        )
    except sessions.OneActive:  # another codex-review got there first
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
        short_sha=review.head_sha[:7],
        restarted=active is not None,
    )


async def cmd_ask(pr: PullRequest, cmd: Command) -> str | None:
    if not cmd.text:
        raise CommandFailed(say(PEOPLE, "what_to_ask", prefix=pr.prefix))
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
    if review.state != ReviewState.DRAFT or review.stale:
        raise CommandFailed(say(PEOPLE, "not_revisable", prefix=pr.prefix))
    active = await _active_child(pr, parent)
    if active is None:
        raise CommandFailed(say(PEOPLE, "start_a_cross_review", prefix=pr.prefix))
    cross_review, child = active
    answers = [
        answer_text(item)
        for item in await messages.load_messages(pr.ctx.db, child.id)
        if answer_text(item)
    ]
    if not answers:
        raise CommandFailed(say(PEOPLE, "not_answered_yet", provider=child.provider))
    await gate.may_decide(pr, "send-back")  # the revision may withdraw findings
    await _room_for_a_run(pr)
    sent = feedback(cross_review.child_adapter, answers[-1], cmd.text, pr.actor)
    busy = await queue_turn(
        pr.ctx,
        parent,
        REVISE,
        text=sent,
        comment_id=pr.comment_id,
        line=cmd.line,
        child=child.provider,
    )
    return text(pr, "sent_back", child=child.provider, parent=parent.provider, busy=busy)


async def cmd_end(pr: PullRequest, cmd: Command) -> str | None:
    _review, parent = await _draft_and_reviewer(pr)
    active = await _active_child(pr, parent)
    if active is None:
        raise CommandFailed(say(PEOPLE, "no_cross_review"))
    child = active[1]
    await _end(pr, child)
    return text(
        pr,
        "ended",
        provider=child.provider,
        count=await messages.count_messages(pr.ctx.db, child.id),
        cost=await session_cost(pr.ctx.db, child.id),
    )
