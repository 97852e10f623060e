"""Eval replays' records: runs, their cases and findings, and the LLM judge's answers."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from bot.records.database import Database, marks
from bot.records.types import EvalCase, EvalRun, Pull, Review, StoredEvalFinding
from bot.records.vocab import RunStatus


async def create_runs(db: Database, runs: Sequence[Mapping[str, Any]]) -> list[int]:
    """One `eval_runs` row per mapping, all in one batch named by the first one's id."""
    ids: list[int] = []
    for values in runs:
        row = {**values, "status": RunStatus.RUNNING, "batch": ids[0] if ids else None}
        row["started_at"] = time.time()
        [run_id] = await db.fetchone(
            f"INSERT INTO eval_runs ({', '.join(row)}) VALUES ({marks(row)}) RETURNING id",
            tuple(row.values()),
        )
        if not ids:
            await db.execute("UPDATE eval_runs SET batch = ? WHERE id = ?", (run_id, run_id))
        ids.append(run_id)
    return ids


async def resume_batch(db: Database, batch: int) -> list[EvalRun]:
    runs = await EvalRun.all(db, "SELECT * FROM eval_runs WHERE batch = ? ORDER BY id", (batch,))
    await db.execute(
        "UPDATE eval_runs SET status = 'running', finished_at = NULL WHERE batch = ?", (batch,)
    )
    return runs


async def finish_run(db: Database, run_id: int, **values: Any) -> None:
    values["finished_at"] = time.time()
    await db.execute(
        f"UPDATE eval_runs SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
        (*values.values(), run_id),
    )


async def fail_batch(db: Database, batch: int) -> None:
    await db.execute("UPDATE eval_runs SET status = 'failed' WHERE batch = ?", (batch,))


async def store_case(
    db: Database,
    run_id: int,
    case_id: str,
    case: Mapping[str, Any],
    findings: Sequence[Mapping[str, Any]],
) -> None:
    """A case's outcome and its findings, in place of what the run stored for it before."""
    async with db.transaction() as conn:
        await conn.execute(
            "DELETE FROM eval_findings WHERE eval_case_id IN (SELECT id FROM eval_cases"
            " WHERE eval_run_id = ? AND case_id = ?)",
            (run_id, case_id),
        )
        await conn.execute(
            "DELETE FROM eval_cases WHERE eval_run_id = ? AND case_id = ?", (run_id, case_id)
        )
        cursor = await conn.execute(
            f"INSERT INTO eval_cases (eval_run_id, case_id, {', '.join(case)})"
            f" VALUES (?, ?, {marks(case)})"
            " RETURNING id",
            (run_id, case_id, *case.values()),
        )
        case_key = (await cursor.fetchone())[0]
        if findings:
            await conn.executemany(
                f"INSERT INTO eval_findings (eval_case_id, {', '.join(findings[0])})"
                f" VALUES (?, {marks(findings[0])})",
                [(case_key, *finding.values()) for finding in findings],
            )


async def done_case(
    db: Database, run_id: int, case_id: str
) -> tuple[EvalCase, list[StoredEvalFinding]] | None:
    case = await EvalCase.one(
        db,
        "SELECT * FROM eval_cases WHERE eval_run_id = ? AND case_id = ? AND status = 'done'",
        (run_id, case_id),
    )
    if case is None:
        return None
    findings = await StoredEvalFinding.all(
        db, "SELECT * FROM eval_findings WHERE eval_case_id = ? ORDER BY ordinal", (case.id,)
    )
    return case, findings


async def failed_case_scores(db: Database, run_id: int, case_id: str) -> str | None:
    row = await db.fetchone(
        "SELECT scores FROM eval_cases WHERE eval_run_id = ? AND case_id = ? AND status = 'failed'",
        (run_id, case_id),
    )
    return row["scores"] if row is not None else None


async def judgement(db: Database, keys: tuple[str, str, str, str]) -> tuple | None:
    row = await db.fetchone(
        "SELECT match, confidence, reasoning FROM eval_judgements WHERE judge = ? AND"
        " model = ? AND finding_key = ? AND label_key = ?",
        keys,
    )
    return (bool(row["match"]), row["confidence"], row["reasoning"] or "") if row else None


async def store_judgement(
    db: Database,
    keys: tuple[str, str, str, str],
    match: bool,
    confidence: float | None,
    reasoning: str,
) -> None:
    await db.execute(
        "INSERT INTO eval_judgements (judge, model, finding_key, label_key, match, confidence,"
        " reasoning, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (judge, model, finding_key, label_key) DO UPDATE SET"
        " match = excluded.match, confidence = excluded.confidence,"
        " reasoning = excluded.reasoning, created_at = excluded.created_at",
        (*keys, int(match), confidence, reasoning, time.time()),
    )


async def posted_reviews(db: Database, repo: str, posted: str) -> list[tuple[Review, Pull]]:
    """The newest `posted` review of each of the repository's PRs, by PR number."""
    reviews = await Review.all(
        db,
        "SELECT r.* FROM reviews r JOIN pulls p ON p.id = r.pull_id WHERE p.repo = ? AND"
        " r.state = ? AND r.id = (SELECT MAX(id) FROM reviews WHERE pull_id = r.pull_id"
        " AND state = ?) ORDER BY p.number",
        (repo, posted, posted),
    )
    pulls = await Pull.all(db, "SELECT * FROM pulls WHERE repo = ?", (repo,))
    by_id = {pull.id: pull for pull in pulls}
    return [(review, by_id[review.pull_id]) for review in reviews]


async def repos_with_reviews(db: Database, posted: str) -> list[str]:
    rows = await db.fetchall(
        "SELECT DISTINCT p.repo FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        " WHERE r.state = ? ORDER BY p.repo",
        (posted,),
    )
    return [row["repo"] for row in rows]
