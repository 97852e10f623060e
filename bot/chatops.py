"""What each `/cockpit` command does. Handlers parse and gate; this module acts.

Commands that need a model only queue work (a job); the draft lifecycle commands change
the draft on GitHub directly. `approve` publishes exactly once: the draft moves
`draft → posting → posted` through a compare-and-set claim.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cachetools
import gidgethub

from bot.pulls import get_pull, upsert_pull
from bot.repo_config import PERMISSION_LEVELS, fetch_repo_config
from bot.review.publish import Publisher
from bot.reviews import (
    enqueue_review,
    get_review,
    latest_draft,
    latest_review,
    load_findings,
    review_key,
    update_review,
)
from bot.texts import render

if TYPE_CHECKING:
    from bot.context import Context
    from handlers.commands import Command

log = logging.getLogger(__name__)

WRITE_LEVELS = ("write", "maintain", "admin")
MODEL_COMMANDS = frozenset({"review", "codex-review", "ask", "send-back"})
COMMAND_HELP = {
    "help": "this list",
    "status": "refresh the status comment",
    "review [--provider claude|codex] [--verify]": "review the current head now",
    "drop F2 [F5 …]": "remove findings from the draft",
    "approve [F1 F3 …] [--request-changes | --comment]": "publish the draft (all kept "
    "findings, or only those listed)",
    "stop": "cancel the running review",
}


class CommandFailed(Exception):
    """A command could not do what was asked; the message is shown on the PR."""


@dataclass
class PullRequest:
    """The PR a comment was made on, as the command layer needs it."""

    ctx: Context
    gh: Any
    repo: dict[str, Any]
    number: int
    pull: sqlite3.Row | None
    actor: str
    installation_id: int | None = None

    @property
    def owner_repo(self) -> dict[str, Any]:
        return {
            "owner": self.repo["owner"]["login"],
            "repo": self.repo["name"],
            "number": self.number,
        }

    async def refresh(self) -> sqlite3.Row:
        """Read the PR from GitHub (a comment's payload has no head sha) and store it."""
        data = await self.gh.getitem("/repos/{owner}/{repo}/pulls/{number}", self.owner_repo)
        installation = self.installation_id or (self.pull["installation_id"] if self.pull else None)
        await upsert_pull(self.ctx.db, installation, self.repo, data)
        self.pull = await get_pull(self.ctx.db, self.repo["full_name"], self.number)
        return self.pull

    def publisher(self) -> Publisher:
        assert self.pull is not None
        return Publisher(self.ctx, self.gh, self.pull)


class Permissions:
    """Repository permission per person, cached a few minutes (author_association is a hint
    only: the collaborator permission endpoint decides)."""

    def __init__(self, ttl: float = 300.0) -> None:
        self._cache: cachetools.TTLCache = cachetools.TTLCache(maxsize=4096, ttl=ttl)

    async def level(self, gh: Any, repo: dict[str, Any], user: str) -> str:
        key = (repo["full_name"], user)
        if key not in self._cache:
            try:
                data = await gh.getitem(
                    "/repos/{owner}/{repo}/collaborators/{username}/permission",
                    {"owner": repo["owner"]["login"], "repo": repo["name"], "username": user},
                )
                # `permission` is the legacy field (maintain shows as write, triage as
                # read); `role_name` has the real level when it is a standard one.
                role = data.get("role_name")
                standard = ("read", "triage", "write", "maintain", "admin")
                self._cache[key] = role if role in standard else data.get("permission", "none")
            except gidgethub.BadRequest as exc:
                if int(exc.status_code) not in (403, 404):
                    raise
                self._cache[key] = "none"  # not a collaborator at all
        return self._cache[key]


def allowed(level: str, required: str = "write") -> bool:
    order = {name: n for n, name in enumerate(("none", "read", "triage", *PERMISSION_LEVELS))}
    return order.get(level, 0) >= order[required]


CommandFn = Callable[[PullRequest, "Command"], Awaitable[str | None]]
COMMANDS: dict[str, CommandFn] = {}


def command(name: str) -> Callable[[CommandFn], CommandFn]:
    def register(fn: CommandFn) -> CommandFn:
        COMMANDS[name] = fn
        return fn

    return register


async def reply(pr: PullRequest, kind: str, **context: Any) -> None:
    body = render("reply.md.j2", kind=kind, prefix=pr.ctx.settings.command_prefix, **context)
    await pr.gh.post(
        "/repos/{owner}/{repo}/issues/{number}/comments", pr.owner_repo, data={"body": body}
    )


async def help_text(pr: PullRequest, unknown: str | None = None) -> str:
    review = await latest_review(pr.ctx.db, pr.pull["id"]) if pr.pull else None
    state = (
        "no review yet"
        if review is None
        else f"latest review: {review['state']}" + (", stale" if review["stale"] else "")
    )
    return render(
        "reply.md.j2",
        kind="help",
        prefix=pr.ctx.settings.command_prefix,
        unknown=unknown,
        state_line=state,
        commands=list(COMMAND_HELP.items()),
    )


@command("help")
async def cmd_help(pr: PullRequest, cmd: Command) -> str | None:
    return await help_text(pr)


@command("status")
async def cmd_status(pr: PullRequest, cmd: Command) -> str | None:
    pull = pr.pull or await pr.refresh()
    review = await latest_review(pr.ctx.db, pull["id"])
    if review is None:
        raise CommandFailed("there is no review yet: run `review` to start one")
    await pr.publisher().status(review)
    return None


@command("review")
async def cmd_review(pr: PullRequest, cmd: Command) -> str | None:
    pull = await pr.refresh()
    if pull["state"] != "open":
        raise CommandFailed("this pull request is closed")
    provider = cmd.flag("provider")
    if provider not in (None, "claude", "codex"):
        raise CommandFailed("--provider must be claude or codex")
    owner, name = pull["repo"].split("/", 1)
    config = await fetch_repo_config(pr.gh, owner, name)
    provider = provider or config.provider or pr.ctx.settings.provider
    verify = bool(cmd.flag("verify")) or config.verify
    await enqueue_review(
        pr.ctx,
        pull["id"],
        pull["head_sha"],
        provider=str(provider),
        verify=verify,
        config=config,
        reason="command",
        requested_by=pr.actor,
    )
    return render(
        "reply.md.j2",
        kind="review_queued",
        short_sha=pull["head_sha"][:7],
        provider=provider,
        verify=verify,
        prefix=pr.ctx.settings.command_prefix,
    )


@command("stop")
async def cmd_stop(pr: PullRequest, cmd: Command) -> str | None:
    pull = pr.pull or await pr.refresh()
    count = await pr.ctx.jobs.cancel(review_key(pull["id"]))
    if count:
        await pr.ctx.db.execute(
            "UPDATE reviews SET state = 'cancelled', progress = ?, updated_at = ?"
            " WHERE pull_id = ? AND state = 'queued'",
            (f"stopped by {pr.actor}", time.time(), pull["id"]),
        )
    return render("reply.md.j2", kind="stopped", count=count, prefix=pr.ctx.settings.command_prefix)


async def current_draft(pr: PullRequest) -> sqlite3.Row:
    pull = pr.pull or await pr.refresh()
    review = await latest_draft(pr.ctx.db, pull["id"])
    if review is None:
        raise CommandFailed("there is no draft review on this PR yet")
    return review


def _check_refs(cmd: Command, findings: list[sqlite3.Row]) -> None:
    known = {f["ordinal"] for f in findings}
    missing = [f"F{n}" for n in cmd.findings if n not in known]
    if missing:
        raise CommandFailed(f"the draft has no {', '.join(missing)} (it has F1…F{len(known)})")


@command("drop")
async def cmd_drop(pr: PullRequest, cmd: Command) -> str | None:
    review = await current_draft(pr)
    if review["state"] != "draft":
        raise CommandFailed("the draft is already published")
    if not cmd.findings:
        raise CommandFailed("say which findings to drop, e.g. `drop F2 F5`")
    findings = await load_findings(pr.ctx.db, review["id"])
    _check_refs(cmd, findings)
    await pr.ctx.db.execute(
        f"UPDATE findings SET state = 'dropped', checked_by = 'human' WHERE review_id = ?"
        f" AND ordinal IN ({','.join('?' * len(cmd.findings))})",
        (review["id"], *cmd.findings),
    )
    publisher = pr.publisher()
    await publisher.pending_review(review)
    review = await get_review(pr.ctx.db, review["id"])
    await publisher.status(review)
    return render(
        "reply.md.j2",
        kind="dropped",
        refs=", ".join(f"F{n}" for n in cmd.findings),
        prefix=pr.ctx.settings.command_prefix,
    )


@command("approve")
async def cmd_approve(pr: PullRequest, cmd: Command) -> str | None:
    review = await current_draft(pr)
    if review["state"] in ("posting", "posted"):
        return render(
            "reply.md.j2",
            kind="already_posted",
            state=review["state"],
            prefix=pr.ctx.settings.command_prefix,
        )
    if review["stale"]:
        raise CommandFailed(
            "this draft is stale (the PR head moved since it was written); "
            f"run `{pr.ctx.settings.command_prefix} review` first"
        )
    owner, name = pr.pull["repo"].split("/", 1)
    config = await fetch_repo_config(pr.gh, owner, name)
    level = await pr.ctx.permissions.level(pr.gh, pr.repo, pr.actor)
    if not allowed(level, config.approve_permission):
        raise CommandFailed(f"publishing needs `{config.approve_permission}` permission here")
    findings = await load_findings(pr.ctx.db, review["id"])
    _check_refs(cmd, findings)
    dropped = [
        f"F{f['ordinal']}"
        for f in findings
        if f["ordinal"] in cmd.findings and f["state"] == "dropped"
    ]
    if dropped:
        raise CommandFailed(f"{', '.join(dropped)} was dropped from the draft; list kept findings")
    chosen = select_findings(findings, cmd.findings)
    event = (
        "REQUEST_CHANGES"
        if cmd.flag("request-changes")
        else "COMMENT"
        if cmd.flag("comment")
        else ("REQUEST_CHANGES" if review["verdict"] == "request_changes" else "COMMENT")
    )
    claimed = await claim_for_posting(pr.ctx, review["id"], pr.actor, event, chosen)
    if not claimed:  # someone else's approve won the race: publish once
        current = await get_review(pr.ctx.db, review["id"])
        return render(
            "reply.md.j2",
            kind="already_posted",
            state=current["state"],
            prefix=pr.ctx.settings.command_prefix,
        )
    publisher = pr.publisher()
    try:
        await publish(pr.ctx, publisher, review["id"], chosen)
    except gidgethub.GitHubException as exc:
        if await _pending_exists(
            publisher, (await get_review(pr.ctx.db, review["id"]))["pending_review_id"]
        ):
            await release_claim(pr.ctx, review["id"])  # nothing went out
            raise CommandFailed(
                f"GitHub refused to publish ({exc}); the draft is unchanged"
            ) from exc
        await queue_recovery(pr.ctx, review["id"])
        raise CommandFailed(
            f"GitHub answered with an error ({exc}) while publishing; PR "
            "Cockpit is checking what was published and will finish it"
        ) from exc
    except Exception:
        await queue_recovery(pr.ctx, review["id"])
        raise
    return render(
        "reply.md.j2",
        kind="approved",
        event=event,
        count=len(chosen),
        prefix=pr.ctx.settings.command_prefix,
    )


async def claim_for_posting(
    ctx: Context, review_id: int, actor: str, event: str, chosen: list[int]
) -> bool:
    """The compare-and-set `draft → posting`, recording who and what in the same commit
    (so a crash at any point leaves enough to finish the job exactly once)."""
    async with ctx.db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'posting', posted_by = ?, posted_event = ?,"
            " updated_at = ? WHERE id = ? AND state = 'draft'",
            (actor, event, time.time(), review_id),
        )
        if cursor.rowcount != 1:
            return False
        await conn.execute(
            "UPDATE findings SET checked_by = CASE WHEN ordinal IN"
            f" ({','.join('?' * len(chosen)) or 'NULL'}) THEN 'human' ELSE checked_by END"
            " WHERE review_id = ?",
            (*chosen, review_id),
        )
        await conn.execute(
            "UPDATE findings SET state = 'skipped' WHERE review_id = ? AND state = 'kept'"
            f" AND ordinal NOT IN ({','.join('?' * len(chosen)) or 'NULL'})",
            (review_id, *chosen),
        )
    return True


async def release_claim(ctx: Context, review_id: int) -> None:
    """Undo a claim whose publish provably did not happen: approve may run again."""
    async with ctx.db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'draft' WHERE id = ? AND state = 'posting'", (review_id,)
        )
        if cursor.rowcount == 1:
            await conn.execute(
                "UPDATE findings SET state = 'kept' WHERE review_id = ? AND state = 'skipped'",
                (review_id,),
            )


async def queue_recovery(ctx: Context, review_id: int) -> None:
    await ctx.jobs.enqueue(
        "recover_posting",
        f"posting:{review_id}",
        {"review_id": review_id},
        queue="reviews",
        supersede=True,
    )


def select_findings(findings: list[sqlite3.Row], listed: tuple[int, ...]) -> list[int]:
    """What `approve` publishes: the listed findings, or every kept one that verification
    did not refute (a refuted finding is published only when listed explicitly)."""
    if listed:
        return sorted(listed)
    return [
        f["ordinal"] for f in findings if f["state"] == "kept" and f["verify_status"] != "refuted"
    ]


async def publish(ctx: Context, publisher: Publisher, review_id: int, chosen: list[int]) -> None:
    """Submit the pending review (recreating it first when only some findings go out), then
    refresh the check run and status comment (their failures are logged, never reverted)."""
    review = await get_review(ctx.db, review_id)
    pending_id = review["pending_review_id"]
    subset = any(f["state"] == "skipped" for f in await load_findings(ctx.db, review_id))
    if subset or not await _pending_exists(publisher, pending_id):
        pending_id = await publisher.pending_review(review, only=set(chosen))
    await publisher.gh.post(
        "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}/events",
        {**publisher.owner_repo, "id": pending_id},
        data={"event": review["posted_event"]},
    )
    await update_review(ctx.db, review_id, state="posted", posted_at=time.time())
    review = await get_review(ctx.db, review_id)
    try:
        await publisher.finish_check(review, with_annotations=False)
        await publisher.status(review)
    except gidgethub.GitHubException:
        log.warning("published, but refreshing the check run or status failed", exc_info=True)


async def _pending_exists(publisher: Publisher, review_id: int | None) -> bool:
    if not review_id:
        return False
    try:
        found = await publisher.gh.getitem(
            "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
            {**publisher.owner_repo, "id": review_id},
        )
    except gidgethub.BadRequest as exc:
        if int(exc.status_code) == 404:
            return False
        raise
    return found.get("state") == "PENDING"


async def recover_posting(ctx: Context, review_id: int) -> str:
    """After a crash between the approve claim and GitHub's answer: look before retrying."""
    review = await get_review(ctx.db, review_id)
    if review is None or review["state"] != "posting":
        return "nothing to do"
    pull = await ctx.db.fetchone("SELECT * FROM pulls WHERE id = ?", (review["pull_id"],))
    publisher = Publisher(ctx, ctx.github.installation_api(pull["installation_id"]), pull)
    if review["pending_review_id"]:
        try:
            found = await publisher.gh.getitem(
                "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
                {**publisher.owner_repo, "id": review["pending_review_id"]},
            )
        except gidgethub.BadRequest as exc:
            if int(exc.status_code) != 404:
                raise
            found = None
        if found is not None and found.get("state") not in ("PENDING", None):
            await update_review(ctx.db, review_id, state="posted", posted_at=time.time())
            review = await get_review(ctx.db, review_id)
            await publisher.status(review)
            return "already published"
    findings = await load_findings(ctx.db, review_id)
    chosen = [f["ordinal"] for f in findings if f["state"] == "kept"]
    await publish(ctx, publisher, review_id, chosen)
    return "published"
