"""`cockpit eval run`: golden cases replayed through the production review pipeline, scored."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from bot.agents.base import AgentError, Budget
from bot.agents.providers import ModelClients
from bot.config import PROVIDERS, Settings
from bot.evals.golden import Case, load_golden
from bot.evals.judges import EvalFinding, Judge, make_judge
from bot.evals.results import (
    CaseFigures,
    CaseResult,
    CaseScores,
    Cost,
    EvalOptions,
    EvalResult,
    ModelRun,
    ProgressSink,
    case_figures,
    run_figures,
)
from bot.evals.scoring import ALL, VARIANTS, VERIFIED, Counts, Drafted, score_case
from bot.evals.sources import Sources, display_name, fingerprint
from bot.records import evals
from bot.records.runs import session_spend as ledger_spend
from bot.records.sessions import end_session, prune_detached_sessions
from bot.records.sqlite import SqliteDatabase
from bot.records.vocab import RunStatus, VerifyStatus
from bot.review.pipeline import Reviewer, ReviewRequest, review_worktree
from bot.review.verify import apply_verification, choose_provider, verify_draft, verify_unverified
from bot.texts import OPERATOR, say
from bot.workers import CONVERSATION_TTL, PRUNE_CHUNK
from bot.worktrees import GitError, Mirrors


class EvalError(Exception):
    """The eval cannot start; exit code 2."""


async def session_spend(db: SqliteDatabase, session_id: int) -> tuple[Cost, Cost]:
    """(review, verify) spend of a case's session and those it started, failed runs included."""
    review, verify = Cost(), Cost()
    for subkind, tokens, usd in await ledger_spend(db, session_id):
        if subkind == "verify":
            verify += Cost(tokens, usd)
        else:
            review += Cost(tokens, usd)
    return review, verify


@dataclass
class Runner:
    settings: Settings
    db: SqliteDatabase
    models: ModelClients
    sources: Sources
    judge: Judge
    progress: ProgressSink
    passes: int = 1  # `eval run --passes`

    async def run_case(self, run: ModelRun, case: Case, index: int) -> CaseResult:
        """What it spent comes from its runs: a case that fails half-way still counts it."""
        result = CaseResult(case=case)
        started = time.monotonic()
        prepared = None
        sessions: list[int] = []

        async def opened(session_id: int) -> None:
            sessions.append(session_id)

        try:
            prepared = await self.sources.prepare(case, f"eval-{run.id}-{index}")
            result.head_sha, result.notes = prepared.tree.head_sha, prepared.notes
            reviewer = Reviewer(self.db, self.models, Budget(max_usd=self.settings.review_max_usd))
            config = await self.sources.repo_config(prepared.key)
            request = ReviewRequest(
                repo=display_name(case.repository),
                number=case.pr or 0,
                title=case.title,
                body=case.body,
                base_ref=case.base_ref or say(OPERATOR, "eval.default_branch"),
                provider=run.provider,
                config=msgspec.structs.replace(config, passes=self.passes),
                model=run.model,
            )
            draft = await review_worktree(reviewer, prepared.tree, request, on_session=opened)
            rows = draft.findings
            result.passes = {n: draft.raised[f] for n, f in enumerate(rows, 1) if f in draft.raised}
            verify_started = time.monotonic()
            if run.verify and rows:
                assert run.verify_provider is not None
                verification = await verify_draft(
                    reviewer, prepared.tree, request, draft, provider=run.verify_provider
                )
                result.verify_error = verification.error
                rows = apply_verification(rows, verification)
            elif draft.once:  # as production: what one pass only raised is verified anyway
                provider = choose_provider(run.provider, None, self.models.available())
                rows, result.verify_error = await verify_unverified(
                    reviewer,
                    prepared.tree,
                    request,
                    draft,
                    provider=provider,
                    todo=[n for n, f in enumerate(rows) if f in draft.once],
                )
            result.verify_seconds = time.monotonic() - verify_started
            result.findings = [EvalFinding.of(n, r) for n, r in enumerate(rows, start=1)]
            result.rules = draft.rules
            result.in_diff = tuple(n for n, r in enumerate(rows, start=1) if r.in_diff)
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

    async def score(self, run: ModelRun, result: CaseResult) -> None:
        case = result.case
        scores = await self.judge.scores(result.findings, case.labels)
        known = None
        if case.known_false_positives and result.findings:
            fp_scores = await self.judge.scores(result.findings, case.known_false_positives)
            known = [any(s > 0 for s in row) for row in fp_scores]
        labels = len(case.labels)
        result.counts = {ALL: score_case(scores, labels, known_fp=known)[0]}  # stored counts go
        kept = [f.verify_status != VerifyStatus.REFUTED for f in result.findings]
        result.counts[VERIFIED], result.pairs = score_case(
            scores, labels, kept=kept, known_fp=known
        )
        if result.rules is None:  # stored by a version that did not keep them
            return
        drafted = [
            Drafted(
                f.ordinal,
                f.severity,
                f.verify_status,
                f.ordinal in result.in_diff,
                f.confidence,
                passes=result.passes.get(f.ordinal, ()),
            )
            for f in result.findings
        ]
        for variant in VARIANTS:
            if variant.several_passes and self.passes < 2:
                continue
            for verified in variant.entries(run.verify):
                chosen, summarised = variant.chosen(drafted, result.rules, verified)
                counts = score_case(scores, labels, kept=chosen, known_fp=known)[0]
                result.counts[variant.key(verified)] = msgspec.structs.replace(
                    counts, summarised=summarised
                )

    async def store_case(self, run: ModelRun, result: CaseResult) -> CaseFigures:
        figures = case_figures(result, run.verify)
        strict = figures.strict or Counts().strict  # a failed case stores no score
        case = {
            "pr": result.case.pr or 0,
            "head_sha": result.head_sha,
            "true_positives": strict["tp"],
            "false_positives": strict["fp"],
            "false_negatives": strict["fn"],
            "error": result.error,
            "scores": msgspec.json.encode(result.scores()).decode(),
            **_totals(figures, strict, result.error, result.wall_seconds),
        }
        findings = [  # each EvalFinding field is a column of eval_findings
            {**asdict(f), "matched_label": result.pairs.get(index)}
            for index, f in enumerate(result.findings)
        ]
        await evals.store_case(self.db, run.id, result.case.id, case, findings)
        return figures

    async def load_case(self, run: ModelRun, case: Case) -> CaseResult | None:
        done = await evals.done_case(self.db, run.id, case.id)
        if done is None:
            return None
        stored, findings = done
        return CaseResult(
            case=case,
            findings=[EvalFinding.of(f.ordinal, f) for f in findings],
            head_sha=stored.head_sha,
            wall_seconds=stored.wall_seconds or 0.0,
            **msgspec.structs.asdict(_scores(stored.scores)),
        )

    async def run_model(self, run: ModelRun, cases: Sequence[Case], jobs: int) -> None:
        started = time.monotonic()
        limit = asyncio.Semaphore(jobs)

        async def one(index: int, case: Case) -> CaseResult:
            async with limit:
                result = await self.load_case(run, case)
                if result is None:
                    # What earlier failed attempts at this case spent: the totals keep it.
                    failed = await evals.failed_case_scores(self.db, run.id, case.id)
                    result = await self.run_case(run, case, index)
                    result.add_spend(*_scores(failed).spent())
                if result.error is None:
                    try:
                        await self.score(run, result)
                    except AgentError as exc:
                        result.error = say(OPERATOR, "eval.judging_failed", error=exc)
                self.progress.case_done(run, result, await self.store_case(run, result))
                return result

        run.cases = list(await asyncio.gather(*(one(n, c) for n, c in enumerate(cases, start=1))))
        run.wall_seconds = time.monotonic() - started


def _scores(text: str | None) -> CaseScores:
    return msgspec.json.decode(text or "{}", type=CaseScores)


async def finish_run(db: SqliteDatabase, result: EvalResult, run: ModelRun) -> None:
    figures = run_figures(result, run, run.verify)
    keys = [ALL, VERIFIED, *(v.key(w) for v in VARIANTS for w in v.entries(run.verify))]
    totals_by = {name: run.total(name) for name in keys if run.scored(name)}
    scores = msgspec.json.encode(totals_by).decode()
    totals = _totals(figures, figures.strict, run.failed, run.wall_seconds)
    await evals.finish_run(db, run.id, scores=scores, **totals)


def _totals(figures: Any, strict: Any, failed: object, seconds: float) -> dict[str, Any]:
    """The columns a case's row and a run's row share (`figures`: a case's or a run's)."""
    return {
        "status": RunStatus.FAILED if failed else RunStatus.DONE,
        **{key: strict[key] for key in ("precision", "recall", "f1")},
        "cost_usd": figures.usd,
        "tokens": figures.tokens,
        "wall_seconds": seconds,
    }


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


async def _read_batch(db: SqliteDatabase, batch: int) -> tuple[EvalOptions, list[ModelRun]]:
    found = await evals.resume_batch(db, batch)
    if not found:
        raise EvalError(say(OPERATOR, "eval.bad_option", why="no_run", batch=batch))
    runs = [ModelRun(r.id, r.provider, r.model, r.verify, r.verify_provider) for r in found]
    return msgspec.json.decode(found[0].options, type=EvalOptions), runs


async def run_eval(
    settings: Settings,
    options: EvalOptions | None,
    progress: ProgressSink,
    *,
    resume: int | None = None,
) -> EvalResult:
    """Results are stored as they come (an interrupted run loses the cases in flight). Nothing
    here can reach GitHub, and the sources are only read: fingerprints are compared after."""
    db = await SqliteDatabase.open(settings.db_path)
    models = ModelClients(settings)
    try:
        # Eval conversations go as the server's go, 30 days on (an eval may be the only
        # user of its data folder, with no server's maintenance to do it).
        await prune_detached_sessions(db, time.time() - CONVERSATION_TTL, PRUNE_CHUNK)
        if resume is not None:
            options, runs = await _read_batch(db, resume)
        elif options is None:
            raise EvalError(say(OPERATOR, "eval.bad_option", why="nothing"))
        try:
            goldens = {path: load_golden(path, repository=options.repo) for path in options.goldens}
            judge = make_judge(options.judge, db, models, options.judge_model)
        except (ValueError, AgentError) as exc:
            raise EvalError(str(exc)) from exc
        if resume is None:  # stored first, then read back as a resumed batch is
            verify_provider = None
            if options.verify:
                verify_provider = choose_provider(options.provider, None, models.available())
            rows = [
                {
                    "golden": json.dumps(list(options.goldens)),
                    "provider": options.provider,
                    "model": model,
                    "verify": int(options.verify),
                    "verify_provider": verify_provider,
                    "judge": options.judge,
                    "options": msgspec.json.encode(options).decode(),
                }
                for model in options.models
            ]
            options, runs = await _read_batch(db, (await evals.create_runs(db, rows))[0])
        result = EvalResult(runs[0].id, options, goldens, runs, judge)
        cases = [case for golden in goldens.values() for case in golden.cases]
        repositories = sorted({case.repository for case in cases})
        before = {repo: await fingerprint(repo) for repo in repositories}
        progress.start(result, len(cases) * len(runs), resumed=resume is not None)
        runner = Runner(
            settings,
            db,
            models,
            Sources(Mirrors(settings.data_dir / "eval")),
            judge,
            progress,
            max(1, options.passes),
        )
        try:
            for run in runs:
                await runner.run_model(run, cases, max(1, options.jobs))
                await finish_run(db, result, run)
        finally:
            progress.finish()
        after = {repo: await fingerprint(repo) for repo in repositories}
        result.source_changed = [repo for repo in repositories if before[repo] != after[repo]]
        if result.source_changed:
            await evals.fail_batch(db, result.batch)
        return result
    finally:
        await models.close()
        await db.close()
