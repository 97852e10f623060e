"""The SQL of `cockpit stats` and the review gauges of `/metrics` (see `bot.stats` for ratios)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from bot.records.database import Database
from bot.records.database import marks as _marks
from bot.records.vocab import DRAFTED, dropped_by_person

FIGURES_LOCK = "review-figures"  # one recount at a time: the sums move by differences
RECOUNT_CHUNK = 500  # stale marks taken per transaction
NANOS = 1_000_000_000  # the sums keep USD in nano-dollars

# A review is its primary session's (the newest, as `sessions.primary_of_review` reads it);
# one without a session (an older database) is its own provider's, model unknown.
_PER_REVIEW = """
SELECT r.id AS review_id, r.pull_id, p.repo, r.created_at,
    COALESCE(s.provider, r.provider, '') AS provider,
    COALESCE(s.model, '') AS model,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id) AS findings,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.state = 'kept' AND r.state = 'posted') AS published,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND {dropped_by_person}) AS dropped_by_people,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.verify_status = 'refuted') AS refuted,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.state = 'withdrawn') AS withdrawn,
    r.suppressed,
    (SELECT COUNT(*) FROM ledger l WHERE l.pull_id = r.pull_id AND l.fixed_in IS NOT NULL
        AND r.state = 'posted'
        AND EXISTS (SELECT 1 FROM findings f WHERE f.review_id = r.id
            AND f.ordinal = l.ordinal AND f.state = 'kept')
        AND NOT EXISTS (SELECT 1 FROM reviews earlier JOIN findings f
            ON f.review_id = earlier.id
            WHERE earlier.pull_id = r.pull_id AND earlier.id < r.id
            AND earlier.state = 'posted' AND f.ordinal = l.ordinal AND f.state = 'kept')
    ) AS fixed_after_publishing,
    (SELECT SUM(u.cost_usd) FROM runs u WHERE u.review_id = r.id) AS usd,
    (SELECT COUNT(u.cost_usd) FROM runs u WHERE u.review_id = r.id) AS priced_runs,
    (SELECT COUNT(*) FROM runs u WHERE u.review_id = r.id AND u.cost_usd IS NULL)
        AS unpriced_runs
FROM reviews r
JOIN pulls p ON p.id = r.pull_id
LEFT JOIN sessions s ON s.id = (SELECT MAX(id) FROM sessions
    WHERE review_id = r.id AND role = 'primary')
WHERE r.state IN ({drafted}) AND {where}
"""
# A number published by several reviews of a PR counts as fixed for the first that did.

# A review's figures, as `review_figures` keeps them (and `_PER_REVIEW` counts them).
_ROW = (
    "review_id, pull_id, repo, created_at, provider, model, findings, published,"
    " dropped_by_people, refuted, withdrawn, suppressed, fixed_after_publishing, usd,"
    " priced_runs, unpriced_runs"
)
_SUMMED = (
    "findings, published, dropped_by_people, refuted, withdrawn, suppressed,"
    " fixed_after_publishing, usd, unpriced_runs"
)
# `cockpit stats`: the reviews there are, counted now, and those retention pruned, from the
# rows that outlived them.
_PER_MODEL = """
SELECT provider, model, COUNT(*) AS reviews, SUM(findings) AS findings,
    SUM(published) AS published, SUM(dropped_by_people) AS dropped_by_people,
    SUM(refuted) AS refuted, SUM(withdrawn) AS withdrawn, SUM(suppressed) AS suppressed,
    SUM(fixed_after_publishing) AS fixed_after_publishing, SUM(usd) AS usd,
    SUM(unpriced_runs) AS unpriced_runs
FROM (
    SELECT provider, model, {summed} FROM ({per_review}) present
    UNION ALL
    SELECT provider, model, {summed} FROM review_figures f
    WHERE NOT EXISTS (SELECT 1 FROM reviews r WHERE r.id = f.review_id)
        AND f.created_at >= ? AND f.repo = COALESCE(?, f.repo)
) counted
GROUP BY provider, model
ORDER BY provider, model
"""


@dataclass(frozen=True)
class ModelFigures:
    """Sums as ints: Postgres sums integers as numerics."""

    provider: str
    model: str  # '' when no session recorded it
    reviews: int
    findings: int  # every finding their drafts raised, whatever became of it
    published: int  # kept in a posted review
    dropped_by_people: int  # `drop F…` (a person's verdict)
    refuted: int  # by the verify pass
    withdrawn: int  # by the reviewer itself in a revision
    suppressed: int  # repeats of findings people dropped, left out
    fixed_after_publishing: int  # published numbers a later push fixed
    usd: float | None  # every model run of the reviews (None: no run priced)
    unpriced_runs: int  # runs whose cost is unknown (no rate for their model)


_COUNTS = [field.name for field in fields(ModelFigures) if field.type == "int"]
# The sums `figure_totals` keeps per provider and model (`usd_nanos` and `priced_runs` give
# ModelFigures.usd).
_TOTALS = (*_COUNTS, "usd_nanos", "priced_runs")


def _per_review(where: str) -> str:
    return _PER_REVIEW.format(
        drafted=_marks(DRAFTED), dropped_by_person=dropped_by_person("f"), where=where
    )


async def model_figures(
    db: Database, *, since: float = 0.0, repo: str | None = None
) -> list[ModelFigures]:
    """Per provider and model, the reviews created since `since` of `repo` (None: every
    repository) that made a draft, pruned ones included."""
    per_review = _per_review("r.created_at >= ? AND p.repo = COALESCE(?, p.repo)")
    rows = await db.fetchall(
        _PER_MODEL.format(per_review=per_review, summed=_SUMMED),
        (*DRAFTED, since, repo, since, repo),
    )
    return [_model(row, None if row["usd"] is None else float(row["usd"])) for row in rows]


async def totals(db: Database, *, recount: int, timeout: float | None) -> list[ModelFigures]:
    """Every review's figures per provider and model, after counting again the reviews of
    PRs up to `recount` changes touched (what is left waits for the next call); statements
    still running `timeout` seconds in are stopped (`Interrupted`)."""
    async with db.transaction(lock=FIGURES_LOCK, timeout=timeout) as conn:
        await _recount(conn, recount)
        cursor = await conn.execute(
            f"SELECT provider, model, {', '.join(_TOTALS)} FROM figure_totals"
            " WHERE reviews > 0 ORDER BY provider, model"
        )
        rows = await cursor.fetchall()
    return [
        _model(row, int(row["usd_nanos"]) / NANOS if row["priced_runs"] else None) for row in rows
    ]


def _model(row: Any, usd: float | None) -> ModelFigures:
    counts = {name: int(row[name] or 0) for name in _COUNTS}
    return ModelFigures(provider=row["provider"], model=row["model"], usd=usd, **counts)


async def recount_stale(db: Database) -> int:
    """A chunk per transaction; returns how many marks were taken."""
    taken = 0
    while True:
        async with db.transaction(lock=FIGURES_LOCK) as conn:
            done = await _recount(conn, RECOUNT_CHUNK)
        if not done:
            return taken
        taken += done


async def mark_uncounted(db: Database) -> int:
    """Mark stale the PRs with a review that made a draft and has no figures yet; how many."""
    rows = await db.fetchall(
        "INSERT INTO figures_stale (pull_id) SELECT DISTINCT r.pull_id FROM reviews r"
        f" WHERE r.state IN ({_marks(DRAFTED)}) AND NOT EXISTS"
        " (SELECT 1 FROM review_figures f WHERE f.review_id = r.id) RETURNING id",
        DRAFTED,
    )
    return len(rows)


async def _recount(conn: Any, limit: int) -> int:
    """The oldest `limit` stale marks: their PRs' reviews counted again (rows of reviews
    that are gone stay as they were), the sums moved by the difference, the marks taken
    (only those read: one added meanwhile stays for the next time)."""
    cursor = await conn.execute(
        "SELECT id, pull_id FROM figures_stale ORDER BY id LIMIT ?", (limit,)
    )
    marks = await cursor.fetchall()
    if not marks:
        return 0
    pulls = sorted({int(row["pull_id"]) for row in marks})
    cursor = await conn.execute(
        f"SELECT {_ROW} FROM review_figures WHERE pull_id IN ({_marks(pulls)})"
        f" AND review_id IN (SELECT id FROM reviews WHERE pull_id IN ({_marks(pulls)}))",
        (*pulls, *pulls),
    )
    before = await cursor.fetchall()
    cursor = await conn.execute(
        f"SELECT {_ROW} FROM ({_per_review(f'r.pull_id IN ({_marks(pulls)})')}) counted",
        (*DRAFTED, *pulls),
    )
    after = await cursor.fetchall()
    if before:
        ids = [row["review_id"] for row in before]
        await conn.execute(f"DELETE FROM review_figures WHERE review_id IN ({_marks(ids)})", ids)
    if after:
        columns = _ROW.split(", ")
        await conn.executemany(
            f"INSERT INTO review_figures ({_ROW}) VALUES ({_marks(columns)})",
            [tuple(row[name] for name in columns) for row in after],
        )
    await _move_totals(conn, before, after)
    ids = [row["id"] for row in marks]
    await conn.execute(f"DELETE FROM figures_stale WHERE id IN ({_marks(ids)})", ids)
    return len(marks)


async def forget_pulls(conn: Any, pulls: str, args: Sequence[Any]) -> None:
    """The figures of the reviews of the PRs `pulls` selects taken out of the sums, and their
    rows and stale marks deleted. In the caller's transaction, under FIGURES_LOCK."""
    cursor = await conn.execute(
        f"SELECT {_ROW} FROM review_figures WHERE pull_id IN ({pulls})", args
    )
    await _move_totals(conn, await cursor.fetchall(), [])
    await conn.execute(f"DELETE FROM review_figures WHERE pull_id IN ({pulls})", args)
    await conn.execute(f"DELETE FROM figures_stale WHERE pull_id IN ({pulls})", args)


async def _move_totals(conn: Any, before: Sequence[Any], after: Sequence[Any]) -> None:
    for (provider, model), change in _differences(before, after).items():
        await conn.execute(
            f"INSERT INTO figure_totals (provider, model, {', '.join(_TOTALS)})"
            f" VALUES (?, ?, {_marks(_TOTALS)}) ON CONFLICT (provider, model) DO UPDATE SET "
            + ", ".join(f"{name} = figure_totals.{name} + excluded.{name}" for name in _TOTALS),
            (provider, model, *(change[name] for name in _TOTALS)),
        )


def _differences(before: Sequence[Any], after: Sequence[Any]) -> dict[tuple[str, str], dict]:
    """(provider, model) → how much each of `_TOTALS` moves (models that move)."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for rows, sign in ((before, -1), (after, 1)):
        for row in rows:
            change = found.setdefault((row["provider"], row["model"]), dict.fromkeys(_TOTALS, 0))
            figures = _figures(row)
            for name in _TOTALS:
                change[name] += sign * figures[name]
    return {key: change for key, change in found.items() if any(change.values())}


def _figures(row: Any) -> dict[str, int]:
    usd = row["usd"]
    return {
        "reviews": 1,
        **{name: int(row[name] or 0) for name in _COUNTS if name != "reviews"},
        "usd_nanos": 0 if usd is None else round(float(usd) * NANOS),
        "priced_runs": int(row["priced_runs"] or 0),
    }
