"""`cockpit eval run`: replay golden cases through the production review pipeline and score them.

Each case gets a worktree of an eval-only mirror at its head sha and goes through
`review_worktree` (and `verify_draft` with `--verify`) with production's prompts, tools and
budgets. Nothing here can reach GitHub (no GitHub client is built) and the sources are only
read: their fingerprints are compared after the run, which fails if one changed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bot.agents.base import AgentError, Budget
from bot.agents.providers import ModelClients
from bot.config import PROVIDERS, Settings
from bot.evals.golden import Case, Golden, load_golden
from bot.evals.judges import EvalFinding, Judge, make_judge
from bot.evals.scoring import Counts, score_case
from bot.evals.sources import Sources, display_name, fingerprint
from bot.records import evals
from bot.records.runs import session_spend as ledger_spend
from bot.records.sessions import end_session, prune_detached_sessions
from bot.records.sqlite import SqliteDatabase
from bot.records.vocab import RunStatus, VerifyStatus
from bot.review.pipeline import Reviewer, ReviewRequest, review_worktree
from bot.review.verify import apply_verification, choose_provider, verify_draft
from bot.texts import OPERATOR, say
from bot.workers import CONVERSATION_TTL, PRUNE_CHUNK
from bot.worktrees import GitError

ALL, VERIFIED = "all", "verified"  # the findings scored: every one, or those not refuted


class EvalError(Exception):
    """The eval cannot start (bad options, golden file or resume id); exit code 2."""


@dataclass(frozen=True)
class EvalOptions:
    goldens: tuple[str, ...]
    provider: str
    models: tuple[str, ...]
    verify: bool = False
    judge: str = "lexical"
    repo: str | None = None
    jobs: int = 1
    judge_model: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> EvalOptions:
        data = json.loads(text)
        return cls(**{**data, "goldens": tuple(data["goldens"]), "models": tuple(data["models"])})


@dataclass
class CaseResult:
    """One case under one model: what the reviewer found and how it scored."""

    case: Case
    golden: str
    findings: list[EvalFinding] = field(default_factory=list)
    error: str | None = None
    head_sha: str = ""
    notes: tuple[str, ...] = ()
    wall_seconds: float = 0.0
    verify_seconds: float = 0.0
    review_tokens: int = 0
    review_usd: float | None = 0.0
    verify_tokens: int = 0
    verify_usd: float | None = 0.0
    verify_error: str | None = None
    counts: dict[str, Counts] = field(default_factory=dict)
    pairs: dict[int, int] = field(default_factory=dict)  # finding index → label index

    def add_spend(self, review: Cost, verify: Cost) -> None:
        self.review_tokens += review.tokens
        self.review_usd = add_usd(self.review_usd, review.usd)
        self.verify_tokens += verify.tokens
        self.verify_usd = add_usd(self.verify_usd, verify.usd)

    def to_scores(self) -> dict[str, Any]:
        return {
            "counts": {name: c.to_dict() for name, c in self.counts.items()},
            "pairs": {str(i): j for i, j in self.pairs.items()},
            "notes": list(self.notes),
            "verify_seconds": self.verify_seconds,
            "review_tokens": self.review_tokens,
            "review_usd": self.review_usd,
            "verify_tokens": self.verify_tokens,
            "verify_usd": self.verify_usd,
            "verify_error": self.verify_error,
        }


@dataclass
class ModelRun:
    """One model's pass over every case (one `eval_runs` row)."""

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
        done = [c.counts[variant] for c in self.cases if not c.error]
        return sum(done, Counts())


@dataclass
class EvalResult:
    batch: int
    options: EvalOptions
    goldens: list[Golden]
    runs: list[ModelRun]
    judge: str
    judge_model: str | None
    judge_tokens: int = 0
    judge_usd: float | None = 0.0
    judge_unreadable: int = 0  # LLM judge answers with no verdict to read: scored "no match"
    source_changed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.source_changed and not any(run.failed for run in self.runs)


def add_usd(a: float | None, b: float | None) -> float | None:
    """Unknown stays unknown: a sum with an unknown part is unknown."""
    return None if a is None or b is None else a + b


def variant_spend(cases: list[CaseResult], verify: bool) -> tuple[int, float | None, float]:
    """Tokens, USD and seconds the cases took, with their verify pass or without it."""
    tokens, seconds = 0, 0.0
    usd: float | None = 0.0
    for case in cases:
        tokens += case.review_tokens + (case.verify_tokens if verify else 0)
        usd = add_usd(usd, add_usd(case.review_usd, case.verify_usd if verify else 0.0))
        seconds += case.wall_seconds - (0 if verify else case.verify_seconds)
    return tokens, usd, seconds


@dataclass(frozen=True)
class Cost:
    """Tokens and USD (None when a model has no known rate)."""

    tokens: int = 0
    usd: float | None = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.tokens + other.tokens, add_usd(self.usd, other.usd))


async def session_spend(db: SqliteDatabase, session_id: int) -> tuple[Cost, Cost]:
    """What the runs hold for a case's review session and the sessions started
    from it (the verify pass), as (review, verify): every run, failed ones included."""
    review, verify = Cost(), Cost()
    for subkind, tokens, usd in await ledger_spend(db, session_id):
        if subkind == "verify":
            verify += Cost(tokens, usd)
        else:
            review += Cost(tokens, usd)
    return review, verify


class ProgressSink:
    """What the runner reports as cases finish (a terminal bar or plain lines)."""

    def start(self, result: EvalResult, total: int, resumed: bool) -> None: ...

    def case_done(self, run: ModelRun, result: CaseResult) -> None: ...

    def finish(self) -> None: ...


@dataclass
class Runner:
    settings: Settings
    db: SqliteDatabase
    models: ModelClients
    sources: Sources
    judge: Judge
    progress: ProgressSink

    async def run_case(self, run: ModelRun, golden: Golden, case: Case, index: int) -> CaseResult:
        """Review (and verify) one case. What it spent comes from its runs, so a case
        that fails half-way still shows, and counts, what its model runs cost."""
        result = CaseResult(case, str(golden.path))
        started = time.monotonic()
        prepared = None
        sessions: list[int] = []

        async def opened(session_id: int) -> None:
            sessions.append(session_id)

        try:
            prepared = await self.sources.prepare(case, f"eval-{run.id}-{index}")
            result.head_sha, result.notes = prepared.tree.head_sha, prepared.notes
            reviewer = Reviewer(self.db, self.models, Budget(max_usd=self.settings.review_max_usd))
            request = ReviewRequest(
                repo=display_name(case.repository),
                number=case.pr or 0,
                title=case.title,
                body=case.body,
                base_ref=case.base_ref or say(OPERATOR, "eval.default_branch"),
                provider=run.provider,
                config=await self.sources.repo_config(prepared.key),
                model=run.model,
            )
            draft = await review_worktree(reviewer, prepared.tree, request, on_session=opened)
            rows = draft.findings
            if run.verify and rows:
                assert run.verify_provider is not None
                verify_started = time.monotonic()
                verification = await verify_draft(
                    reviewer, prepared.tree, request, draft, provider=run.verify_provider
                )
                result.verify_seconds = time.monotonic() - verify_started
                result.verify_error = verification.error
                rows = apply_verification(rows, verification)
            result.findings = [EvalFinding.of(n, r) for n, r in enumerate(rows, start=1)]
        except (AgentError, GitError, OSError) as exc:
            result.error = str(exc) or exc.__class__.__name__
        finally:
            for session_id in sessions:  # no PR to talk about it later: the talk ends
                await end_session(self.db, session_id, failed=result.error)
            if prepared is not None:
                await self.sources.release(prepared)
        for session_id in sessions:
            result.add_spend(*await session_spend(self.db, session_id))
        result.wall_seconds = time.monotonic() - started
        return result

    async def score(self, result: CaseResult) -> None:
        """Judge the findings against the labels; both variants when verify ran."""
        case = result.case
        scores = await self.judge.scores(result.findings, case.labels)
        known = None
        if case.known_false_positives and result.findings:
            fp_scores = await self.judge.scores(result.findings, case.known_false_positives)
            known = [any(s > 0 for s in row) for row in fp_scores]
        result.counts[ALL], result.pairs = score_case(scores, len(case.labels), known_fp=known)
        if any(f.verify_status for f in result.findings) or result.verify_error is not None:
            kept = [f.verify_status != VerifyStatus.REFUTED for f in result.findings]
            result.counts[VERIFIED], result.pairs = score_case(
                scores, len(case.labels), kept=kept, known_fp=known
            )
        else:
            result.counts[VERIFIED] = result.counts[ALL]

    async def store_case(self, run: ModelRun, result: CaseResult) -> None:
        final = result.counts.get(VERIFIED if run.verify else ALL, Counts())
        strict = final.strict
        case = {
            "pr": result.case.pr or 0,
            "head_sha": result.head_sha,
            "status": RunStatus.FAILED if result.error else RunStatus.DONE,
            "true_positives": strict["tp"],
            "false_positives": strict["fp"],
            "false_negatives": strict["fn"],
            "precision": strict["precision"],
            "recall": strict["recall"],
            "f1": strict["f1"],
            "cost_usd": add_usd(result.review_usd, result.verify_usd),
            "tokens": result.review_tokens + result.verify_tokens,
            "wall_seconds": result.wall_seconds,
            "error": result.error,
            "scores": json.dumps(result.to_scores()),
        }
        findings = [  # each EvalFinding field is a column of eval_findings
            {**asdict(f), "matched_label": result.pairs.get(index)}
            for index, f in enumerate(result.findings)
        ]
        await evals.store_case(self.db, run.id, result.case.id, case, findings)

    async def earlier_spend(self, run: ModelRun, case: Case) -> tuple[Cost, Cost]:
        """What earlier failed attempts at this case spent (it runs again on `--resume`):
        the run's totals keep counting it."""
        saved = json.loads(await evals.failed_case_scores(self.db, run.id, case.id) or "{}")
        return (
            Cost(saved.get("review_tokens", 0), saved.get("review_usd", 0.0)),
            Cost(saved.get("verify_tokens", 0), saved.get("verify_usd", 0.0)),
        )

    async def load_case(self, run: ModelRun, golden: Golden, case: Case) -> CaseResult | None:
        """A case this run already finished (on `--resume`), or None to run it (again)."""
        done = await evals.done_case(self.db, run.id, case.id)
        if done is None:
            return None
        stored, findings = done
        saved = json.loads(stored.scores or "{}")
        return CaseResult(
            case,
            str(golden.path),
            findings=[EvalFinding.of(f.ordinal, f) for f in findings],
            head_sha=stored.head_sha,
            notes=tuple(saved.get("notes", ())),
            wall_seconds=stored.wall_seconds or 0.0,
            verify_seconds=saved.get("verify_seconds", 0.0),
            review_tokens=saved.get("review_tokens", 0),
            review_usd=saved.get("review_usd"),
            verify_tokens=saved.get("verify_tokens", 0),
            verify_usd=saved.get("verify_usd"),
            verify_error=saved.get("verify_error"),
        )

    async def run_model(
        self, run: ModelRun, cases: Sequence[tuple[Golden, Case]], jobs: int
    ) -> None:
        started = time.monotonic()
        limit = asyncio.Semaphore(jobs)

        async def one(index: int, golden: Golden, case: Case) -> CaseResult:
            async with limit:
                result = await self.load_case(run, golden, case)
                if result is None:
                    earlier = await self.earlier_spend(run, case)
                    result = await self.run_case(run, golden, case, index)
                    result.add_spend(*earlier)
                if result.error is None:
                    try:
                        await self.score(result)
                    except AgentError as exc:
                        result.error = say(OPERATOR, "eval.judging_failed", error=exc)
                await self.store_case(run, result)
                self.progress.case_done(run, result)
                return result

        run.cases = list(
            await asyncio.gather(*(one(n, g, c) for n, (g, c) in enumerate(cases, start=1)))
        )
        run.wall_seconds = time.monotonic() - started
        await self.finish_model(run)

    async def finish_model(self, run: ModelRun) -> None:
        final = run.total(VERIFIED if run.verify else ALL)
        strict = final.strict
        tokens, usd, _ = variant_spend(run.cases, verify=True)  # failed ones too: it was spent
        scores = {name: run.total(name).to_dict() for name in (ALL, VERIFIED)}
        await evals.finish_run(
            self.db,
            run.id,
            status=RunStatus.FAILED if run.failed else RunStatus.DONE,
            precision=strict["precision"],
            recall=strict["recall"],
            f1=strict["f1"],
            cost_usd=usd,
            tokens=tokens,
            wall_seconds=run.wall_seconds,
            scores=json.dumps(scores),
        )


def resolve_models(settings: Settings, provider: str, models: Sequence[str]) -> tuple[str, ...]:
    if provider not in PROVIDERS:
        raise EvalError(say(OPERATOR, "eval.bad_option", why="provider", choices=PROVIDERS))
    chosen = tuple(m.strip() for m in models if m.strip()) or (default_model(settings, provider),)
    if len(set(chosen)) != len(chosen):
        raise EvalError(say(OPERATOR, "eval.bad_option", why="model_twice"))
    return chosen


def default_model(settings: Settings, provider: str) -> str:
    if provider == "claude":
        return settings.claude_model
    if provider == "codex":
        return settings.codex_model
    if settings.chat is None:
        raise EvalError(say(OPERATOR, "eval.bad_option", why="chat"))
    return settings.chat.model


async def _create_batch(
    db: SqliteDatabase, options: EvalOptions, verify_provider: str | None, judge: str
) -> list[ModelRun]:
    ids = await evals.create_runs(
        db,
        [
            {
                "golden": json.dumps(list(options.goldens)),
                "provider": options.provider,
                "model": model,
                "verify": int(options.verify),
                "verify_provider": verify_provider,
                "judge": judge,
                "options": options.to_json(),
            }
            for model in options.models
        ],
    )
    return [
        ModelRun(run_id, options.provider, model, options.verify, verify_provider)
        for run_id, model in zip(ids, options.models, strict=True)
    ]


async def _load_batch(db: SqliteDatabase, batch: int) -> tuple[EvalOptions, list[ModelRun]]:
    found = await evals.resume_batch(db, batch)
    if not found:
        raise EvalError(say(OPERATOR, "eval.bad_option", why="no_run", batch=batch))
    options = EvalOptions.from_json(found[0].options)
    runs = [ModelRun(r.id, r.provider, r.model, r.verify, r.verify_provider) for r in found]
    return options, runs


async def run_eval(
    settings: Settings,
    options: EvalOptions | None,
    progress: ProgressSink,
    *,
    resume: int | None = None,
) -> EvalResult:
    """Run (or resume) an eval; results are stored as they come, so an interrupted run
    loses at most the cases in flight."""
    db = await SqliteDatabase.open(settings.db_path)
    models = ModelClients(settings)
    try:
        # Eval conversations go as the server's go, 30 days on (an eval may be the only
        # user of its data folder, with no server's maintenance to do it).
        await prune_detached_sessions(db, time.time() - CONVERSATION_TTL, PRUNE_CHUNK)
        if resume is not None:
            options, runs = await _load_batch(db, resume)
        elif options is None:
            raise EvalError(say(OPERATOR, "eval.bad_option", why="nothing"))
        try:
            goldens = [load_golden(path, repository=options.repo) for path in options.goldens]
            judge = make_judge(options.judge, db, models, options.judge_model)
        except (ValueError, AgentError) as exc:
            raise EvalError(str(exc)) from exc
        verify_provider = None
        if options.verify:
            verify_provider = choose_provider(options.provider, None, models.available())
        if resume is None:
            runs = await _create_batch(db, options, verify_provider, options.judge)
        cases = [(golden, case) for golden in goldens for case in golden.cases]
        result = EvalResult(
            runs[0].id if resume is None else resume,
            options,
            goldens,
            runs,
            judge.name,
            judge.model,
        )
        repositories = sorted({case.repository for _, case in cases})
        before = {repo: await fingerprint(repo) for repo in repositories}
        progress.start(result, len(cases) * len(runs), resumed=resume is not None)
        runner = Runner(settings, db, models, Sources.under(settings.data_dir), judge, progress)
        try:
            for run in runs:
                await runner.run_model(run, cases, max(1, options.jobs))
        finally:
            progress.finish()
        after = {repo: await fingerprint(repo) for repo in repositories}
        result.source_changed = [repo for repo in repositories if before[repo] != after[repo]]
        if result.source_changed:
            await evals.fail_batch(db, result.batch)
        result.judge_tokens = getattr(judge, "tokens", 0)
        result.judge_usd = getattr(judge, "cost_usd", 0.0)
        result.judge_unreadable = getattr(judge, "unreadable", 0)
        return result
    finally:
        await models.close()
        await db.close()
