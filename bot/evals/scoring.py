"""An eval's scores and figures, computed once for `--json`, the report and the database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

import msgspec
from msgspec import UNSET, UnsetType
from msgspec.structs import astuple

from bot.records.vocab import VerifyStatus

if TYPE_CHECKING:
    from bot.evals.runner import CaseResult, EvalResult, ModelRun

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


class CaseFigures(msgspec.Struct, kw_only=True):
    id: str
    labels: int
    tp: int
    fp: int
    fn: int
    findings: int
    strict: Strict | UnsetType = UNSET  # none for a failed case: it counts in no score
    benchmark: CaseBenchmark | UnsetType = UNSET
    known_fp: int | UnsetType = UNSET
    tokens: int
    usd: float | None
    wall_seconds: float
    head_sha: str
    error: str | None
    notes: tuple[str, ...]
    refuted: int | UnsetType = UNSET  # with the verify pass only
    verify_error: str | UnsetType | None = UNSET


class RunFigures(msgspec.Struct, kw_only=True):
    provider: str
    model: str
    verify: bool
    verify_provider: str | None
    judge: str
    judge_model: str | None
    strict: Strict
    benchmark: Benchmark
    tokens: int
    usd: float | None
    usd_per_tp: float | None
    wall_seconds: float  # the cases' time added up (independent of --jobs)
    elapsed_seconds: float
    eval_run: int
    batch: int
    failed_cases: int
    cases: list[CaseFigures]


class JudgeFigures(msgspec.Struct):
    name: str
    model: str | None
    tokens: int
    usd: float | None
    unreadable: int


class Results(msgspec.Struct):
    """What `--json` writes (SPEC §2): one entry per model, and one more with the verify pass."""

    batch: int
    golden: list[str]
    judge: JudgeFigures
    source_changed: list[str]
    runs: list[RunFigures]


def _spend(cases: Sequence[CaseResult], verify: bool) -> tuple[int, float | None, float]:
    tokens, usd, seconds = 0, 0.0, 0.0
    for case in cases:
        tokens += case.review_tokens + (case.verify_tokens if verify else 0)
        usd = add_usd(usd, add_usd(case.review_usd, case.verify_usd if verify else 0.0))
        seconds += case.wall_seconds - (0 if verify else case.verify_seconds)
    return tokens, usd, seconds


def case_figures(case: CaseResult, variant: str, verify: bool) -> CaseFigures:
    tokens, usd, seconds = _spend([case], verify)
    labels = len(case.case.labels)
    counts = None if case.error else case.counts.get(variant)
    shown = Counts(fn=labels) if counts is None else counts
    figures = CaseFigures(
        id=case.case.id,
        labels=labels,
        tp=shown.tp,
        fp=shown.fp,
        fn=shown.fn,
        findings=shown.findings,
        tokens=tokens,
        usd=usd,
        wall_seconds=round(seconds, 3),
        head_sha=case.head_sha,
        error=case.error,
        notes=case.notes,
    )
    if counts is not None:
        figures.strict, figures.known_fp = counts.strict, counts.known_fp
        figures.benchmark = CaseBenchmark(
            **counts.benchmark,
            matched_findings=counts.matched_findings,
            labels_hit=counts.labels_hit,
        )
    if verify:
        figures.refuted = sum(1 for f in case.findings if f.verify_status == VerifyStatus.REFUTED)
        figures.verify_error = case.verify_error
    return figures


def run_figures(result: EvalResult, run: ModelRun, variant: str) -> RunFigures:
    verify = variant == VERIFIED
    total = run.total(variant)  # scores leave failed cases out; spend counts them
    tokens, usd, seconds = _spend(run.cases, verify)
    return RunFigures(
        provider=run.provider,
        model=run.model,
        verify=verify,
        verify_provider=run.verify_provider if verify else None,
        judge=result.judge.name,
        judge_model=result.judge.model,
        strict=total.strict,
        benchmark=total.benchmark,
        tokens=tokens,
        usd=usd,
        usd_per_tp=usd / total.tp if usd is not None and total.tp else None,
        wall_seconds=round(seconds, 3),
        elapsed_seconds=round(run.wall_seconds, 3),
        eval_run=run.id,
        batch=result.batch,
        failed_cases=len(run.failed),
        cases=[case_figures(case, variant, verify) for case in run.cases],
    )


def results(result: EvalResult) -> Results:
    judge = result.judge
    return Results(
        batch=result.batch,
        golden=list(result.goldens),
        judge=JudgeFigures(judge.name, judge.model, judge.tokens, judge.cost_usd, judge.unreadable),
        source_changed=result.source_changed,
        runs=[
            run_figures(result, run, variant)
            for run in result.runs
            for variant in ((ALL, VERIFIED) if run.verify else (ALL,))
        ],
    )
