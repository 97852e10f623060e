"""`cockpit stats` and the review gauges of `/metrics`: each model's review figures and ratios."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from bot.metrics import REVIEW_GAUGES
from bot.records.stats import ModelFigures
from bot.texts import OPERATOR, render, say

_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# The `--json` document's ratios and amounts, rounded to these digits (counts stay whole).
_DIGITS = {"findings_per_review": 3, "acceptance": 3, "usd": 6, "usd_per_accepted": 6}


@dataclass(frozen=True)
class ModelStats:
    figures: ModelFigures

    @property
    def findings_per_review(self) -> float | None:
        f = self.figures
        return f.findings / f.reviews if f.reviews else None

    @property
    def acceptance(self) -> float | None:
        """published ÷ (published + dropped by a person); None when nobody decided yet. A
        finding withdrawn in a revision or refuted by the verify pass is never a person's no."""
        f = self.figures
        decided = f.published + f.dropped_by_people
        return f.published / decided if decided else None

    @property
    def usd_per_accepted(self) -> float | None:
        f = self.figures
        return f.usd / f.published if f.usd is not None and f.published else None

    def values(self) -> dict[str, float | None]:
        """Every figure by name, as `--json` and `/metrics` show them (None: not computable):
        counted in the database, or worked out here."""
        return {name: getattr(self.figures, name, None) for name in REVIEW_GAUGES} | {
            "findings_per_review": self.findings_per_review,
            "acceptance": self.acceptance,
            "usd_per_accepted": self.usd_per_accepted,
        }


def parse_since(text: str) -> float:
    """`--since YYYY-MM-DD` as the epoch seconds of that day's start in UTC."""
    try:
        if not _DAY.fullmatch(text):  # fromisoformat also takes 20240105 and 2024-W01-5
            raise ValueError
        day = dt.date.fromisoformat(text)
    except ValueError:
        said = say(OPERATOR, "bad_since", text=repr(text))
        raise ValueError(said.strip()) from None
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
                **{name: _round(value, _DIGITS.get(name)) for name, value in row.values().items()},
            }
            for row in rows
        ],
    }


def render_text(rows: list[ModelStats], *, since: str | None, repo: str | None, where: str) -> str:
    return render("cli/stats.txt.j2", rows=rows, since=since, repo=repo, where=where)


def gauges(rows: list[ModelStats]) -> dict[tuple[str, str], dict[str, float]]:
    """(provider, model) → the figures `/metrics` shows (a ratio nobody can compute yet is
    left out rather than shown as 0)."""
    found = {}
    for row in rows:
        values = {name: value for name, value in row.values().items() if value is not None}
        found[(row.figures.provider, row.figures.model or "unknown")] = values
    return found


def _round(value: float | None, digits: int | None) -> float | None:
    return value if value is None or digits is None else round(value, digits)
