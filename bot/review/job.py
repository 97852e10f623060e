"""The review job: one review of a PR's head, from its worktree to the draft on GitHub."""

from __future__ import annotations

import asyncio
import enum
import logging
import sqlite3
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.agents.base import AgentError
from bot.agents.budget import budget_used_up
from bot.github import describe_failure, github_transient
from bot.logs import log_context
from bot.queue import REVIEWS
from bot.records import review_state
from bot.records.pulls import pull_by_id
from bot.records.reviews import get_review, owns_run, update_review
from bot.records.sessions import end_review_sessions
from bot.records.types import DraftFinding, Job, LedgerNote, Pull, Review
from bot.records.vocab import ACTIVE, LedgerStatus, ReviewState
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.review import ledger
from bot.review.checkout import default_branch_commit, prepare_worktree, worktree_name
from bot.review.checkrun import finish_check, start_check
from bot.review.lifecycle import end_sessions
from bot.review.pending import pending_review
from bot.review.pipeline import Draft, Reviewer, ReviewRequest, review_worktree
from bot.review.status import show_status
from bot.review.target import Target
from bot.review.threads import resolve_threads, thread_replies
from bot.review.verify import choose_provider, settle_passes, verify_unverified
from bot.texts import PEOPLE, say
from bot.worktrees import GitError, Worktree, disk

if TYPE_CHECKING:
    from bot.context import Context
    from bot.records.ledger import LedgerWrites

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10.0  # seconds between status-comment progress edits


class Ended(enum.Enum):
    DRAFTED = "drafted"
    # Superseded or stopped while the model worked (the cancellation may still be on its way
    # from another process): nothing is published for an older head.
    SUPERSEDED = "superseded"
    # Another attempt of the job owns the review's run now: this one changed nothing.
    TAKEN_OVER = "taken over"


@dataclass
class StatusTicker:
    ctx: Context
    target: Target
    review_id: int
    owner: str
    calls: int = 0
    last: float = field(default_factory=time.monotonic)  # the start was just shown
    phase: str = field(default_factory=lambda: say(PEOPLE, "progress", step="reviewing"))

    async def __call__(self, _tool: str) -> None:
        self.calls += 1
        if time.monotonic() - self.last < PROGRESS_EVERY:
            return
        self.last = time.monotonic()
        try:  # progress is shown when it can be: a hiccup here never fails the review
            if not await owns_run(self.ctx.db, self.review_id, self.owner):
                return
            progress = say(PEOPLE, "progress_calls", phase=self.phase, calls=self.calls)
            review = await update_review(self.ctx.db, self.review_id, progress=progress)
            await show_status(self.target, review)
        except (gidgethub.GitHubException, sqlite3.Error):
            log.warning("progress update failed", exc_info=True)


async def run_review_job(ctx: Context, job: Job) -> None:
    review = await get_review(ctx.db, job.payload["review_id"])
    if review is None or review.state not in ACTIVE:
        return
    pull = await pull_by_id(ctx.db, review.pull_id)
    if pull is None or pull.state != "open":
        await review_state.cancel(ctx.db, review.id, say(PEOPLE, "progress", step="pr_closed"))
        return
    with log_context(repo=pull.repo, pr=pull.number, review=review.id):
        target = Target.of(ctx, pull)
        config = job.payload.get("config")
        if config is not None:
            known = RepoConfig.from_payload(config)
        else:
            owner, name = pull.repo.split("/", 1)
            known = await fetch_repo_config(target.gh, owner, name)
        await ReviewJob(
            target,
            review.id,
            verify=bool(job.payload.get("verify")) or known.verify,
            final_attempt=job.attempts >= job.max_attempts,
            owner=f"{job.id}:{job.attempts}",
        ).run(known)


@dataclass
class ReviewJob:
    target: Target
    review_id: int
    verify: bool = False
    final_attempt: bool = True  # else a GitHub hiccup is retried by the queue, not reported
    owner: str = ""  # the job attempt running it (see `review_state.take_run`)

    @property
    def ctx(self) -> Context:
        return self.target.ctx

    @property
    def pull(self) -> Pull:
        return self.target.pull

    async def run(self, config: RepoConfig) -> None:
        why_not = await self._why_not_now()
        if why_not is not None:
            log.warning("review not started", extra={"fields": {"reason": why_not}})
            if await review_state.hold(self.ctx.db, self.review_id, why_not):
                await show_status(self.target, await get_review(self.ctx.db, self.review_id))
            return
        ctx = self.ctx
        if not await review_state.take_run(
            ctx.db, self.review_id, self.owner, config_error=config.error
        ):
            return  # superseded or stopped before it started
        try:
            review = await get_review(self.ctx.db, self.review_id)
            await show_status(self.target, review)
            await start_check(self.target, review)
            ended = await self._review(review, config)
        except asyncio.CancelledError:
            if not self.ctx.jobs.interrupted():  # an interrupted job runs again: state stays
                await self._ended()
            raise
        except Exception as exc:
            if self.ctx.jobs.interrupted():  # its clean-up met the outage that interrupts it
                raise asyncio.CancelledError from exc
            if isinstance(exc, sqlite3.OperationalError) and not self.final_attempt:
                log.warning("the database did not answer; the review is retried", exc_info=True)
                raise
            if github_transient(exc) and not self.final_attempt:
                log.warning("GitHub did not answer; the review is retried", exc_info=True)
                raise
            if not isinstance(exc, AgentError | GitError | gidgethub.GitHubException | OSError):
                log.exception("review crashed")
                await self._ended(say(PEOPLE, "internal_error"))
                return
            await self._ended(describe_failure(exc))
            return
        if ended is Ended.TAKEN_OVER:
            log.warning("review run taken over by a later attempt: this one changes nothing")
        elif ended is Ended.SUPERSEDED:
            await self._ended()

    async def _review(self, review: Review, config: RepoConfig) -> Ended:
        ctx, review_id = self.ctx, self.review_id
        name = worktree_name(self.pull, review_id)
        tree = await prepare_worktree(ctx, self.pull, review.head_sha, name)
        await update_review(ctx.db, review_id, base_sha=tree.base_sha)
        rules_commit = await default_branch_commit(tree)
        items = await ledger.load(ctx.db, self.pull.id)
        published = [i.ordinal for i in items if i.status == LedgerStatus.PUBLISHED]
        since = await ledger.delta_base(ctx.db, tree, self.pull.id, review_id)
        request = ReviewRequest.of(
            self.pull,
            review,
            config,
            rules_commit=rules_commit,
            since=since,
            ledger=tuple(ledger.brief(items, await thread_replies(self.target, published))),
        )
        reviewer = Reviewer.of(ctx)
        progress = StatusTicker(ctx, self.target, review_id, self.owner)
        draft = await review_worktree(
            reviewer, tree, request, on_tool_call=progress, on_plan=self._planned
        )
        settled: dict[str, Any] = {}
        if draft.once:  # `passes`: what one pass only raised stays when verify confirms it
            provider = self._verifier(request)
            once = draft.once
            await self._verifying(progress, sum(f in once for f in draft.findings), provider)
            draft, error = await settle_passes(
                reviewer, tree, request, draft, provider=provider, on_tool_call=progress
            )
            settled = {"verify_provider": provider, "verify_error": error}
        numbered, writes, note, verified = await self._numbered(
            reviewer, tree, request, items, draft, progress
        )
        verified = verified or settled
        current = await get_review(ctx.db, review_id)
        if current is None or current.run_owner != self.owner:
            return Ended.TAKEN_OVER
        if current.state != ReviewState.RUNNING:
            return Ended.SUPERSEDED
        await review_state.set_findings(ctx.db, review_id, numbered, writes)
        drafted = await update_review(
            ctx.db,
            review_id,
            verdict=draft.verdict,
            summary=draft.summary,
            run_id=draft.run_id,
            skill_version_id=draft.skill_version_id,
            progress=say(PEOPLE, "progress", step="publishing"),
            # `verify_publish` applies when the verify pass ran
            rules=draft.rules
            if self.verify and verified
            else replace(draft.rules, verify_publish="not_refuted"),
            ledger=note,
            suppressed=note.suppressed,
            **verified,
        )
        if not await owns_run(ctx.db, review_id, self.owner):
            return Ended.TAKEN_OVER
        await pending_review(self.target, drafted)
        pull = await pull_by_id(ctx.db, self.pull.id)
        moved = pull is not None and pull.head_sha != review.head_sha
        ended = await review_state.end_run(  # a push may have landed meanwhile: stale
            ctx.db,
            review_id,
            self.owner,
            ReviewState.DRAFT,
            progress=say(PEOPLE, "progress", step="draft"),
            stale=int(moved),
        )
        if ended is None:
            return Ended.TAKEN_OVER
        await end_sessions(ctx, self.pull.id, keep_review=review_id)  # the old drafts' talk
        await finish_check(self.target, ended)
        if note.fixed_published:  # their review threads on GitHub are resolved
            refused = await resolve_threads(self.target, list(note.fixed_published))
            if refused:
                note = replace(note, resolve_error=refused)
                ended = await update_review(ctx.db, review_id, ledger=note) or ended
        await show_status(self.target, ended)
        return Ended.DRAFTED

    async def _planned(self, skipped: tuple[tuple[str, str], ...]) -> None:
        await update_review(
            self.ctx.db,
            self.review_id,
            not_reviewed=skipped,
            progress=say(PEOPLE, "progress", step="reviewing"),
        )

    async def _numbered(
        self,
        reviewer: Reviewer,
        tree: Worktree,
        request: ReviewRequest,
        items: list[ledger.Item],
        draft: Draft,
        progress: StatusTicker,
    ) -> tuple[list[tuple[int, DraftFinding]], LedgerWrites, LedgerNote, dict[str, Any]]:
        """The draft's findings under the ledger's numbers (verified when asked), the ledger
        writes, the status note and the verify pass's fields of the review."""
        ctx = self.ctx
        numbered, writes, note = await ledger.numbered(
            ctx.db, tree, self.pull.id, self.review_id, items, draft, request.since
        )
        if not (self.verify and numbered):
            return numbered, writes, note, {}
        provider = self._verifier(request)
        # A finding carried from the last draft with its code as it was keeps its verdict;
        # the rest (new, said again, or moved on) are verified.
        todo = sum(1 for _, f in numbered if f.verify_status is None)
        if todo:
            await self._verifying(progress, todo, provider)
        findings, error = await verify_unverified(
            reviewer,
            tree,
            request,
            replace(draft, findings=[f for _, f in numbered]),
            provider=provider,
            on_tool_call=progress,
        )
        if error:
            log.warning("verify pass failed", extra={"fields": {"reason": error}})
        numbered = [(n, f) for (n, _), f in zip(numbered, findings, strict=True)]
        return numbered, writes, note, {"verify_provider": provider, "verify_error": error}

    def _verifier(self, request: ReviewRequest) -> str:
        available = self.ctx.models.available()
        return choose_provider(request.provider, request.config.verify_provider, available)

    async def _verifying(self, progress: StatusTicker, count: int, provider: str) -> None:
        progress.phase = say(PEOPLE, "progress_verifying", count=count, provider=provider)
        await update_review(self.ctx.db, self.review_id, progress=progress.phase)

    async def _why_not_now(self) -> str | None:
        """Why no review may start now, whoever asked: disk below its watermark, or the
        installation's model budget for the day spent."""
        settings, prefix = self.ctx.settings, self.ctx.settings.command_prefix
        space = disk(settings.data_dir, settings.min_free_mb)
        if space.low:
            return say(
                PEOPLE, "held.disk", free_mb=space.free_mb, min_mb=space.min_mb, prefix=prefix
            )
        spent = await budget_used_up(settings, self.ctx.db, self.pull.installation_id, time.time())
        if spent is not None:
            return say(PEOPLE, "held.budget", spent=spent.describe(settings), prefix=prefix)
        return None

    async def _ours(self, to: str, **fields: Any) -> Review | None:
        """End the run as `to`; the review when this attempt did, or when a person or a newer
        review stopped the run this attempt still owns (its end is then this attempt's to
        show). None when another attempt took the run over, or it ended otherwise (failed for
        good elsewhere): whoever ended it shows that end."""
        ctx = self.ctx
        ended = await review_state.end_run(ctx.db, self.review_id, self.owner, to, **fields)
        if ended is not None:
            return ended
        review = await get_review(ctx.db, self.review_id)
        if (
            review is not None
            and review.run_owner == self.owner
            and review.state in (ReviewState.CANCELLED, ReviewState.SUPERSEDED)
        ):
            return review
        return None

    async def _ended(self, reason: str | None = None) -> None:
        """The run ends failed (`reason`) or stopped, and this attempt shows it on the PR."""
        what = "stop" if reason is None else "failure"
        if reason is None:
            stopped = say(PEOPLE, "progress", step="stopped")
            review = await self._ours(ReviewState.CANCELLED, progress=stopped)
        else:
            log.warning("review failed", extra={"fields": {"reason": reason}})
            failed = say(PEOPLE, "progress", step="failed")
            review = await self._ours(ReviewState.FAILED, error=reason, progress=failed)
        if review is None:
            log.warning("review run ended elsewhere: this %s is not shown", what)
            return
        await end_review_sessions(self.ctx.db, self.review_id)
        try:
            await show_end(self.target, review, reason)
        except gidgethub.GitHubException:
            log.exception("could not report the %s on GitHub", what)


async def show_end(target: Target, review: Review, error: str | None = None) -> None:
    """A failed (`error`) or stopped review on the PR: check run, then status comment (a
    superseded review's is its successor's); a refused check run does not hold it back."""
    refused = None
    try:
        if error is None:
            stopped = review.progress or "stopped"
            await finish_check(target, review, conclusion="cancelled", stopped=stopped)
        else:
            if not review.check_run_id:
                review = await start_check(target, review)
            await finish_check(target, review, conclusion="failure", error=error)
    except gidgethub.GitHubException as exc:
        refused = exc
    if error is not None or review.state == ReviewState.CANCELLED:
        await show_status(target, review)
    if refused is not None:
        raise refused


async def review_gave_up(ctx: Context, job: Job, reason: str) -> None:
    """A review job failed for good without reporting it (e.g. it took the process down at
    every attempt): the review fails with the reason, and a job says so on the PR."""
    review = await get_review(ctx.db, job.payload["review_id"])
    if review is None or not await review_state.fail(
        ctx.db, review.id, say(PEOPLE, "gave_up", reason=reason)
    ):
        return  # it reported its own end already
    await ctx.jobs.enqueue(
        "report_failure", f"status:{review.pull_id}", {"review_id": review.id}, queue=REVIEWS
    )


async def report_failure_job(ctx: Context, job: Job) -> None:
    review = await get_review(ctx.db, job.payload["review_id"])
    pull = await pull_by_id(ctx.db, review.pull_id) if review else None
    if review is None or pull is None or review.state != ReviewState.FAILED:
        return
    target = Target.of(ctx, pull)
    await show_end(target, review, review.error or "")
