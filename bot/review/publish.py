"""The draft on GitHub: status comment, check run, review threads and the pending review."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.catalog import suggested
from bot.github import github_transient
from bot.records.pulls import pull_by_id
from bot.records.reviews import (
    get_review,
    latest_draft,
    latest_review,
    load_findings,
    status_comment_of,
    update_review,
)
from bot.records.runs import review_costs
from bot.records.sessions import has_active_cross_review
from bot.records.types import Finding, Job, Pull, Review
from bot.records.vocab import ACTIVE, FindingState, ReviewState, Severity
from bot.redaction import redact
from bot.review.rules import DraftRules
from bot.texts import PEOPLE, STATUS_MARKER, fit, neutralise_mentions, render, repo_url_of, say, usd

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

CHECK_NAME = "PR Cockpit"
ANNOTATION_BATCH = 50
LEVELS = {Severity.CRITICAL: "failure", Severity.MAJOR: "warning"}  # annotations; else notice


def refs(ordinals: list[int]) -> str:
    return ", ".join(f"F{n}" for n in ordinals) or "none"


def where(finding: Finding) -> str:
    return finding.path + (f":{finding.line}" if finding.line else "")


def revision_note(stored: str | None) -> dict[str, Any] | None:
    if not stored:
        return None
    note = json.loads(stored)
    lists = ("kept", "added", "withdrawn", "dropped")
    return {**note, **{k: refs(note.get(k, [])) for k in lists}}


def ledger_note(stored: str | None) -> dict[str, Any] | None:
    if not stored:
        return None
    note = json.loads(stored)
    lists = (
        "new", "open", "published", "fixed", "dropped", "fixed_published", "unconfirmed", "not_open"
    )  # fmt: skip
    older = {"resolve_error": None, "unconfirmed": [], "not_open": []}  # notes stored before
    return {**older, **note, **{f"{k}_refs": refs(note.get(k, [])) for k in lists}}


# A PR's review threads with their first comments (a page of 100 threads).
THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { id isResolved comments(first: 20) { nodes { body author { __typename login } } } }
      }
    }
  }
}"""
RESOLVE_MUTATION = """
mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } } }"""
THREAD_PAGES = 10
_INLINE_NUMBER = re.compile(r"\*\*F(\d+) ·")  # how templates/inline_comment.md.j2 begins


def _account(author: Any) -> tuple[str, str] | None:
    if not isinstance(author, dict) or not isinstance(author.get("login"), str):
        return None
    return str(author.get("__typename") or ""), author["login"]


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Publisher:
    ctx: Context
    gh: Any
    pull: Pull

    @property
    def repo_url(self) -> str | None:
        """The repository's page on GitHub: the one place model text may link to."""
        return repo_url_of(self.pull.html_url)

    @property
    def owner_repo(self) -> dict[str, Any]:
        owner, name = self.pull.repo.split("/", 1)
        return {"owner": owner, "repo": name, "number": self.pull.number}

    async def comment(self, body: str) -> int:
        created = await self.gh.post(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            self.owner_repo,
            data={"body": fit(redact(body))},
        )
        return int(created["id"])

    def status_link(self, review: Review) -> str | None:
        if not (self.pull.html_url and review.status_comment_id):
            return None
        return f"{self.pull.html_url}#issuecomment-{review.status_comment_id}"

    async def status(self, review: Review) -> int:
        body = fit(redact(await self.render_status(review)))
        comment_id = review.status_comment_id or await self._find_status_comment()
        if comment_id:
            try:
                await self.gh.patch(
                    "/repos/{owner}/{repo}/issues/comments/{id}",
                    {**self.owner_repo, "id": comment_id},
                    data={"body": body},
                )
            except gidgethub.BadRequest as exc:
                if int(exc.status_code) != 404:
                    raise
                comment_id = None  # someone deleted it: start a new one
        if not comment_id:
            comment_id = await self.comment(body)
        if review.status_comment_id != comment_id:
            await update_review(self.ctx.db, review.id, status_comment_id=comment_id)
        return int(comment_id)

    async def _find_status_comment(self) -> int | None:
        known = await status_comment_of(self.ctx.db, self.pull.id)
        if known:
            return known
        login = await self.ctx.github.bot_login()
        async for comment in self.gh.getiter(
            "/repos/{owner}/{repo}/issues/{number}/comments", self.owner_repo
        ):
            if (
                STATUS_MARKER in (comment.get("body") or "")
                and (comment.get("user") or {}).get("login") == login
            ):
                return int(comment["id"])
        return None

    async def render_status(self, review: Review) -> str:
        db = self.ctx.db
        findings = await load_findings(db, review.id)
        rules = DraftRules.from_json(review.rules)
        costs = await review_costs(db, review.id)
        stale_sha = None
        if review.state in ACTIVE:
            previous = await latest_draft(db, self.pull.id)
            if previous is not None and previous.stale:
                stale_sha = previous.head_sha[:7]
        cost_line = " · ".join(
            f"{provider}: {runs} model run(s), {usd(cost)}" for provider, runs, cost in costs
        )
        return render(
            "status.md.j2",
            headline=say(PEOPLE, "headline", state=review.state),
            state=review.state,
            progress=review.progress or review.state,
            short_sha=review.head_sha[:7],
            provider=review.provider,
            error=review.error,
            stale=bool(review.stale),
            stale_sha=stale_sha,
            verdict=review.verdict,
            summary=review.summary,
            posted_by=review.posted_by,
            posted_event=review.posted_event,
            findings=[self._finding_view(f, review) for f in findings if not rules.folds(f)],
            not_reviewed=[tuple(x) for x in json.loads(review.not_reviewed or "[]")],
            config_error=review.config_error,
            revision=review.revision,
            revision_note=revision_note(review.revision_note),
            ledger=ledger_note(review.ledger),
            verify_provider=review.verify_provider,
            verify_error=review.verify_error,
            cost_line=cost_line,
            commands=suggested(
                review.state, bool(review.stale), await has_active_cross_review(db, review.id)
            ),
            prefix=self.ctx.settings.command_prefix,
            repo_url=self.repo_url,
            # The rules the draft was made under (templates/status_rules.md.j2): the team's
            # instructions, folded minor findings, the inline cap, noise left out.
            rules=rules,
            minor=[self._finding_view(f, review) for f in findings if rules.folds(f)],
            capped=refs(sorted(rules.over_cap(rules.approvable(findings)))),
        )

    def _finding_view(self, finding: Finding, review: Review) -> dict[str, Any]:
        link = None
        if self.pull.html_url and finding.line:
            anchor = hashlib.sha256(finding.path.encode()).hexdigest()
            side = "L" if finding.side == "LEFT" else "R"
            link = f"{self.pull.html_url}/files#diff-{anchor}{side}{finding.line}"
        return {
            "ordinal": finding.ordinal,
            "severity": finding.severity,
            "where": where(finding),
            "link": link,
            "title": finding.title,
            "state": finding.state,
            "checked_by": finding.checked_by,
            "dropped_by": finding.dropped_by,
            "verify_status": finding.verify_status,
            "verify_note": finding.verify_note,
            "verifier": review.verify_provider,
        }

    async def _app_account(self) -> tuple[str, str]:
        """The App's bot account as GraphQL names an author: (`__typename`, login). REST's
        `<slug>[bot]` is GraphQL's `Bot` of login `<slug>`; a person, or another App, whose
        login reads the same is another account."""
        return "Bot", (await self.ctx.github.bot_login()).removesuffix("[bot]")

    async def _finding_threads(self, wanted: set[int]) -> list[tuple[int, Thread]]:
        """The bot's review threads of these findings: (F number, thread). Only a thread the
        App's bot account started is its own: one a person (or another bot) started with the
        same words is not."""
        app = await self._app_account()
        owner, name = self.pull.repo.split("/", 1)
        found, after = [], None
        for _page in range(THREAD_PAGES):
            data = await self.gh.graphql(
                THREADS_QUERY, owner=owner, name=name, number=self.pull.number, after=after
            )
            threads, after = threads_page(data)
            for thread in threads:
                account, body = thread.comments[0] if thread.comments else (None, "")
                number = _INLINE_NUMBER.match(body)
                if account == app and number is not None and int(number.group(1)) in wanted:
                    found.append((int(number.group(1)), thread))
            if after is None:
                break
        return found

    async def thread_replies(self, ordinals: list[int]) -> dict[int, list[str]]:
        """What people replied in the review threads of these (published) findings, oldest
        first, for the reviewer's ledger; nothing when GitHub does not tell (logged)."""
        if not ordinals:
            return {}
        app = await self._app_account()
        try:
            threads = await self._finding_threads(set(ordinals))
        except Exception as exc:
            if not _github_said_no(exc):
                raise
            log.warning("thread replies not read", extra={"fields": {"error": str(exc)}})
            return {}
        replies: dict[int, list[str]] = {}
        for number, thread in threads:
            for account, body in thread.comments[1:]:
                if account and account != app and body:
                    replies.setdefault(number, []).append(f"{account[1]}: {body}")
        return replies

    async def resolve_threads(self, ordinals: list[int]) -> str | None:
        """Resolve the bot's review threads of these (fixed) findings; None when done, else
        why GitHub refused (the App lacks the permission, …), to show on the PR."""
        try:
            threads = await self._finding_threads(set(ordinals))
            for _number, thread in threads:
                if not thread.resolved:
                    await self.gh.graphql(RESOLVE_MUTATION, id=thread.id)
        except UnexpectedAnswer as exc:  # no refusal: no permission would change it
            log.warning("review threads not resolved", extra={"fields": {"missing": exc.missing}})
            return say(PEOPLE, "resolve_unanswered", missing=exc.missing)
        except Exception as exc:
            if not _github_said_no(exc):
                raise
            log.warning("review threads not resolved", extra={"fields": {"error": str(exc)}})
            said = redact(str(exc))[:200] or exc.__class__.__name__
            return say(PEOPLE, "resolve_refused", error=said)
        return None

    async def start_check(self, review: Review) -> Review:
        if review.check_run_id:  # a retried or recovered job: reuse its check run
            await self.gh.patch(
                "/repos/{owner}/{repo}/check-runs/{id}",
                {**self.owner_repo, "id": review.check_run_id},
                data={"status": "in_progress"},
            )
            return review
        created = await self.gh.post(
            "/repos/{owner}/{repo}/check-runs",
            self.owner_repo,
            data={
                "name": CHECK_NAME,
                "head_sha": review.head_sha,
                "status": "in_progress",
                "started_at": _now(),
                "external_id": str(review.id),
                "output": {
                    "title": say(PEOPLE, "check_title", state="running", count=0),
                    "summary": say(PEOPLE, "check_preparing"),
                },
            },
        )
        return await update_review(self.ctx.db, review.id, check_run_id=created["id"]) or review

    async def finish_check(
        self,
        review: Review,
        *,
        conclusion: str = "neutral",
        error: str | None = None,
        stopped: str | None = None,
        with_annotations: bool = True,
    ) -> None:
        """Complete the check run. GitHub appends annotations on every update, so they are
        sent once, when the draft is first finished (`with_annotations=False` after that)."""
        if not review.check_run_id:
            return
        rules = DraftRules.from_json(review.rules)
        findings = [
            f
            for f in await load_findings(self.ctx.db, review.id)
            if f.state == FindingState.KEPT and not rules.folds(f)
        ]
        verifier = review.verify_provider
        annotations = (
            [_annotation(f, verifier) for f in findings if f.line] if with_annotations else []
        )
        summary = fit(
            redact(
                render(
                    "check_run.md.j2",
                    stopped=stopped,
                    error=error,
                    verdict=review.verdict,
                    summary=review.summary,
                    findings=findings,
                    stale=bool(review.stale),
                    repo_url=self.repo_url,
                    verifier=verifier,
                    verify_error=review.verify_error,
                )
            ),
            65_000,
        )
        shown = (
            "stopped" if stopped else "failed" if error else "stale" if review.stale else "draft"
        )
        title = say(PEOPLE, "check_title", state=shown, count=len(findings))
        url = "/repos/{owner}/{repo}/check-runs/{id}"
        params = {**self.owner_repo, "id": review.check_run_id}
        batches = [
            annotations[n : n + ANNOTATION_BATCH]
            for n in range(0, len(annotations), ANNOTATION_BATCH)
        ] or [[]]
        for index, batch in enumerate(batches):
            data: dict[str, Any] = {
                "output": {"title": title, "summary": summary, "annotations": batch}
            }
            if index == len(batches) - 1:
                data.update(status="completed", conclusion=conclusion, completed_at=_now())
            await self.gh.patch(url, params, data=data)

    async def new_check(self, review_id: int) -> None:
        """A new check run showing the draft as it stands now (after a revision or a drop):
        annotations cannot be withdrawn from a check run, so the old one is left behind and
        GitHub shows the newest run of the name."""
        review = await update_review(self.ctx.db, review_id, check_run_id=None)
        if review is not None:
            await self.finish_check(await self.start_check(review))

    async def delete_pending(self) -> None:
        """GitHub allows one pending review per user and PR: remove the bot's old one."""
        async for existing in self.gh.getiter(
            "/repos/{owner}/{repo}/pulls/{number}/reviews", self.owner_repo
        ):
            if existing.get("state") == "PENDING":
                await self.gh.delete(
                    "/repos/{owner}/{repo}/pulls/{number}/reviews/{id}",
                    {**self.owner_repo, "id": existing["id"]},
                )

    async def pending_review(self, review: Review, *, only: set[int] | None = None) -> int:
        """Create the pending review: inline comments where GitHub allows them, the rest in the
        body. If GitHub still refuses the inline comments (422) they move to the body: the
        draft is never lost. `only` limits it to those finding ordinals (a partial approve);
        without it, findings the verify pass refuted and those below `min_severity` stay out, as
        `approve` leaves them out. Past `max_findings`, inline ones are summarised in the body."""
        rules = DraftRules.from_json(review.rules)
        stored = await load_findings(self.ctx.db, review.id)
        if only is not None:
            findings = [f for f in stored if f.state == FindingState.KEPT and f.ordinal in only]
        else:
            findings = rules.approvable(stored)
        await self.delete_pending()
        url = "/repos/{owner}/{repo}/pulls/{number}/reviews"
        try:
            created = await self.gh.post(
                url,
                self.owner_repo,
                data=self._review_payload(review, findings, inline=True, rules=rules),
            )
        except gidgethub.BadRequest as exc:
            if int(exc.status_code) != 422:
                raise
            log.warning("GitHub refused inline comments; moving them to the review body")
            created = await self.gh.post(
                url, self.owner_repo, data=self._review_payload(review, findings, inline=False)
            )
        await update_review(self.ctx.db, review.id, pending_review_id=created["id"])
        return int(created["id"])

    def _review_payload(
        self,
        review: Review,
        findings: list[Finding],
        *,
        inline: bool,
        rules: DraftRules | None = None,
    ) -> dict[str, Any]:
        comments, other, summarised = [], [], []
        capped = rules.over_cap(findings) if rules is not None and inline else set()
        for f in findings:
            listed = {
                "ordinal": f.ordinal,
                "severity": f.severity,
                "where": where(f),
                "title": f.title,
            }
            if f.ordinal in capped:
                summarised.append(listed)
            elif inline and f.in_diff:
                comments.append(self._inline_comment(f))
            else:
                reason = say(PEOPLE, "not_inline", in_diff=f.in_diff)
                other.append({**listed, "body": f.body, "reason": reason})
        body = fit(
            render(
                "review_body.md.j2",
                provider=review.provider,
                verdict=review.verdict,
                summary=review.summary,
                other=other,
                summarised=summarised,
                max_findings=rules.max_findings if rules is not None else None,
                repo_url=self.repo_url,
            )
        )
        return {"commit_id": review.head_sha, "body": body, "comments": comments}

    def _inline_comment(self, f: Finding) -> dict[str, Any]:
        comment: dict[str, Any] = {
            "path": f.path,
            "line": f.end_line or f.line,
            "side": f.side,
            "body": fit(
                render(
                    "inline_comment.md.j2",
                    ordinal=f.ordinal,
                    severity=f.severity,
                    title=f.title,
                    body=f.body,
                    suggestion=f.suggestion if f.side == "RIGHT" else None,
                    repo_url=self.repo_url,
                )
            ),
        }
        if f.end_line:
            comment.update(start_line=f.line, start_side=f.side)
        return comment


class UnexpectedAnswer(Exception):
    """GitHub answered, but without what was asked for (a GraphQL answer whose pull request
    is null: the App no longer sees it); `missing` names the field."""

    def __init__(self, missing: str) -> None:
        super().__init__(missing)
        self.missing = missing


@dataclass(frozen=True)
class Thread:
    """A review thread as GitHub answered it: its first comments, (author, body) each; the
    author as (`__typename`, login), None for a deleted account."""

    id: str
    resolved: bool
    comments: list[tuple[tuple[str, str] | None, str]]


def threads_page(data: Any) -> tuple[list[Thread], str | None]:
    """A page of THREADS_QUERY's answer: its threads, and the cursor of the next page (None:
    the last). UnexpectedAnswer when the answer lacks what the query asked for."""
    threads = _field(data, "repository", "pullRequest", "reviewThreads")
    nodes, info = _field(threads, "nodes"), _field(threads, "pageInfo")
    if not isinstance(nodes, list):
        raise UnexpectedAnswer("reviewThreads.nodes")
    found = []
    for node in nodes:
        comments = _field(node, "comments", "nodes")
        if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
            raise UnexpectedAnswer("reviewThreads.nodes.comments.nodes")
        found.append(
            Thread(
                str(_field(node, "id")),
                bool(_field(node, "isResolved")),
                [(_account(c.get("author")), str(c.get("body") or "")) for c in comments],
            )
        )
    after = _field(info, "endCursor") if _field(info, "hasNextPage") else None
    return found, None if after is None else str(after)


def _field(data: Any, *path: str) -> Any:
    for n, name in enumerate(path, start=1):
        if not isinstance(data, dict) or name not in data:
            raise UnexpectedAnswer(".".join(path[:n]))
        data = data[name]
    return data


def _github_said_no(exc: BaseException) -> bool:
    """GitHub refused, did not answer, or answered without what was asked for: the draft
    stands, and the PR is told. Anything else is a bug of ours, and fails visibly."""
    return github_transient(exc) or isinstance(exc, gidgethub.GitHubException | UnexpectedAnswer)


def _annotation(finding: Finding, verifier: str | None) -> dict[str, Any]:
    text = render(
        "annotation.txt.j2",
        ordinal=finding.ordinal,
        severity=finding.severity,
        title=finding.title,
        body=finding.body,
        verify_status=finding.verify_status,
        verify_note=finding.verify_note,
        verifier=verifier,
    )
    title, _, message = text.partition("\n")
    return {
        "path": finding.path,
        "start_line": finding.line,
        "end_line": finding.end_line or finding.line,
        "annotation_level": LEVELS.get(finding.severity, "notice"),
        "title": neutralise_mentions(redact(title))[:255],
        "message": neutralise_mentions(redact(message.strip() or finding.title))[:64_000],
    }


async def refresh_status_job(ctx: Context, job: Job) -> None:
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    review = await latest_review(ctx.db, job.payload["pull_id"]) if pull else None
    if pull is None or review is None:
        return
    publisher = Publisher(ctx, ctx.github.installation_api(pull.installation_id), pull)
    await publisher.status(review)
    if review.stale and review.state == ReviewState.DRAFT:
        await publisher.finish_check(review, with_annotations=False)


async def report_failure_job(ctx: Context, job: Job) -> None:
    review = await get_review(ctx.db, job.payload["review_id"])
    pull = await pull_by_id(ctx.db, review.pull_id) if review else None
    if review is None or pull is None or review.state != ReviewState.FAILED:
        return
    publisher = Publisher(ctx, ctx.github.installation_api(pull.installation_id), pull)
    if not review.check_run_id:  # it failed before its check run was made
        review = await publisher.start_check(review)
    await publisher.finish_check(review, conclusion="failure", error=review.error)
    await publisher.status(review)
