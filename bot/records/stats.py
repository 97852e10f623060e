"""The SQL of `cockpit stats` and the review gauges of `/metrics`: what each provider and
model's reviews came to, counted in the database (see `bot.stats` for the ratios)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from bot.records.database import Database
from bot.records.ledger import DRAFTED

# A review is its primary session's (the newest, as `sessions.primary_of_review` reads it);
# one without a session (an older database) is its own provider's, model unknown.
_PER_REVIEW = """
SELECT r.id, r.state, r.suppressed,
    COALESCE(s.provider, r.provider, '') AS provider,
    COALESCE(s.model, '') AS model,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id) AS findings,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.state = 'kept' AND r.state = 'posted') AS published,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.state = 'dropped' AND f.checked_by = 'human') AS dropped_by_people,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.verify_status = 'refuted') AS refuted,
    (SELECT COUNT(*) FROM findings f WHERE f.review_id = r.id
        AND f.state = 'withdrawn') AS withdrawn,
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
    (SELECT COUNT(*) FROM runs u WHERE u.review_id = r.id AND u.cost_usd IS NULL)
        AS unpriced_runs
FROM reviews r
JOIN pulls p ON p.id = r.pull_id
LEFT JOIN sessions s ON s.id = (SELECT MAX(id) FROM sessions
    WHERE review_id = r.id AND role = 'primary')
WHERE r.state IN ({drafted}) AND r.created_at >= ? AND p.repo = COALESCE(?, p.repo)
"""
# A number published by several reviews of a PR counts as fixed for the first that did.

_PER_MODEL = """
SELECT provider, model, COUNT(*) AS reviews, SUM(findings) AS findings,
    SUM(published) AS published, SUM(dropped_by_people) AS dropped_by_people,
    SUM(refuted) AS refuted, SUM(withdrawn) AS withdrawn, SUM(suppressed) AS suppressed,
    SUM(fixed_after_publishing) AS fixed_after_publishing, SUM(usd) AS usd,
    SUM(unpriced_runs) AS unpriced_runs
FROM ({per_review}) per_review
GROUP BY provider, model
ORDER BY provider, model
"""


@dataclass(frozen=True)
class ModelFigures:
    """What one provider and model's reviews that made a draft add up to (built from the
    aggregate's row with its sums as ints: Postgres sums integers as numerics)."""

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


async def model_figures(
    db: Database, *, since: float = 0.0, repo: str | None = None
) -> list[ModelFigures]:
    """Per provider and model, the reviews created since `since` (epoch seconds) of `repo`
    (OWNER/NAME; None: every repository) that made a draft."""
    per_review = _PER_REVIEW.format(drafted=", ".join("?" for _ in DRAFTED))
    rows = await db.fetchall(_PER_MODEL.format(per_review=per_review), (*DRAFTED, since, repo))
    return [
        ModelFigures(
            provider=row["provider"],
            model=row["model"],
            usd=None if row["usd"] is None else float(row["usd"]),
            **{name: int(row[name] or 0) for name in _COUNTS},
        )
        for row in rows
    ]
