"""`cockpit eval golden-from-reviews`: a golden file from this installation's own history.

Each published review becomes a case at the head it reviewed: the findings people published
are its labels; the ones they dropped, or left out when they approved, are recorded as known
false positives. It is a draft for a person to check, not ground truth.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from bot.review import state
from bot.storage import Database

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _label(finding: Any) -> dict[str, Any]:
    label: dict[str, Any] = {"path": finding["path"]}
    if finding["line"]:
        label["line"] = finding["line"]
    label["title"] = finding["title"]
    label["problem"] = finding["body"] or finding["title"]
    label["severity"] = finding["severity"]
    return label


def check_repo(repo: str) -> None:
    if not _REPO.fullmatch(repo):
        raise ValueError("--repo must be OWNER/NAME")


async def published_repos(db: Database) -> list[str]:
    """The repositories with at least one published review here."""
    rows = await db.fetchall(
        "SELECT DISTINCT p.repo FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        " WHERE r.state = ? ORDER BY p.repo",
        (state.POSTED,),
    )
    return [row["repo"] for row in rows]


async def golden_from_reviews(db: Database, repo: str) -> dict[str, Any]:
    """The repository's posted reviews (the newest per PR) as a golden document."""
    check_repo(repo)
    reviews = await db.fetchall(
        "SELECT r.*, p.number, p.title AS pr_title, p.body AS pr_body, p.clone_url, p.html_url,"
        " p.base_ref FROM reviews r JOIN pulls p ON p.id = r.pull_id WHERE p.repo = ? AND"
        " r.state = ? AND r.id = (SELECT MAX(id) FROM reviews WHERE pull_id = r.pull_id"
        " AND state = ?) ORDER BY p.number",
        (repo, state.POSTED, state.POSTED),
    )
    cases = []
    clone_url = None
    for review in reviews:
        findings = await db.fetchall(
            "SELECT * FROM findings WHERE review_id = ? ORDER BY ordinal", (review["id"],)
        )
        published = [f for f in findings if f["state"] == state.KEPT]
        declined = [f for f in findings if f["state"] in (state.DROPPED, state.SKIPPED)]
        clone_url = clone_url or review["clone_url"]
        case: dict[str, Any] = {
            "id": f"pr-{review['number']}-r{review['id']}",
            "pr": review["number"],
            "title": review["pr_title"] or "",
            "body": review["pr_body"] or "",
            "base_ref": review["base_ref"],
            "base_sha": review["base_sha"],
            "head_sha": review["head_sha"],
            "labels": [_label(f) for f in published],
            "known_false_positives": [_label(f) for f in declined],
        }
        if review["html_url"]:
            case["url"] = review["html_url"]
        if review["base_sha"] is None:
            case["note"] = "base sha not recorded (an older review): diffed against base_ref"
        cases.append(case)
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    golden: dict[str, Any] = {
        "version": 1,
        "name": f"{repo} from reviews",
        "description": f"Generated on {when} from PR Cockpit's published reviews of {repo}: "
        "published findings are labels, dropped or unpublished findings are known false "
        "positives.",
        "note": "Review before use: check every label, and add the issues the reviewer missed "
        "(they are not in the history).",
        "cases": cases,
    }
    if clone_url:
        golden["repository"] = clone_url
    return golden
