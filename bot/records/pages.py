"""The cockpit page's queries (`bot/web/`): each bounded (a page of rows, a fixed number of
statements per view, never one per row), each narrowed to the repositories a person may see.

`repos` is the viewer's set of `owner/name` (None: every repository, for operators)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from bot.records.database import Database, marks
from bot.records.reviews import load_findings
from bot.records.types import Finding, Pull, Review
from bot.records.vocab import DRAFTED, ReviewState, SessionRole

PAGE_LIMIT = 100  # rows a page asks for at most
WEEK = 7 * 86400
DAY = 86400
RECENT = 50  # failed reviews, waiting sessions: the newest this many


class Reachable(frozenset[str]):
    """The repositories a person can reach, by name, with GitHub's ids of them: a PR is
    theirs to see when its repository has one of the names and (when its id is known) one of
    the ids, so a name taken over after a rename does not show the drafts kept under it for
    the repository that had it. A plain set of names checks names only."""

    ids: frozenset[int] = frozenset()

    def __new__(cls, names: Iterable[str], ids: Iterable[int] = ()) -> Reachable:
        made = super().__new__(cls, names)
        made.ids = frozenset(ids)
        return made


def _repo_filter(column: str, repos: Collection[str] | None) -> tuple[str, tuple[Any, ...]]:
    """`AND …` for a viewer's repositories (nothing for every repository; a viewer with none
    matches nothing): `column` is `pulls.repo` (its `repo_id` beside it) or, for a table
    without the pull's id, its `pull_id` column (`…pull_id`)."""
    if repos is None:
        return "", ()
    names = tuple(sorted(repos))
    ids = tuple(sorted(repos.ids)) if isinstance(repos, Reachable) else ()
    among = f"repo IN ({marks(names)})"
    if ids:
        among += f" AND (repo_id IS NULL OR repo_id IN ({marks(ids)}))"
    if column.endswith("pull_id"):
        return f" AND {column} IN (SELECT id FROM pulls WHERE {among})", (*names, *ids)
    alias = column.removesuffix("repo")  # "p." for "p.repo"
    return " AND " + re.sub(r"\brepo", alias + "repo", among), (*names, *ids)


def clamp(offset: int, limit: int) -> tuple[int, int]:
    return max(0, offset), min(max(1, limit), PAGE_LIMIT)


# -- the inbox ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InboxDraft:
    review_id: int
    repo: str
    number: int
    title: str | None
    html_url: str | None
    head_sha: str
    state: str
    stale: bool
    created_at: float
    vetter: str | None  # whose pending review holds it (`/cockpit vet`), not submitted yet
    critical: int
    major: int
    minor: int
    nit: int
    confirmed: int
    refuted: int
    uncertain: int


_DRAFTS = """
SELECT r.id AS review_id, p.repo, p.number, p.title, p.html_url, r.head_sha, r.state, r.stale,
    r.created_at, r.vetter,
    SUM(CASE WHEN f.state = 'kept' AND f.severity = 'critical' THEN 1 ELSE 0 END) AS critical,
    SUM(CASE WHEN f.state = 'kept' AND f.severity = 'major' THEN 1 ELSE 0 END) AS major,
    SUM(CASE WHEN f.state = 'kept' AND f.severity = 'minor' THEN 1 ELSE 0 END) AS minor,
    SUM(CASE WHEN f.state = 'kept' AND f.severity = 'nit' THEN 1 ELSE 0 END) AS nit,
    SUM(CASE WHEN f.state = 'kept' AND f.verify_status = 'confirmed' THEN 1 ELSE 0 END)
        AS confirmed,
    SUM(CASE WHEN f.state = 'kept' AND f.verify_status = 'refuted' THEN 1 ELSE 0 END) AS refuted,
    SUM(CASE WHEN f.state = 'kept' AND f.verify_status = 'uncertain' THEN 1 ELSE 0 END)
        AS uncertain
FROM (SELECT r.* FROM reviews r JOIN pulls p ON p.id = r.pull_id
    WHERE r.state IN (?, ?) AND p.state = 'open'{where}
    ORDER BY r.created_at DESC, r.id DESC LIMIT ? OFFSET ?) r
JOIN pulls p ON p.id = r.pull_id
LEFT JOIN findings f ON f.review_id = r.id
GROUP BY r.id, r.head_sha, r.state, r.stale, r.created_at, r.vetter, p.repo, p.number, p.title,
    p.html_url
ORDER BY r.created_at DESC, r.id DESC
"""
_WAITING = (ReviewState.DRAFT, ReviewState.REVISING)


async def inbox_drafts(
    db: Database, repos: Collection[str] | None, offset: int = 0, limit: int = 25
) -> tuple[list[InboxDraft], int]:
    """Drafts waiting to be vetted on open PRs, newest first, a page of them, and how many
    there are."""
    offset, limit = clamp(offset, limit)
    where, names = _repo_filter("p.repo", repos)
    rows = await db.fetchall(_DRAFTS.format(where=where), (*_WAITING, *names, limit, offset))
    total = await db.fetchone(
        "SELECT COUNT(*) AS n FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        f" WHERE r.state IN (?, ?) AND p.state = 'open'{where}",
        (*_WAITING, *names),
    )
    return [_inbox_draft(row) for row in rows], int(total["n"])


async def held_by(db: Database, login: str, repos: Collection[str] | None) -> list[InboxDraft]:
    """The drafts `login` holds as their pending review and has not submitted yet (the newest
    RECENT)."""
    where, names = _repo_filter("p.repo", repos)
    sql = _DRAFTS.format(where=" AND r.vetter = ?" + where)
    return [
        _inbox_draft(row) for row in await db.fetchall(sql, (*_WAITING, login, *names, RECENT, 0))
    ]


def _inbox_draft(row: Any) -> InboxDraft:
    return InboxDraft(
        **{k: row[k] for k in ("review_id", "repo", "number", "title", "html_url", "vetter")},
        head_sha=row["head_sha"],
        state=row["state"],
        stale=bool(row["stale"]),
        created_at=float(row["created_at"]),
        **{
            k: int(row[k] or 0)
            for k in ("critical", "major", "minor", "nit", "confirmed", "refuted", "uncertain")
        },
    )


@dataclass(frozen=True)
class FailedReview:
    review_id: int
    repo: str
    number: int
    html_url: str | None
    error: str | None
    updated_at: float


async def failed_reviews(
    db: Database, repos: Collection[str] | None, now: float | None = None
) -> list[FailedReview]:
    """Reviews that failed in the last 24 hours, newest first (RECENT at most)."""
    since = (time.time() if now is None else now) - DAY
    where, names = _repo_filter("p.repo", repos)
    rows = await db.fetchall(
        "SELECT r.id AS review_id, p.repo, p.number, p.html_url, r.error, r.updated_at"
        " FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        f" WHERE r.state = ? AND r.created_at >= ? AND r.updated_at >= ?{where}"
        " ORDER BY r.updated_at DESC, r.id DESC LIMIT ?",
        (ReviewState.FAILED, since - DAY, since, *names, RECENT),
    )
    return [
        FailedReview(
            **{k: row[k] for k in ("review_id", "repo", "number", "html_url", "error")},
            updated_at=float(row["updated_at"]),
        )
        for row in rows
    ]


@dataclass(frozen=True)
class WaitingSession:
    session_id: int
    repo: str
    number: int
    html_url: str | None
    provider: str
    title: str | None
    started_at: float


async def waiting_sessions(db: Database, repos: Collection[str] | None) -> list[WaitingSession]:
    """Cross-AI sessions under way (a reviewer waiting for the other model or a reply)."""
    where, names = _repo_filter("p.repo", repos)
    rows = await db.fetchall(
        "SELECT sr.parent_session_id AS session_id, p.repo, p.number, p.html_url,"
        " sr.child_adapter AS provider, sr.review_title AS title, sr.started_at"
        " FROM session_reviews sr JOIN sessions s ON s.id = sr.parent_session_id"
        " JOIN pulls p ON p.id = s.pull_id"
        f" WHERE sr.ended_at IS NULL{where} ORDER BY sr.started_at DESC LIMIT ?",
        (*names, RECENT),
    )
    return [
        WaitingSession(
            **{k: row[k] for k in ("session_id", "repo", "number", "html_url", "provider")},
            title=row["title"],
            started_at=float(row["started_at"]),
        )
        for row in rows
    ]


# -- one draft ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerLine:
    ordinal: int
    head_sha: str
    review_state: str
    finding: Finding
    new: bool = True  # first raised by this review (else carried from an earlier push)
    fixed_in: str | None = None  # the head that fixed it (the ledger's)


@dataclass(frozen=True)
class SessionLine:
    session_id: int
    role: str
    provider: str
    model: str
    seq: int
    message_role: str
    item: dict[str, Any]


@dataclass(frozen=True)
class RunLine:
    id: int
    kind: str
    subkind: str | None
    provider: str
    model: str
    status: str
    tool_calls: int
    cost_usd: float | None
    started_at: float
    finished_at: float | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    repo: str | None = None
    number: int | None = None


@dataclass(frozen=True)
class DraftPage:
    pull: Pull
    review: Review | None
    findings: list[Finding]
    ledger: list[LedgerLine]  # every finding of the PR's drafts, oldest review first
    messages: list[SessionLine]  # the PR's cross-review sessions' messages, in order
    runs: list[RunLine]


MESSAGES_SHOWN = 200
RUNS_SHOWN = 100
LEDGER_SHOWN = 500

_RUN = """
SELECT u.id, u.kind, u.subkind, u.provider, u.model, u.status, u.tool_calls, u.cost_usd,
    u.started_at, u.finished_at,
    (SELECT COALESCE(SUM(x.input_tokens), 0) FROM run_usage x WHERE x.run_id = u.id)
        AS input_tokens,
    (SELECT COALESCE(SUM(x.output_tokens), 0) FROM run_usage x WHERE x.run_id = u.id)
        AS output_tokens,
    (SELECT COALESCE(SUM(x.cache_read_tokens), 0) FROM run_usage x WHERE x.run_id = u.id)
        AS cache_read_tokens
"""


def _run(row: Any, with_pull: bool = False) -> RunLine:
    return RunLine(
        id=int(row["id"]),
        kind=row["kind"],
        subkind=row["subkind"],
        provider=row["provider"],
        model=row["model"],
        status=row["status"],
        tool_calls=int(row["tool_calls"] or 0),
        cost_usd=None if row["cost_usd"] is None else float(row["cost_usd"]),
        started_at=float(row["started_at"]),
        finished_at=None if row["finished_at"] is None else float(row["finished_at"]),
        input_tokens=int(row["input_tokens"]),
        output_tokens=int(row["output_tokens"]),
        cache_read_tokens=int(row["cache_read_tokens"]),
        repo=row["repo"] if with_pull else None,
        number=row["number"] if with_pull else None,
    )


async def draft_page(db: Database, repo: str, number: int) -> DraftPage | None:
    """A PR's newest draft (or newest review when none drafted), its findings, the ledger's
    history, its cross-review messages and its runs: six statements whatever the PR holds."""
    pull = await Pull.one(db, "SELECT * FROM pulls WHERE repo = ? AND number = ?", (repo, number))
    if pull is None:
        return None
    review = await Review.one(
        db,
        "SELECT * FROM reviews WHERE pull_id = ?"
        f" ORDER BY CASE WHEN state IN ({marks(DRAFTED)}) THEN 0 ELSE 1 END, id DESC LIMIT 1",
        (pull.id, *DRAFTED),
    )
    findings = await load_findings(db, review.id) if review else []
    rows = await db.fetchall(
        "SELECT f.*, r.state AS review_state, r.head_sha AS review_head,"
        " l.first_review_id, l.fixed_in FROM findings f"
        " JOIN reviews r ON r.id = f.review_id"
        " LEFT JOIN ledger l ON l.pull_id = r.pull_id AND l.ordinal = f.ordinal"
        f" WHERE r.pull_id = ? AND r.state IN ({marks(DRAFTED)})"
        " ORDER BY r.id, f.ordinal LIMIT ?",
        (pull.id, *DRAFTED, LEDGER_SHOWN),
    )
    ledger = [
        LedgerLine(
            int(row["ordinal"]),
            row["review_head"],
            row["review_state"],
            Finding.from_row(row),
            new=row["first_review_id"] is None or row["first_review_id"] == row["review_id"],
            fixed_in=row["fixed_in"],
        )
        for row in rows
    ]
    rows = await db.fetchall(
        "SELECT s.id AS session_id, s.role AS session_role, s.provider, s.model, m.seq,"
        " m.role, m.content FROM sessions s JOIN messages m ON m.session_id = s.id"
        " WHERE s.pull_id = ? AND s.role = ? ORDER BY s.id, m.seq LIMIT ?",
        (pull.id, SessionRole.CHILD, MESSAGES_SHOWN),
    )
    messages = [
        SessionLine(
            int(row["session_id"]),
            row["session_role"],
            row["provider"],
            row["model"],
            int(row["seq"]),
            row["role"],
            json.loads(row["content"]),
        )
        for row in rows
    ]
    rows = await db.fetchall(
        _RUN + " FROM runs u WHERE u.review_id IN (SELECT id FROM reviews WHERE pull_id = ?)"
        " OR u.session_id IN (SELECT id FROM sessions WHERE pull_id = ?)"
        " ORDER BY u.id DESC LIMIT ?",
        (pull.id, pull.id, RUNS_SHOWN),
    )
    return DraftPage(pull, review, findings, ledger, messages, [_run(row) for row in rows])


# -- the figures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Week:
    start: float  # epoch seconds of the week's start (weeks counted from the epoch)
    reviews: int
    findings: int
    published: int
    dropped_by_people: int
    refuted: int
    withdrawn: int
    suppressed: int
    usd: float | None

    @property
    def acceptance(self) -> float | None:
        decided = self.published + self.dropped_by_people
        return self.published / decided if decided else None

    @property
    def findings_per_review(self) -> float | None:
        return self.findings / self.reviews if self.reviews else None

    @property
    def usd_per_accepted(self) -> float | None:
        return self.usd / self.published if self.usd is not None and self.published else None


async def weekly(
    db: Database, repos: Collection[str] | None, weeks: int = 26, now: float | None = None
) -> list[Week]:
    """The review figures (`review_figures`, kept by `bot.records.stats`) per week, the
    last `weeks` weeks, oldest first (weeks without a review left out)."""
    now = time.time() if now is None else now
    since = (int(now) // WEEK - weeks + 1) * WEEK
    where, names = _repo_filter("pull_id", repos)
    rows = await db.fetchall(
        f"SELECT CAST(created_at AS BIGINT) / {WEEK} AS week, COUNT(*) AS reviews,"
        " SUM(findings) AS findings, SUM(published) AS published,"
        " SUM(dropped_by_people) AS dropped_by_people, SUM(refuted) AS refuted,"
        " SUM(withdrawn) AS withdrawn, SUM(suppressed) AS suppressed, SUM(usd) AS usd"
        f" FROM review_figures WHERE created_at >= ?{where}"
        f" GROUP BY CAST(created_at AS BIGINT) / {WEEK} ORDER BY week",
        (since, *names),
    )
    return [
        Week(
            start=float(int(row["week"]) * WEEK),
            usd=None if row["usd"] is None else float(row["usd"]),
            **{
                k: int(row[k] or 0)
                for k in (
                    "reviews",
                    "findings",
                    "published",
                    "dropped_by_people",
                    "refuted",
                    "withdrawn",
                    "suppressed",
                )
            },
        )
        for row in rows
    ]


async def models_of(db: Database, repos: Collection[str]) -> list[Any]:
    """Per provider and model, the review figures of these repositories (`review_figures`)."""
    from bot.records.stats import ModelFigures

    where, names = _repo_filter("pull_id", repos)
    rows = await db.fetchall(
        "SELECT provider, model, COUNT(*) AS reviews, SUM(findings) AS findings,"
        " SUM(published) AS published, SUM(dropped_by_people) AS dropped_by_people,"
        " SUM(refuted) AS refuted, SUM(withdrawn) AS withdrawn, SUM(suppressed) AS suppressed,"
        " SUM(fixed_after_publishing) AS fixed_after_publishing, SUM(usd) AS usd,"
        " SUM(unpriced_runs) AS unpriced_runs, SUM(priced_runs) AS priced_runs"
        f" FROM review_figures WHERE 1 = 1{where} GROUP BY provider, model"
        " ORDER BY provider, model",
        names,
    )
    counts = (
        "reviews",
        "findings",
        "published",
        "dropped_by_people",
        "refuted",
        "withdrawn",
        "suppressed",
        "fixed_after_publishing",
        "unpriced_runs",
    )
    return [
        ModelFigures(
            provider=row["provider"],
            model=row["model"],
            usd=float(row["usd"]) if row["priced_runs"] and row["usd"] is not None else None,
            **{k: int(row[k] or 0) for k in counts},
        )
        for row in rows
    ]


async def run_list(
    db: Database, repos: Collection[str] | None, offset: int = 0, limit: int = 50
) -> tuple[list[RunLine], int]:
    """Model runs, newest first, a page of them (limit ≤ PAGE_LIMIT), and how many there
    are. For a viewer's repositories the runs are found from their PRs' reviews and sessions
    (indexes all the way), never by reading every run."""
    offset, limit = clamp(offset, limit)
    source = (
        " FROM runs u LEFT JOIN reviews r ON r.id = u.review_id"
        " LEFT JOIN sessions s ON s.id = u.session_id"
        " LEFT JOIN pulls p ON p.id = COALESCE(r.pull_id, s.pull_id)"
    )
    if repos is None:
        rows = await db.fetchall(
            _RUN + ", p.repo, p.number" + source + " ORDER BY u.id DESC LIMIT ? OFFSET ?",
            (limit, offset),
        )
        total = await db.fetchone("SELECT COUNT(*) AS n FROM runs")
        return [_run(row, with_pull=True) for row in rows], int(total["n"])
    among, names = _repo_filter("p.repo", repos)
    among = among.removeprefix(" AND ")
    # A run is its review's, or (a cross-review's, with no review) its session's.
    ids = (
        "SELECT u.id FROM runs u JOIN reviews r ON r.id = u.review_id"
        f" JOIN pulls p ON p.id = r.pull_id WHERE {among}"
        " UNION ALL SELECT u.id FROM runs u JOIN sessions s ON s.id = u.session_id"
        f" JOIN pulls p ON p.id = s.pull_id WHERE u.review_id IS NULL AND {among}"
    )
    rows = await db.fetchall(
        _RUN + ", p.repo, p.number" + source + " WHERE u.id IN (SELECT id FROM"
        f" ({ids}) v ORDER BY id DESC LIMIT ? OFFSET ?) ORDER BY u.id DESC",
        (*names, *names, limit, offset),
    )
    total = await db.fetchone(f"SELECT COUNT(*) AS n FROM ({ids}) v", (*names, *names))
    return [_run(row, with_pull=True) for row in rows], int(total["n"])


@dataclass(frozen=True)
class EvalLine:
    id: int
    golden: str
    provider: str
    model: str
    verify: bool
    judge: str | None
    status: str
    precision: float | None
    recall: float | None
    f1: float | None
    cost_usd: float | None
    started_at: float


async def eval_runs(db: Database, limit: int = 50) -> list[EvalLine]:
    """The newest eval runs with their P/R/F1 (eval runs belong to no repository)."""
    rows = await db.fetchall(
        "SELECT id, golden, provider, model, verify, judge, status, precision, recall, f1,"
        " cost_usd, started_at FROM eval_runs ORDER BY id DESC LIMIT ?",
        (min(limit, PAGE_LIMIT),),
    )
    return [
        EvalLine(
            **{k: row[k] for k in ("id", "golden", "provider", "model", "judge", "status")},
            verify=bool(row["verify"]),
            **{
                k: None if row[k] is None else float(row[k])
                for k in ("precision", "recall", "f1", "cost_usd")
            },
            started_at=float(row["started_at"]),
        )
        for row in rows
    ]
