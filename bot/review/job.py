"""Review jobs: queue a review of a PR's head, run the pipeline with its state transitions,
and show the result on GitHub; also the PR's status refresh and clean-up jobs."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.agents.base import AgentError, Budget
from bot.budget import budget_used_up, disk
from bot.github import github_transient
from bot.logs import log_context
from bot.queue import REVIEWS, Job
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.review import state
from bot.review.pipeline import Reviewer, ReviewRequest, review_worktree
from bot.review.publish import Publisher
from bot.review.store import (
    delete_installation,
    get_review,
    latest_review,
    pull_by_id,
    update_review,
)
from bot.review.verify import apply_verification, choose_provider, verify_draft
from bot.sessions.store import (
    delete_installation_sessions,
    end_pull_sessions,
    end_review_sessions,
    open_sessions,
    turn_key,
)
from bot.texts import render
from bot.worktrees import GitError, Worktree

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10.0  # seconds between status-comment progress edits
INTERNAL_ERROR = "an internal error occurred; the operator's logs have details"
GAVE_UP = "it did not finish in any of its attempts ({reason}); it is not retried automatically"


def held_text(kind: str, **context: Any) -> str:
    """Why a review is not started, one line (templates/held.md.j2)."""
    return render("held.md.j2", kind=kind, **context).strip()


def review_key(pull_id: int) -> str:
    """Serialisation key: one running review per PR."""
    return f"review:{pull_id}"


def worktree_name(pull: sqlite3.Row, review_id: int, session_id: int | None = None) -> str:
    """A review's worktree, or one session's of it (turns of two sessions may run at once)."""
    name = f"{pull['repo']}-{pull['number']}-r{review_id}"
    return name if session_id is None else f"{name}-s{session_id}"


async def enqueue_review(
    ctx: Context,
    pull_id: int,
    head_sha: str,
    *,
    provider: str | None,
    verify: bool,
    config: RepoConfig,
    reason: str,
    requested_by: str | None = None,
    hold_if: Callable[[Any], Awaitable[str | None]] | None = None,
) -> int:
    """Queue a review of `head_sha`, superseding any queued or running review of the PR.
    `hold_if` decides in the same transaction (so concurrent deliveries count right) that
    the review is held instead: it says why, and the job finds nothing to run."""
    provider = provider or ctx.settings.provider
    held: list[str] = []

    async def create_review(conn: Any) -> dict:
        why = await hold_if(conn) if hold_if is not None else None
        held.extend([why] if why else [])
        review_id = await state.create(
            conn, pull_id, head_sha, provider, reason=reason, requested_by=requested_by, held=why
        )
        return {"review_id": review_id}

    job_id = await ctx.jobs.enqueue(
        "review",
        review_key(pull_id),
        {
            "pull_id": pull_id,
            "head_sha": head_sha,
            "provider": provider,
            "verify": verify,
            "config": config.to_payload(),
            "reason": reason,
            "requested_by": requested_by,
        },
        queue=REVIEWS,
        supersede=True,
        max_attempts=2,
        prepare=create_review,
    )
    if held:
        await queue_status_refresh(ctx, pull_id)
    return job_id


async def queue_status_refresh(ctx: Context, pull_id: int) -> None:
    """Re-render the PR's status comment in a job (handlers never call GitHub for it)."""
    await ctx.jobs.enqueue(
        "refresh_status", f"status:{pull_id}", {"pull_id": pull_id}, queue=REVIEWS, supersede=True
    )


async def stop_pull_work(ctx: Context, pull_id: int, why: str) -> int:
    """Cancel the PR's running review or session turns and drop what is queued behind them;
    returns how many jobs were affected."""
    count = await ctx.jobs.cancel(review_key(pull_id))
    if count:
        await state.cancel_pull(ctx.db, pull_id, why, queued_only=True)
    for session in await open_sessions(ctx.db, pull_id):
        count += await ctx.jobs.cancel(turn_key(session.id))
    return count


async def close_pull(ctx: Context, pull_id: int) -> None:
    """PR closed: cancel its review, end its sessions, and queue removal of its worktrees."""
    await ctx.jobs.cancel(review_key(pull_id))
    await state.cancel_pull(ctx.db, pull_id, "cancelled: PR closed")
    await end_sessions(ctx, pull_id)
    await ctx.jobs.enqueue(
        "cleanup_pull", f"cleanup:{pull_id}", {"pull_id": pull_id}, queue=REVIEWS
    )


async def end_sessions(ctx: Context, pull_id: int, *, keep_review: int | None = None) -> None:
    """End the PR's conversations (but those of `keep_review`), their queued and running
    turns first, so no late turn of an old draft can touch the PR again."""
    for session in await open_sessions(ctx.db, pull_id):
        if keep_review is None or session.review_id != keep_review:
            await ctx.jobs.cancel(turn_key(session.id))
    await end_pull_sessions(ctx.db, pull_id, keep_review=keep_review)


async def forget_installation(ctx: Context, installation_id: int) -> None:
    """App uninstalled: cancel its work, delete its rows, and queue removal of its mirrors."""
    rows = await ctx.db.fetchall(
        "SELECT id FROM pulls WHERE installation_id = ?", (installation_id,)
    )
    for row in rows:
        await ctx.jobs.cancel(review_key(row["id"]))
        await end_sessions(ctx, row["id"])
    await delete_installation_sessions(ctx.db, installation_id)
    repos = await delete_installation(ctx.db, installation_id)
    ctx.github.forget_installation(installation_id)
    await ctx.jobs.enqueue(
        "cleanup_installation",
        f"cleanup-installation:{installation_id}",
        {"installation_id": installation_id, "repos": repos},
        queue=REVIEWS,
    )


async def prepare_worktree(ctx: Context, pull: sqlite3.Row, head_sha: str, name: str) -> Worktree:
    """Fetch the base branch and `refs/pull/N/head` into the mirror; add the review's tree."""
    clone_url = pull["clone_url"]
    installation = pull["installation_id"]
    token_source = None
    if clone_url.startswith("https://") and installation:

        async def token_source() -> str:  # the mirror fetches blobs as the review reads them
            return await ctx.github.installation_token(installation)

    base = f"refs/heads/{pull['base_ref']}"
    await ctx.mirrors.sync(
        pull["repo"],
        clone_url,
        [base, f"refs/pull/{pull['number']}/head"],
        await token_source() if token_source else None,
    )
    return await ctx.mirrors.add_worktree(
        pull["repo"], name=name, head_sha=head_sha, base_ref=base, token=token_source
    )


class TakenOver(Exception):
    """Another attempt of the job owns the review's run now: this one must change nothing."""


@dataclass
class Progress:
    """Counts tool calls and edits the status comment now and then (not on every call)."""

    ctx: Context
    publisher: Publisher
    review_id: int
    owner: str
    calls: int = 0
    last: float = field(default_factory=time.monotonic)  # the start was just shown
    phase: str = "reviewing"

    async def __call__(self, _tool: str) -> None:
        self.calls += 1
        if time.monotonic() - self.last < PROGRESS_EVERY:
            return
        self.last = time.monotonic()
        try:  # progress is shown when it can be: a hiccup here never fails the review
            if not await state.owns_run(self.ctx.db, self.review_id, self.owner):
                return
            progress = f"{self.phase}: {self.calls} tool call(s) so far"
            await update_review(self.ctx.db, self.review_id, progress=progress)
            await self.publisher.status(await get_review(self.ctx.db, self.review_id))
        except (gidgethub.GitHubException, sqlite3.Error):
            log.warning("progress update failed", exc_info=True)


async def run_review_job(ctx: Context, job: Job) -> None:
    review = await get_review(ctx.db, job.payload["review_id"])
    if review is None or review["state"] not in state.ACTIVE:
        return
    pull = await pull_by_id(ctx.db, review["pull_id"])
    if pull is None or pull["state"] != "open":
        await state.cancel(ctx.db, review["id"], "PR is closed")
        return
    with log_context(repo=pull["repo"], pr=pull["number"], review=review["id"]):
        gh = ctx.github.installation_api(pull["installation_id"])
        config = job.payload.get("config")
        if config is not None:
            known = RepoConfig.from_payload(config)
        else:
            owner, name = pull["repo"].split("/", 1)
            known = await fetch_repo_config(gh, owner, name)
        verify = bool(job.payload.get("verify")) or known.verify
        final = job.attempts >= job.max_attempts
        await ReviewJob(
            ctx,
            Publisher(ctx, gh, pull),
            pull,
            review["id"],
            verify,
            final_attempt=final,
            owner=f"{job.id}:{job.attempts}",
        ).run(known)


@dataclass
class ReviewJob:
    ctx: Context
    publisher: Publisher
    pull: sqlite3.Row
    review_id: int
    verify: bool = False
    final_attempt: bool = True  # else a GitHub hiccup is retried by the queue, not reported
    owner: str = ""  # the job attempt running it (see `state.take_run`)

    async def run(self, config: RepoConfig) -> None:
        why_not = await self._why_not_now()
        if why_not is not None:
            await self._held(why_not)
            return
        ctx = self.ctx
        if not await state.take_run(ctx.db, self.review_id, self.owner, config_error=config.error):
            return  # superseded or stopped before it started
        try:
            review = await get_review(self.ctx.db, self.review_id)
            await self.publisher.status(review)
            await self.publisher.start_check(review)
            await self._review(review, config)
        except TakenOver:
            log.warning("review run taken over by a later attempt: this one changes nothing")
        except asyncio.CancelledError:
            if not self.ctx.jobs.interrupted():  # an interrupted job runs again: state stays
                await self._stopped()
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
                await self._failed(INTERNAL_ERROR)
                return
            await self._failed(describe(exc))

    async def _review(self, review: sqlite3.Row, config: RepoConfig) -> None:
        ctx, review_id = self.ctx, self.review_id
        name = worktree_name(self.pull, review_id)
        tree = await prepare_worktree(ctx, self.pull, review["head_sha"], name)
        await update_review(ctx.db, review_id, base_sha=tree.base_sha)

        async def planned(skipped: tuple[tuple[str, str], ...]) -> None:
            await update_review(
                ctx.db, review_id, not_reviewed=json.dumps(skipped), progress="reviewing"
            )

        request = ReviewRequest(
            repo=self.pull["repo"],
            number=self.pull["number"],
            title=self.pull["title"],
            body=self.pull["body"],
            base_ref=self.pull["base_ref"],
            provider=review["provider"],
            config=config,
            pull_id=self.pull["id"],
            review_id=review_id,
        )
        reviewer = Reviewer(ctx.db, ctx.models, Budget.from_settings(ctx.settings), ctx.metrics)
        progress = Progress(ctx, self.publisher, review_id, self.owner)
        draft = await review_worktree(
            reviewer, tree, request, on_tool_call=progress, on_plan=planned
        )
        findings, verified = draft.findings, {}
        if self.verify and findings:
            provider = choose_provider(
                request.provider,
                config.verify_provider,
                ctx.models.available(),
            )
            progress.phase = f"verifying {len(findings)} finding(s) with {provider}"
            await update_review(ctx.db, review_id, progress=progress.phase)
            verification = await verify_draft(
                reviewer, tree, request, draft, provider=provider, on_tool_call=progress
            )
            findings = apply_verification(findings, verification)
            verified = {"verify_provider": provider, "verify_error": verification.error}
            if verification.error:
                log.warning("verify pass failed", extra={"fields": {"reason": verification.error}})
        if not await state.owns_run(ctx.db, review_id, self.owner):
            raise TakenOver
        current = await get_review(ctx.db, review_id)
        if current is None or current["state"] != state.RUNNING:
            # Superseded or stopped while the model worked; the cancellation may still be on
            # its way from another process: publish nothing for an older head.
            raise asyncio.CancelledError
        await state.set_findings(ctx.db, review_id, findings)
        await update_review(
            ctx.db,
            review_id,
            verdict=draft.verdict,
            summary=draft.summary,
            run_id=draft.run_id,
            skill_version_id=draft.skill_version_id,
            progress="publishing",
            **verified,
        )
        if not await state.owns_run(ctx.db, review_id, self.owner):
            raise TakenOver
        await self.publisher.pending_review(await get_review(ctx.db, review_id))
        pull = await pull_by_id(ctx.db, self.pull["id"])
        moved = pull is not None and pull["head_sha"] != review["head_sha"]
        drafted = await state.end_run(  # a push may have landed meanwhile: stale
            ctx.db, review_id, self.owner, state.DRAFT, progress="draft ready", stale=int(moved)
        )
        if not drafted:
            raise TakenOver
        await end_sessions(ctx, self.pull["id"], keep_review=review_id)  # the old drafts' talk
        review = await get_review(ctx.db, review_id)
        await self.publisher.finish_check(review)
        await self.publisher.status(review)

    async def _why_not_now(self) -> str | None:
        """Why no review may start now, whoever asked: disk below its watermark, or the
        installation's model budget for the day spent."""
        settings, prefix = self.ctx.settings, self.ctx.settings.command_prefix
        space = disk(settings)
        if space.low:
            return held_text("disk", free_mb=space.free_mb, min_mb=space.min_mb, prefix=prefix)
        spent = await budget_used_up(
            settings, self.ctx.db, self.pull["installation_id"], time.time()
        )
        if spent is not None:
            return held_text("budget", spent=spent.describe(settings), prefix=prefix)
        return None

    async def _held(self, why: str) -> None:
        log.warning("review not started", extra={"fields": {"reason": why}})
        if await state.hold(self.ctx.db, self.review_id, why):
            await self.publisher.status(await get_review(self.ctx.db, self.review_id))

    async def _ours(self, to: str, **fields: Any) -> bool:
        """End the run as `to`; True when this attempt did, or when a person or a newer
        review stopped the run this attempt still owns (its end is then this attempt's to
        show). False when another attempt took the run over, or it ended otherwise (failed for
        good elsewhere): whoever ended it shows that end."""
        ctx = self.ctx
        if await state.end_run(ctx.db, self.review_id, self.owner, to, **fields):
            return True
        review = await get_review(ctx.db, self.review_id)
        return (
            review is not None
            and review["run_owner"] == self.owner
            and review["state"] in (state.CANCELLED, state.SUPERSEDED)
        )

    async def _failed(self, reason: str) -> None:
        log.warning("review failed", extra={"fields": {"reason": reason}})
        if not await self._ours(state.FAILED, error=reason, progress="failed"):
            log.warning("review run ended elsewhere: this failure is not shown")
            return
        await end_review_sessions(self.ctx.db, self.review_id)
        review = await get_review(self.ctx.db, self.review_id)
        try:
            if not review["check_run_id"]:  # it failed before its check run was made
                await self.publisher.start_check(review)
                review = await get_review(self.ctx.db, self.review_id)
            await self.publisher.finish_check(review, conclusion="failure", error=reason)
        except gidgethub.GitHubException:
            log.exception("could not report the failure on the check run")
        try:
            await self.publisher.status(review)
        except gidgethub.GitHubException:
            log.exception("could not report the failure on the status comment")

    async def _stopped(self) -> None:
        if not await self._ours(state.CANCELLED, progress="stopped before it finished"):
            log.warning("review run ended elsewhere: this stop is not shown")
            return
        await end_review_sessions(self.ctx.db, self.review_id)
        review = await get_review(self.ctx.db, self.review_id)
        try:
            await self.publisher.finish_check(
                review, conclusion="cancelled", stopped=review["progress"] or "stopped"
            )
            if review["state"] == state.CANCELLED:
                await self.publisher.status(review)
        except gidgethub.GitHubException:
            log.exception("could not report the stop on GitHub")


def describe(exc: Exception) -> str:
    """A failure as people on the PR are told it (no internals)."""
    if isinstance(exc, gidgethub.HTTPException):
        return f"GitHub answered {int(exc.status_code)} ({exc})"
    if isinstance(exc, OSError):
        return f"a local error occurred ({exc.__class__.__name__})"
    return str(exc)


async def refresh_status_job(ctx: Context, job: Job) -> None:
    """Re-render the PR's status comment (and the check run of a stale draft)."""
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    review = await latest_review(ctx.db, job.payload["pull_id"]) if pull else None
    if pull is None or review is None:
        return
    publisher = Publisher(ctx, ctx.github.installation_api(pull["installation_id"]), pull)
    await publisher.status(review)
    if review["stale"] and review["state"] == state.DRAFT:
        await publisher.finish_check(review, with_annotations=False)


async def review_gave_up(ctx: Context, job: Job, reason: str) -> None:
    """A review job failed for good without reporting it (e.g. it took the process down at
    every attempt): the review fails with the reason, and a job says so on the PR."""
    review = await get_review(ctx.db, job.payload["review_id"])
    if review is None or not await state.fail(ctx.db, review["id"], GAVE_UP.format(reason=reason)):
        return  # it reported its own end already
    await ctx.jobs.enqueue(
        "report_failure", f"status:{review['pull_id']}", {"review_id": review["id"]}, queue=REVIEWS
    )


async def report_failure_job(ctx: Context, job: Job) -> None:
    """Show a failed review on the PR: check run `failure` and the status comment."""
    review = await get_review(ctx.db, job.payload["review_id"])
    pull = await pull_by_id(ctx.db, review["pull_id"]) if review else None
    if review is None or pull is None or review["state"] != state.FAILED:
        return
    publisher = Publisher(ctx, ctx.github.installation_api(pull["installation_id"]), pull)
    if not review["check_run_id"]:  # it failed before its check run was made
        await publisher.start_check(review)
        review = await get_review(ctx.db, review["id"])
    await publisher.finish_check(review, conclusion="failure", error=review["error"])
    await publisher.status(review)


async def cleanup_pull_job(ctx: Context, job: Job) -> None:
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    if pull is None:
        return
    rows = await ctx.db.fetchall(
        "SELECT r.id AS review_id, s.id AS session_id FROM reviews r"
        " LEFT JOIN sessions s ON s.review_id = r.id WHERE r.pull_id = ?",
        (pull["id"],),
    )
    names = {worktree_name(pull, row["review_id"]) for row in rows} | {
        worktree_name(pull, row["review_id"], row["session_id"])
        for row in rows
        if row["session_id"] is not None
    }
    for name in sorted(names):
        await ctx.mirrors.remove_worktree(pull["repo"], ctx.mirrors.tree_path(name))
    current = await pull_by_id(ctx.db, pull["id"])
    if current is not None and current["state"] == "closed":  # not reopened meanwhile
        await ctx.mirrors.drop_pull_refs(pull["repo"], [pull["number"]])
