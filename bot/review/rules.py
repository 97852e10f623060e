"""The rules a draft was made under, stored with it so later config changes never apply."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from bot.records.types import Finding, Review
from bot.records.vocab import FindingState, Severity, VerifyStatus
from bot.review.noise import folded, over_cap


@dataclass(frozen=True)
class UsedSource:
    source: str
    files: int  # reviewed files it is for; 0 for every file
    cut: bool


@dataclass(frozen=True)
class DraftRules:
    commit: str | None = None  # the default branch's commit the instructions come from
    used: tuple[UsedSource, ...] = ()
    left_out: tuple[str, ...] = ()  # instruction sources left out whole (size budget)
    edited: tuple[str, ...] = ()  # steering files the PR edits: they apply after merge
    min_severity: str = Severity.NIT
    max_findings: int | None = None
    noise: tuple[str, ...] = ()  # changed files left out as noise
    noise_dropped: int = 0  # findings the reviewer placed on them, dropped
    ignored: tuple[str, ...] = ()  # changed files matching an `ignore` glob
    ignored_dropped: int = 0  # findings the reviewer placed on them, dropped

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, stored: str | None) -> DraftRules:
        """A review's rules; a review made before they were stored folds and caps nothing."""
        if not stored:
            return cls()
        data: dict[str, Any] = json.loads(stored)
        return cls(
            commit=data.get("commit"),
            used=tuple(UsedSource(**u) for u in data.get("used", ())),
            left_out=tuple(data.get("left_out", ())),
            edited=tuple(data.get("edited", ())),
            min_severity=data.get("min_severity", Severity.NIT),
            max_findings=data.get("max_findings"),
            noise=tuple(data.get("noise", ())),
            noise_dropped=int(data.get("noise_dropped", 0)),
            ignored=tuple(data.get("ignored", ())),
            ignored_dropped=int(data.get("ignored_dropped", 0)),
        )

    def approvable(self, findings: list[Finding]) -> list[Finding]:
        """What a plain `approve` publishes and the pending review shows: kept findings the
        verify pass did not refute, at or above `min_severity` (the others only when listed)."""
        return [
            f
            for f in findings
            if f.state == FindingState.KEPT
            and f.verify_status != VerifyStatus.REFUTED
            and not self.folds(f)
        ]

    def folds(self, finding: Finding) -> bool:
        """Below `min_severity`: in the "minor" section, out of the pending review unless
        listed at `approve`."""
        return folded(finding.severity, self.min_severity)

    def over_cap(self, findings: list[Finding]) -> set[int]:
        """Of the findings going into a pending review, those summarised in its body
        (`max_findings` inline comments at most)."""
        return over_cap(findings, self.max_findings)


def files_left_out(review: Review) -> dict[str, str]:
    """The changed files the draft left out of the reviewer's diff, path → why: every later
    turn on it leaves them out too."""
    rules = DraftRules.from_json(review.rules)
    out = {*rules.noise, *rules.ignored}
    return {path: why for path, why in json.loads(review.not_reviewed or "[]") if path in out}
