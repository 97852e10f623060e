"""An eval's scores and figures, computed once for `--json`, the report and the database."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

import msgspec
from msgspec.structs import astuple

from bot.records.types import DraftRules
from bot.records.vocab import FindingState, VerifyStatus

ALL, VERIFIED = "all", "verified"  # the findings scored: every one, or those not refuted


class Strict(TypedDict):
    tp: int
    fp: int
    fn: int
    precision: float | None
    recall: float | None
    f1: float | None


class Benchmark(TypedDict):
    precision: float | None
    recall: float | None
    f1: float | None


class CaseBenchmark(Benchmark):
    matched_findings: int
    labels_hit: int


class Counts(msgspec.Struct, frozen=True):
    findings: int = 0
    labels: int = 0
    tp: int = 0  # strict: one finding per label, one label per finding
    fp: int = 0
    fn: int = 0
    matched_findings: int = 0  # benchmark: findings that match any label
    labels_hit: int = 0  # benchmark: labels that any finding matches
    known_fp: int = 0  # findings matching a known false positive of the golden file
    summarised: int = 0  # past `max_findings`: one line in the review's body, not scored

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    @property
    def strict(self) -> Strict:
        precision = _ratio(self.tp, self.tp + self.fp)
        recall = _ratio(self.tp, self.tp + self.fn)
        return Strict(
            tp=self.tp,
            fp=self.fp,
            fn=self.fn,
            precision=precision,
            recall=recall,
            f1=f1(precision, recall),
        )

    @property
    def benchmark(self) -> Benchmark:
        precision = _ratio(self.matched_findings, self.findings)
        recall = _ratio(self.labels_hit, self.labels)
        return Benchmark(precision=precision, recall=recall, f1=f1(precision, recall))


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def greedy_pairs(scores: Sequence[Sequence[float]]) -> dict[int, int]:
    """One-to-one matching, best pairs first (ties: earlier finding, then earlier label):
    finding index → label index. `scores[i][j] > 0`: the judge says finding i and label j
    are the same issue."""
    candidates = sorted(
        ((-score, i, j) for i, row in enumerate(scores) for j, score in enumerate(row) if score > 0)
    )
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    for _, i, j in candidates:
        if i not in pairs and j not in taken:
            pairs[i] = j
            taken.add(j)
    return pairs


def score_case(
    scores: Sequence[Sequence[float]],
    labels: int,
    *,
    kept: Sequence[bool] | None = None,
    known_fp: Sequence[bool] | None = None,
) -> tuple[Counts, dict[int, int]]:
    """`kept` leaves findings out (those the verify pass refuted); `known_fp` marks findings
    that match a known false positive."""
    rows = [i for i in range(len(scores)) if kept is None or kept[i]]
    sub = [list(scores[i]) for i in rows]
    local = greedy_pairs(sub)
    pairs = {rows[i]: j for i, j in local.items()}
    counts = Counts(
        findings=len(rows),
        labels=labels,
        tp=len(pairs),
        fp=len(rows) - len(pairs),
        fn=labels - len(pairs),
        matched_findings=sum(1 for row in sub if any(s > 0 for s in row)),
        labels_hit=sum(1 for j in range(labels) if any(row[j] > 0 for row in sub)),
        known_fp=sum(1 for i in rows if known_fp is not None and known_fp[i]),
    )
    return counts, pairs


def add_usd(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


# -- what `approve` would publish -----------------------------------------------------------


@dataclass(frozen=True)
class Drafted:
    """What production's `DraftRules` read of a finding (the names of `records.types.Finding`)."""

    ordinal: int
    severity: str
    verify_status: str | None
    in_diff: bool
    confidence: int | None = None
    state: str = FindingState.KEPT
    passes: tuple[int, ...] = ()  # the passes that raised it (empty: a review in one pass)


@dataclass(frozen=True)
class Variant:
    """A choice of the findings scored, side by side in the report and `--json`: a new one is
    one entry of `VARIANTS`. `rules` turns the draft's rules (the repository's settings as
    production stored them) into the ones this variant publishes under; None scores every
    finding. `verify`: None scores it with and without the verify pass, True only with it."""

    name: str
    rules: Callable[[DraftRules], DraftRules] | None
    verify: bool | None = None
    # which findings production drafts at all, read before the verify status is set aside:
    # `passes`' rule (a pass's verify session runs with or without `verify`); None: every one
    drafts: Callable[[Drafted], bool] | None = None
    several_passes: bool = False  # scored only in a run of several passes (`--passes`)

    def entries(self, verified: bool) -> tuple[bool, ...]:
        """The entries it is scored in: without the verify pass, and with it when it ran."""
        return tuple(v for v in ((False, True) if verified else (False,)) if self.scores(v))

    def scores(self, verified: bool) -> bool:
        return self.verify is None or self.verify == verified

    def key(self, verified: bool) -> str:
        """Its name in a case's stored counts."""
        return f"{self.name}+verify" if verified else self.name

    def chosen(
        self, findings: Sequence[Drafted], rules: DraftRules, verified: bool
    ) -> tuple[list[bool], int]:
        """Which findings it scores, and how many a pending review summarises past the cap.
        The decision is production's (`DraftRules.approvable`, `over_cap`), not made again
        here; without the verify pass no verify status counts."""
        if self.rules is None:
            return [True] * len(findings), 0
        drafted = [self.drafts is None or self.drafts(f) for f in findings]
        seen = [f if verified else replace(f, verify_status=None) for f in findings]
        seen = [f for f, kept in zip(seen, drafted, strict=True) if kept]
        rules = self.rules(rules)
        published = rules.approvable(seen)
        capped = rules.over_cap(published)
        shown = {f.ordinal for f in published} - capped
        return [f.ordinal in shown for f in findings], len(capped)


VARIANTS: tuple[Variant, ...] = (
    Variant("everything", None),
    Variant("published", lambda rules: rules),  # the repository's settings as configured
    Variant("confirmed-only", lambda rules: replace(rules, verify_publish="confirmed"), True),
    Variant("no-min-confidence", lambda rules: replace(rules, min_confidence=0)),
    # `eval run --passes N`: what the first pass alone would have drafted, and what N passes
    # keep (two raised it, or one did and its verify session confirmed it)
    Variant("one-pass", lambda rules: rules, drafts=lambda f: 1 in f.passes, several_passes=True),
    Variant(
        "passes",
        lambda rules: rules,
        drafts=lambda f: len(f.passes) != 1 or f.verify_status in (VerifyStatus.CONFIRMED, None),
        several_passes=True,
    ),
)
