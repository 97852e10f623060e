"""The review job: worktree → agent run → findings on diff lines → the draft on GitHub."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.agents.base import AgentError, Budget
from bot.agents.loop import AgentRun
from bot.agents.submit import ReviewDraft
from bot.agents.toolbox import Toolbox
from bot.diff import DiffModel, parse_diff
from bot.logs import log_context
from bot.pulls import pull_by_id
from bot.queue import Job
from bot.repo_config import RepoConfig, fetch_repo_config
from bot.review.plan import FilePlan, place, plan_files
from bot.review.publish import Publisher
from bot.reviews import get_review, save_findings, update_review
from bot.sessions import create_session
from bot.skills import load_skill
from bot.texts import render
from bot.worktrees import GitError, Worktree

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10.0  # seconds between status-comment progress edits
MAX_DIFF_BYTES = 50 * 1024 * 1024


def worktree_name(pull: sqlite3.Row, review_id: int) -> str:
    return f"{pull['repo']}-{pull['number']}-r{review_id}"


async def prepare_worktree(
    ctx: Context, pull: sqlite3.Row, head_sha: str, review_id: int
) -> Worktree:
    """Fetch the base branch and `refs/pull/N/head` into the mirror; add the review's tree."""
    clone_url = pull["clone_url"]
    token = None
    if clone_url.startswith("https://") and pull["installation_id"]:
        token = await ctx.github.installation_token(pull["installation_id"])
    base = f"refs/heads/{pull['base_ref']}"
    await ctx.mirrors.sync(
        pull["repo"], clone_url, [base, f"refs/pull/{pull['number']}/head"], token
    )
    return await ctx.mirrors.add_worktree(
        pull["repo"], name=worktree_name(pull, review_id), head_sha=head_sha, base_ref=base
    )


async def pr_diff(tree: Worktree) -> DiffModel:
    out = await tree.git(
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "-M",
        tree.merge_base,
        tree.head_sha,
        timeout=300,
        limit=MAX_DIFF_BYTES,
    )
    return parse_diff(out.decode("utf-8", errors="replace"))


@dataclass
class Progress:
    """Counts tool calls and edits the status comment now and then (not on every call)."""

    ctx: Context
    publisher: Publisher
    review_id: int
    calls: int = 0
    last: float = field(default_factory=time.monotonic)  # the start was just shown

    async def __call__(self, _tool: str) -> None:
        self.calls += 1
        if time.monotonic() - self.last < PROGRESS_EVERY:
            return
        self.last = time.monotonic()
        await self.set(f"reviewing: {self.calls} tool call(s) so far")

    async def set(self, text: str) -> None:
        await update_review(self.ctx.db, self.review_id, progress=text)
        review = await get_review(self.ctx.db, self.review_id)
        try:
            await self.publisher.status(review)
        except gidgethub.GitHubException:
            log.warning("progress update failed", exc_info=True)


def finding_rows(draft: ReviewDraft, diff: DiffModel) -> list[dict[str, Any]]:
    """Findings as stored: inline ones carry the line(s) GitHub will accept."""
    rows = []
    for finding in draft.findings:
        placement = place(finding, diff)
        row: dict[str, Any] = {**finding.to_dict(), "in_diff": placement.inline}
        if placement.inline:
            row.update(
                line=placement.start_line or placement.line,
                side=placement.side,
                end_line=placement.line if placement.start_line else None,
            )
        rows.append(row)
    return rows


async def run_review_job(ctx: Context, job: Job) -> None:
    review = await get_review(ctx.db, job.payload["review_id"])
    if review is None or review["state"] not in ("queued", "running"):
        return
    pull = await pull_by_id(ctx.db, review["pull_id"])
    if pull is None or pull["state"] != "open":
        await update_review(ctx.db, review["id"], state="cancelled", progress="PR is closed")
        return
    with log_context(repo=pull["repo"], pr=pull["number"], review=review["id"]):
        gh = ctx.github.installation_api(pull["installation_id"])
        config = job.payload.get("config")
        known = RepoConfig.from_payload(config) if config is not None else None
        await Review(ctx, gh, pull, review["id"]).run(known)


@dataclass
class Review:
    ctx: Context
    gh: Any
    pull: sqlite3.Row
    review_id: int

    async def run(self, config: RepoConfig | None = None) -> None:
        """Review with the config the request was made under (read again if not given)."""
        ctx = self.ctx
        owner, name = self.pull["repo"].split("/", 1)
        publisher = Publisher(ctx, self.gh, self.pull)
        progress = Progress(ctx, publisher, self.review_id)
        if config is None:
            config = await fetch_repo_config(self.gh, owner, name)
        await update_review(
            ctx.db,
            self.review_id,
            state="running",
            progress="preparing the worktree",
            config_error=config.error,
        )
        review = await get_review(ctx.db, self.review_id)
        try:
            await publisher.status(review)
            await publisher.start_check(review)
            await self._review(review, config, publisher, progress)
        except asyncio.CancelledError:
            await self._stopped(publisher)
            raise
        except (AgentError, GitError, gidgethub.GitHubException, OSError) as exc:
            await self._failed(publisher, _reason(exc))
        except Exception:
            log.exception("review crashed")
            await self._failed(
                publisher, "an internal error occurred; the operator's logs have details"
            )

    async def _review(
        self, review: sqlite3.Row, config: RepoConfig, publisher: Publisher, progress: Progress
    ) -> None:
        ctx = self.ctx
        tree = await prepare_worktree(ctx, self.pull, review["head_sha"], self.review_id)
        diff = await pr_diff(tree)
        plan = plan_files(diff, config)
        await update_review(
            ctx.db, self.review_id, not_reviewed=json.dumps(plan.skipped), progress="reviewing"
        )
        if plan.reviewed:
            draft, run_id, skill_id = await self._agent(review, tree, plan, progress)
        else:
            draft = ReviewDraft(
                "Nothing to review: every changed file was left out (see below).", "comment", ()
            )
            run_id = skill_id = None
        await save_findings(ctx.db, self.review_id, finding_rows(draft, diff))
        await update_review(
            ctx.db,
            self.review_id,
            verdict=draft.verdict,
            summary=draft.summary,
            run_id=run_id,
            skill_version_id=skill_id,
            progress="publishing",
        )
        review = await get_review(ctx.db, self.review_id)
        await publisher.pending_review(review)
        pull = await pull_by_id(ctx.db, self.pull["id"])
        moved = pull is not None and pull["head_sha"] != review["head_sha"]
        await update_review(
            ctx.db, self.review_id, state="draft", progress="draft ready", stale=int(moved)
        )  # a push landed while this review ran
        review = await get_review(ctx.db, self.review_id)
        await publisher.finish_check(review)
        await publisher.status(review)

    async def _agent(
        self, review: sqlite3.Row, tree: Worktree, plan: FilePlan, progress: Progress
    ) -> tuple[ReviewDraft, int, int]:
        ctx = self.ctx
        provider = ctx.models.provider(review["provider"])
        session = await create_session(
            ctx.db,
            provider=provider.name,
            model=provider.model,
            pull_id=self.pull["id"],
            review_id=self.review_id,
        )
        skill = await load_skill(ctx.db)
        run = AgentRun(
            db=ctx.db,
            provider=provider,
            session=session,
            toolbox=Toolbox(tree, on_call=progress),
            system=skill.text,
            kind="review",
            budget=Budget(max_usd=ctx.settings.review_max_usd),
            skill_version_id=skill.id,
            review_id=self.review_id,
            metrics=ctx.metrics,
        )
        prompt = render(
            "prompts/review_request.md.j2",
            number=self.pull["number"],
            repo=self.pull["repo"],
            head_sha=tree.head_sha,
            merge_base=tree.merge_base,
            base_ref=self.pull["base_ref"],
            title=self.pull["title"],
            body=self.pull["body"],
            reviewed=plan.reviewed,
            skipped=plan.skipped,
        )
        result = await run.turn(prompt)
        assert result.draft is not None
        await ctx.db.execute("UPDATE sessions SET status = 'idle' WHERE id = ?", (session.id,))
        return result.draft, result.run_id, skill.id

    async def _failed(self, publisher: Publisher, reason: str) -> None:
        log.warning("review failed", extra={"fields": {"reason": reason}})
        await update_review(
            self.ctx.db, self.review_id, state="failed", error=reason, progress="failed"
        )
        review = await get_review(self.ctx.db, self.review_id)
        try:
            await publisher.finish_check(review, conclusion="failure", error=reason)
            await publisher.status(review)
        except gidgethub.GitHubException:
            log.exception("could not report the failure on GitHub")

    async def _stopped(self, publisher: Publisher) -> None:
        review = await get_review(self.ctx.db, self.review_id)
        if review["state"] == "running":
            await update_review(
                self.ctx.db,
                self.review_id,
                state="cancelled",
                progress="stopped before it finished",
            )
            review = await get_review(self.ctx.db, self.review_id)
        try:
            await publisher.finish_check(
                review, conclusion="cancelled", stopped=review["progress"] or "stopped"
            )
            if review["state"] == "cancelled":
                await publisher.status(review)
        except gidgethub.GitHubException:
            log.exception("could not report the stop on GitHub")


def _reason(exc: Exception) -> str:
    if isinstance(exc, gidgethub.HTTPException):
        return f"GitHub answered {int(exc.status_code)} ({exc})"
    if isinstance(exc, OSError):
        return f"a local error occurred ({exc.__class__.__name__})"
    return str(exc)
