"""Session turns as jobs, one at a time per session, resumed after a restart."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import gidgethub

from bot import texts
from bot.agents.base import AgentError, calls
from bot.agents.budget import DailyBudgetSpent
from bot.agents.loop import Answer
from bot.agents.toolbox import Toolbox
from bot.agents.transcript import (
    answer_text,
    tool_call,
)
from bot.github import describe_failure
from bot.logs import log_context
from bot.queue import REVIEWS, turn_key
from bot.records import messages, sessions
from bot.records.pulls import pull_by_id
from bot.records.reviews import get_review, load_findings
from bot.records.types import Job, Message, Pull, Review, Session
from bot.records.vocab import FindingState, SessionRole, SessionStatus
from bot.review.checkout import prepare_worktree, worktree_name
from bot.review.pipeline import Reviewer, revise_review
from bot.review.revise import apply_revision
from bot.review.target import Target
from bot.texts import refs
from bot.texts import render as render_text
from bot.worktrees import GitError, Worktree

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

CRITIQUE, ASK, REVISE = "critique", "ask", "revise"


async def queue_turn(
    ctx: Context, session: Session, mode: str, *, text: str, comment_id: int | None, **extra: Any
) -> bool:
    key = turn_key(session.id)
    busy = await ctx.jobs.busy(key) or session.status == SessionStatus.BUSY
    payload = {"session_id": session.id, "mode": mode, "text": text, "comment_id": comment_id}
    await ctx.jobs.enqueue("session_turn", key, {**payload, **extra}, queue=REVIEWS)
    return busy


async def draft_message_id(ctx: Context, session_id: int) -> str | None:
    for message in reversed(await messages.messages(ctx.db, session_id)):
        if tool_call(message.item, "submit_review") is not None:
            return message.id
    return None


async def cross_review_context(
    ctx: Context, parent: Session, review: Review, pull: Pull, instructions: str
) -> str:
    """The child's first message: the PR, the draft and what to do. Never the reviewer's
    conversation: a critic that reads how the draft was reached is anchored by it; it reads
    the code itself, with the same tools."""
    findings = await load_findings(ctx.db, review.id)
    return render_text(
        "prompts/cross_review.md.j2",
        pull=pull,
        review=review,
        parent=parent,
        findings=[f for f in findings if f.state == FindingState.KEPT],
        instructions=instructions,
    )


async def session_turn_job(ctx: Context, job: Job) -> None:
    payload = job.payload
    try:
        session = await sessions.get_session(ctx.db, payload["session_id"])
    except LookupError:
        return
    pull = await pull_by_id(ctx.db, session.pull_id) if session.pull_id else None
    review = await get_review(ctx.db, session.review_id) if session.review_id else None
    if pull is None or review is None or pull.state != "open":
        await sessions.end_session(ctx.db, session.id)
        return
    target = Target.of(ctx, pull)
    turn = Turn(ctx, target, session, pull, review, payload)
    with log_context(repo=pull.repo, pr=pull.number, session=session.id):
        await turn.run()


class Turn:
    def __init__(
        self,
        ctx: Context,
        target: Target,
        session: Session,
        pull: Pull,
        review: Review,
        payload: dict[str, Any],
    ) -> None:
        self.ctx = ctx
        self.target = target
        self.session = session
        self.pull = pull
        self.review = review
        self.mode = payload["mode"]
        self.text: str = payload.get("text") or ""
        self.comment_id: int | None = payload.get("comment_id")
        # Which command asked for this turn: several may come in one comment.
        self.source = f"{self.comment_id}:{payload.get('line', 0)}"
        self.payload = payload

    @property
    def child(self) -> bool:
        return self.session.role == SessionRole.CHILD

    async def run(self) -> None:
        db = self.ctx.db
        if not await sessions.mark_busy(db, self.session.id):  # ended while the turn waited
            await self._reply("not_run", provider=self.session.provider)
            return
        try:
            done = await messages.since_source(db, self.session.id, self.source)
            if done is not None and any(
                m.role == "assistant" and m.github_comment_id for m in done
            ):
                return  # finished before a restart: its answer is on the PR already
            name = worktree_name(self.pull, self.review.id, self.session.id)
            tree = await prepare_worktree(self.ctx, self.pull, self.review.head_sha, name)
            if self.mode == REVISE:
                await self._revise(tree, done)
            else:
                await self._answer(tree, done)
        except DailyBudgetSpent as exc:  # not run: the person is told, the session stays
            await self._not_run(str(exc))
        except AgentError as exc:  # the model gave up: the person is told, the critic ends
            await self._failed(describe_failure(exc))
        except (GitError, gidgethub.GitHubException, OSError):
            raise  # the job is retried; what was stored is resumed, not paid for again
        except Exception:
            log.exception("session turn crashed")
            await self._failed(texts.say(texts.PEOPLE, "internal_error"))
        finally:
            await sessions.mark_idle(db, self.session.id)

    async def _answer(self, tree: Worktree, done: list[Message] | None) -> None:
        ctx = self.ctx
        answered = None
        if done is not None and done[-1].role == "assistant":
            last = done[-1].item
            if not calls(last):  # the answer was stored, then the process died
                answered = answer_text(last) or None
        if answered is None:
            message = None if done is not None else self.text
            if message is not None and self.mode == ASK and not self.child:
                message += await self._merged_draft()
            if message is not None and self.mode == CRITIQUE:
                parent = await sessions.get_session(ctx.db, self.session.parent_session_id or 0)
                message = await cross_review_context(ctx, parent, self.review, self.pull, message)
            run = await Reviewer.of(ctx).agent(
                self.session,
                Toolbox(tree, left_out=self.review.files_left_out()),
                "critic" if self.child else "review",
                kind="session",
                subkind=self.mode,
                answer=Answer.NONE if self.child else Answer.OFFERED,  # as its earlier turns
            )
            result = await run.turn(message, comment_id=self.comment_id, source=self.source)
            answered = result.text
        body = render_text(
            "session_answer.md.j2",
            session=self.session,
            child=self.child,
            parent_name=await self._parent_name(),
            status_link=self.target.status_link(self.review) or "#",
            question=self.text if self.mode == ASK else None,
            answer=answered,
            prefix=ctx.settings.command_prefix,
            repo_url=self.target.repo_url,
        )
        await self._link(await self.target.comment(body))
        if self.child:
            await sessions.sync_message_count(ctx.db, self.session.id)

    async def _link(self, comment_id: int) -> None:
        """The turn's last assistant message produced this comment: the turn is done."""
        stored = await messages.messages(self.ctx.db, self.session.id)
        last = next((m for m in reversed(stored) if m.role == "assistant"), None)
        if last is not None:
            await messages.link_comment(self.ctx.db, self.session.id, last.id, comment_id)

    async def _parent_name(self) -> str:
        if not self.child or self.session.parent_session_id is None:
            return ""
        parent = await sessions.get_session(self.ctx.db, self.session.parent_session_id)
        return parent.provider.title()

    async def _revise(self, tree: Worktree, done: list[Message] | None) -> None:
        ctx = self.ctx
        child = str(self.payload.get("child") or texts.say(texts.PEOPLE, "other_reviewer"))
        submitted = next(
            (
                call
                for message in reversed(done or [])
                if message.role == "assistant"
                and (call := tool_call(message.item, "submit_review")) is not None
            ),
            None,
        )
        message = None if done is not None else self.text + await self._decisions()
        draft = await revise_review(
            Reviewer.of(ctx),
            tree,
            self.session,
            message,
            stored=submitted,  # revised before a restart; not yet applied
            origin=(self.comment_id, self.source),
            left_out=self.review.files_left_out(),
        )
        change = await apply_revision(
            ctx,
            self.target,
            self.review.id,
            draft,
            by=self.session.provider,
            after=child,
            tree=tree,
        )
        if change is None:
            await self._link(await self._reply("not_revised", parent=self.session.provider))
            return
        reply = await self._reply(
            "revised",
            parent=self.session.provider,
            child=child,
            kept=refs(change.kept),
            added=refs(change.added),
            withdrawn=refs(change.withdrawn),
            dropped=refs(change.dropped),
        )
        await self._link(reply)

    async def _merged_draft(self) -> str:
        """A question to a primary session that wrote only part of its draft (groups,
        passes): the draft's findings, so it answers about all of them."""
        parts = await sessions.part_sessions(self.ctx.db, self.review.id)
        if not parts:
            return ""
        findings = await load_findings(self.ctx.db, self.review.id)
        kept = [f for f in findings if f.state == FindingState.KEPT]
        if not kept:
            return ""
        merged = render_text(
            "prompts/merged_draft.md.j2", merged=kept, parts=parts + 1, revising=False
        )
        return "\n\n" + merged

    async def _decisions(self) -> str:
        """What the reviser must know besides the feedback: the findings people dropped and
        those it withdrew itself (so it neither brings them back nor rewords them in)."""
        findings = await load_findings(self.ctx.db, self.review.id)
        dropped = [f for f in findings if f.state == FindingState.DROPPED]
        withdrawn = [f for f in findings if f.state == FindingState.WITHDRAWN]
        # a draft merged from several sessions (groups, passes): this one saw only its part,
        # and a revision replaces the whole draft, so it is told what the others found
        parts = await sessions.part_sessions(self.ctx.db, self.review.id)
        kept = [f for f in findings if f.state == FindingState.KEPT] if parts else []
        if not dropped and not withdrawn and not kept:
            return ""
        return "\n\n" + render_text(
            "prompts/revision_decisions.md.j2",
            dropped=dropped,
            withdrawn=withdrawn,
            merged=kept,
            parts=parts + 1,
        )

    async def _not_run(self, reason: str) -> None:
        """The turn could not start (today's budget is spent). A critic that never got to
        its critique has nothing to continue: its cross-review ends."""
        log.warning("session turn not run", extra={"fields": {"reason": reason}})
        ended = self.child and await messages.count_messages(self.ctx.db, self.session.id) == 0
        if ended:
            await sessions.end_session(self.ctx.db, self.session.id)
        await self._told("turn_not_run", reason=reason, revising=self.mode == REVISE, ended=ended)

    async def _failed(self, reason: str) -> None:
        log.warning("session turn failed", extra={"fields": {"reason": reason}})
        if self.child:
            await sessions.end_session(self.ctx.db, self.session.id, failed=reason)
            await self._told("session_failed", reason=reason)
        else:
            await self._told("turn_failed", reason=reason, revising=self.mode == REVISE)

    async def _told(self, kind: str, **context: Any) -> None:
        """Why the turn did not answer; a reply GitHub refuses is logged, never retried."""
        try:
            await self._reply(kind, provider=self.session.provider, **context)
        except gidgethub.GitHubException:
            log.warning("could not post why a session turn did not answer", exc_info=True)

    async def _reply(self, kind: str, **context: Any) -> int:
        body = render_text(
            "reply.md.j2", kind=kind, prefix=self.ctx.settings.command_prefix, **context
        )
        return await self.target.comment(body)
