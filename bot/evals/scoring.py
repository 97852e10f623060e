"""An eval's scores and figures, computed once for `--json`, the report and the database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import msgspec
from msgspec.structs import astuple

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
