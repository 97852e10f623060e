"""The draft's `PR Cockpit` check run, its findings as annotations."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from bot.records.reviews import load_findings, update_review
from bot.records.types import Finding, Review
from bot.records.vocab import FindingState, Severity
from bot.redaction import redact
from bot.texts import PEOPLE, fit, neutralise_mentions, render, say

if TYPE_CHECKING:
    from bot.review.target import Target

CHECK_NAME = "PR Cockpit"
ANNOTATION_BATCH = 50
LEVELS = {Severity.CRITICAL: "failure", Severity.MAJOR: "warning"}  # annotations; else notice


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def start_check(target: Target, review: Review) -> Review:
    if review.check_run_id:  # a retried or recovered job: reuse its check run
        await target.gh.patch(
            "/repos/{owner}/{repo}/check-runs/{id}",
            {**target.owner_repo, "id": review.check_run_id},
            data={"status": "in_progress"},
        )
        return review
    created = await target.gh.post(
        "/repos/{owner}/{repo}/check-runs",
        target.owner_repo,
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
    return await update_review(target.ctx.db, review.id, check_run_id=created["id"]) or review


async def finish_check(
    target,
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
    findings = [
        f
        for f in await load_findings(target.ctx.db, review.id)
        if f.state == FindingState.KEPT and not review.rules.folds(f)
    ]
    verifier = review.verify_provider
    annotations = [_annotation(f, verifier) for f in findings if f.line] if with_annotations else []
    summary = fit(
        redact(
            render(
                "check_run.md.j2",
                review=review,
                stopped=stopped,
                error=error,
                findings=findings,
                repo_url=target.repo_url,
            )
        ),
        65_000,
    )
    shown = "stopped" if stopped else "failed" if error else "stale" if review.stale else "draft"
    title = say(PEOPLE, "check_title", state=shown, count=len(findings))
    url = "/repos/{owner}/{repo}/check-runs/{id}"
    params = {**target.owner_repo, "id": review.check_run_id}
    batches = [
        annotations[n : n + ANNOTATION_BATCH] for n in range(0, len(annotations), ANNOTATION_BATCH)
    ] or [[]]
    for index, batch in enumerate(batches):
        data: dict[str, Any] = {
            "output": {"title": title, "summary": summary, "annotations": batch}
        }
        if index == len(batches) - 1:
            data.update(status="completed", conclusion=conclusion, completed_at=_now())
        await target.gh.patch(url, params, data=data)


def _annotation(finding: Finding, verifier: str | None) -> dict[str, Any]:
    text = render("annotation.txt.j2", f=finding, verifier=verifier)
    title, _, message = text.partition("\n")
    return {
        "path": finding.path,
        "start_line": finding.line,
        "end_line": finding.end_line or finding.line,
        "annotation_level": LEVELS.get(finding.severity, "notice"),
        "title": neutralise_mentions(redact(title))[:255],
        "message": neutralise_mentions(redact(message.strip() or finding.title))[:64_000],
    }
