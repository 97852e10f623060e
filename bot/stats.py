"""`cockpit stats` and the review gauges of `/metrics`: each provider and model's review
figures (counted by `bot.records.stats`) with their ratios, as text or JSON.

Acceptance is people's verdict only: published ÷ (published + dropped by a person). A
finding the reviewer withdrew in a revision or the verify pass refuted is counted apart, never
as a person's no.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from bot.records.stats import ModelFigures
from bot.texts import render

_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


@dataclass(frozen=True)
class ModelStats:
    """One provider and model's figures and what they come to."""

    figures: ModelFigures

    @property
    def findings_per_review(self) -> float | None:
        f = self.figures
        return f.findings / f.reviews if f.reviews else None

    @property
    def acceptance(self) -> float | None:
        """published ÷ (published + dropped by a person); None when nobody decided yet."""
        f = self.figures
        decided = f.published + f.dropped_by_people
        return f.published / decided if decided else None

    @property
    def usd_per_accepted(self) -> float | None:
        f = self.figures
        return f.usd / f.published if f.usd is not None and f.published else None


def parse_since(text: str) -> float:
    """`--since YYYY-MM-DD` as the epoch seconds of that day's start in UTC; ValueError
    otherwise."""
    try:
        if not _DAY.fullmatch(text):  # fromisoformat also takes 20240105 and 2024-W01-5
            raise ValueError
        day = dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--since must be a date as YYYY-MM-DD (got {text!r})") from None
    return dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()


def summarise(figures: list[ModelFigures]) -> list[ModelStats]:
    return [ModelStats(f) for f in figures]


def to_json(rows: list[ModelStats], *, since: str | None, repo: str | None) -> dict[str, Any]:
    """The `--json` document (SPEC §2: `cockpit stats`)."""
    return {
        "since": since,
        "repo": repo,
        "models": [
            {
                "provider": row.figures.provider,
                "model": row.figures.model or None,
                "reviews": row.figures.reviews,
                "findings_per_review": _round(row.findings_per_review),
                "published": row.figures.published,
                "dropped_by_people": row.figures.dropped_by_people,
                "acceptance": _round(row.acceptance),
                "refuted": row.figures.refuted,
                "withdrawn": row.figures.withdrawn,
                "suppressed": row.figures.suppressed,
                "fixed_after_publishing": row.figures.fixed_after_publishing,
                "usd": _round(row.figures.usd, 6),
                "usd_per_accepted": _round(row.usd_per_accepted, 6),
            }
            for row in rows
        ],
    }


def render_text(rows: list[ModelStats], *, since: str | None, repo: str | None, where: str) -> str:
    """What `cockpit stats` prints: one block per provider and model (`where`: the
    database, as `bot.backend.describe` names it)."""
    return render("cli/stats.txt.j2", rows=rows, since=since, repo=repo, where=where)


def gauges(rows: list[ModelStats]) -> dict[tuple[str, str], dict[str, float]]:
    """(provider, model) → the figures `/metrics` shows (a ratio nobody can compute yet is
    left out rather than shown as 0)."""
    found = {}
    for row in rows:
        f = row.figures
        values: dict[str, float | None] = {
            "reviews": f.reviews,
            "findings_per_review": row.findings_per_review,
            "published": f.published,
            "dropped_by_people": f.dropped_by_people,
            "acceptance": row.acceptance,
            "refuted": f.refuted,
            "withdrawn": f.withdrawn,
            "suppressed": f.suppressed,
            "fixed_after_publishing": f.fixed_after_publishing,
            "usd": f.usd,
            "usd_per_accepted": row.usd_per_accepted,
        }
        found[(f.provider, f.model or "unknown")] = {
            k: v for k, v in values.items() if v is not None
        }
    return found


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)
