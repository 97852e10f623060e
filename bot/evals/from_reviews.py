"""`cockpit eval golden-from-reviews`: a golden file drafted from this installation's reviews."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from bot.records import evals
from bot.records.database import Database
from bot.records.reviews import load_findings
from bot.records.types import Finding
from bot.records.vocab import FindingState, ReviewState
from bot.texts import OPERATOR, say

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _label(finding: Finding) -> dict[str, Any]:
    label: dict[str, Any] = {"path": finding.path}
    if finding.line:
        label["line"] = finding.line
    label["title"] = finding.title
    label["problem"] = finding.body or finding.title
    label["severity"] = finding.severity
    return label


def check_repo(repo: str) -> None:
    if not _REPO.fullmatch(repo):
        raise ValueError(say(OPERATOR, "eval.bad_option", why="repo"))


async def golden_from_reviews(db: Database, repo: str) -> dict[str, Any]:
    """The newest posted review per PR, a case at its head: published findings are labels, the
    ones a person dropped known false positives (the bot's own drops are neither)."""
    cases = []
    clone_url = None
    for review, pull in await evals.posted_reviews(db, repo, ReviewState.POSTED):
        findings = await load_findings(db, review.id)
        published = [f for f in findings if f.state == FindingState.KEPT]
        declined = [f for f in findings if f.dropped_by_person]
        clone_url = clone_url or pull.clone_url
        case: dict[str, Any] = {
            "id": f"pr-{pull.number}-r{review.id}",
            "pr": pull.number,
            "title": pull.title or "",
            "body": pull.body or "",
            "base_ref": pull.base_ref,
            "base_sha": review.base_sha,
            "head_sha": review.head_sha,
            "labels": [_label(f) for f in published],
            "known_false_positives": [_label(f) for f in declined],
        }
        if pull.html_url:
            case["url"] = pull.html_url
        if review.base_sha is None:
            case["note"] = say(OPERATOR, "eval.from_reviews", why="no_base_sha")
        cases.append(case)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    golden: dict[str, Any] = {
        "version": 1,
        "name": f"{repo} from reviews",
        "description": say(OPERATOR, "eval.from_reviews", why="description", when=when, repo=repo),
        "note": say(OPERATOR, "eval.from_reviews", why="note"),
        "cases": cases,
    }
    if clone_url:
        golden["repository"] = clone_url
    return golden
