"""What an eval run found, and its figures for `--json`, the report and the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import msgspec
from msgspec import UNSET, UnsetType

from bot.evals.golden import Case, Golden
from bot.evals.judges import EvalFinding, Judge
from bot.evals.scoring import (
    ALL,
    VARIANTS,
    VERIFIED,
    Benchmark,
    CaseBenchmark,
    Counts,
    Strict,
    add_usd,
)
from bot.records.types import DraftRules
from bot.records.vocab import VerifyStatus


class EvalOptions(msgspec.Struct, frozen=True):
    """A batch's options, kept in `eval_runs.options` so that `--resume` runs it as it was."""

    goldens: tuple[str, ...]
    provider: str
    models: tuple[str, ...]
    verify: bool = False
    judge: str = "lexical"
    repo: str | None = None
    jobs: int = 1
    judge_model: str | None = None
    passes: int = 1  # reviews of each case in different file orders (`passes`)


class Cost(msgspec.Struct, frozen=True):
    tokens: int = 0
    usd: float | None = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.tokens + other.tokens, add_usd(self.usd, other.usd))


class CaseScores(msgspec.Struct, kw_only=True):
    """What `eval_cases.scores` keeps beside its columns: what a case spent (also when it
    failed, for `--resume`), and what the report shows of it."""

    counts: dict[str, Counts] = {}
    pairs: dict[int, int] = {}  # finding index → label index
    notes: tuple[str, ...] = ()  # fallbacks taken (head or base not found as given)
    verify_seconds: float = 0.0
    review_tokens: int = 0
    review_usd: float | None = 0.0
    verify_tokens: int = 0
    verify_usd: float | None = 0.0
    verify_error: str | None = None
    rules: DraftRules | None = None  # the repository's settings the draft was made under
    in_diff: tuple[int, ...] = ()  # findings (by ordinal) on the diff's lines: inline comments
    passes: dict[int, tuple[int, ...]] = {}  # finding (by ordinal) → the passes that raised it

    def spent(self) -> tuple[Cost, Cost]:
        return Cost(self.review_tokens, self.review_usd), Cost(self.verify_tokens, self.verify_usd)


class CaseResult(CaseScores, kw_only=True):
    case: Case
    findings: list[EvalFinding] = []
    error: str | None = None
    head_sha: str = ""
    wall_seconds: float = 0.0

    def add_spend(self, review: Cost, verify: Cost) -> None:
        self.review_tokens += review.tokens
        self.review_usd = add_usd(self.review_usd, review.usd)
        self.verify_tokens += verify.tokens
        self.verify_usd = add_usd(self.verify_usd, verify.usd)

    def scores(self) -> CaseScores:
        return CaseScores(**{name: getattr(self, name) for name in CaseScores.__struct_fields__})


@dataclass
class ModelRun:
    id: int
    provider: str
    model: str
    verify: bool
    verify_provider: str | None
    cases: list[CaseResult] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failed(self) -> list[CaseResult]:
        return [c for c in self.cases if c.error]

    def total(self, variant: str) -> Counts:
        return sum((c.counts[variant] for c in self.cases if not c.error), Counts())

    def scored(self, variant: str) -> bool:
        """Every case that ran has counts for it (cases stored by an older version have no
        rules to decide what they would publish)."""
        return all(variant in c.counts for c in self.cases if not c.error)


@dataclass
class EvalResult:
    batch: int
    options: EvalOptions
    goldens: dict[str, Golden]  # by the path it was read from
    runs: list[ModelRun]
    judge: Judge
    source_changed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.source_changed and not any(run.failed for run in self.runs)

    @cached_property
    def figures(self) -> Results:
        """Read once the run is over: the summary, `--json` and the report show the same."""
        judge = self.judge
        return Results(
            batch=self.batch,
            golden=list(self.goldens),
            judge=JudgeFigures(
                judge.name, judge.model, judge.tokens, judge.cost_usd, judge.unreadable
            ),
            source_changed=self.source_changed,
            runs=[
                run_figures(self, run, verify)
                for run in self.runs
                for verify in ((False, True) if run.verify else (False,))
            ],
        )


class ProgressSink:
    def start(self, result: EvalResult, total: int, resumed: bool) -> None: ...

    def case_done(self, run: ModelRun, result: CaseResult, figures: CaseFigures) -> None: ...

    def finish(self) -> None: ...


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
    variants: dict[str, CaseVariant] | UnsetType = UNSET  # by `Variant.name`


class CaseVariant(msgspec.Struct, kw_only=True):
    findings: int
    summarised: int
    tp: int
    fp: int
    fn: int


class VariantFigures(msgspec.Struct, kw_only=True):
    """The findings a variant scores (`bot.evals.scoring.VARIANTS`), summed over the cases."""

    findings: int
    summarised: int  # past `max_findings`: one line in the review body each, not scored
    strict: Strict
    benchmark: Benchmark


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
    variants: dict[str, VariantFigures] = {}  # by `Variant.name`: what each would publish


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


def case_figures(case: CaseResult, verify: bool) -> CaseFigures:
    """`verify`: with the verify pass (its spend, and refuted findings left out)."""
    tokens, usd, seconds = _spend([case], verify)
    labels = len(case.case.labels)
    counts = None if case.error else case.counts.get(VERIFIED if verify else ALL)
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
    if counts is not None:
        figures.variants = {
            v.name: CaseVariant(
                findings=c.findings, summarised=c.summarised, tp=c.tp, fp=c.fp, fn=c.fn
            )
            for v in VARIANTS
            if v.scores(verify) and (c := case.counts.get(v.key(verify))) is not None
        }
    return figures


def run_figures(result: EvalResult, run: ModelRun, verify: bool) -> RunFigures:
    total = run.total(
        VERIFIED if verify else ALL
    )  # scores leave failed cases out; spend counts them
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
        cases=[case_figures(case, verify) for case in run.cases],
        variants={
            v.name: variant_figures(run.total(v.key(verify)))
            for v in VARIANTS
            if v.scores(verify) and run.scored(v.key(verify))
        },
    )


def variant_figures(total: Counts) -> VariantFigures:
    return VariantFigures(
        findings=total.findings,
        summarised=total.summarised,
        strict=total.strict,
        benchmark=total.benchmark,
    )
