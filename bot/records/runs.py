"""Model runs (one `runs` row per model execution) and their spend."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from bot.records.database import Database, delete_in_chunks, marks

# Run starts take this lock (Postgres: a transaction advisory lock; SQLite's BEGIN IMMEDIATE
# already excludes every other writer), so two runs cannot both take an installation's last
# slot. Starts are a few a minute and the critical section two indexed statements.
RUN_START_LOCK = "daily-budget"
_SPENT = (
    "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM runs"
    " WHERE COALESCE(installation_id, 0) = COALESCE(?, 0) AND started_at >= ?"
)
# Told what the run's installation had spent since the day began before this run (runs,
# USD); refuses the run by raising (bot.agents.budget.DailyBudgetSpent), which rolls its row
# back.
Admit = Callable[[int, float], None]


@dataclass(frozen=True)
class NewRun:
    kind: str
    subkind: str | None
    session_id: int
    review_id: int | None
    provider: str
    model: str
    skill_version_id: int | None
    started_at: float


async def start_run(db: Database, run: NewRun, *, since: float, admit: Admit | None) -> int:
    """The run's row, charged to its PR's installation (a schema trigger does that) and kept
    only when `admit` does not raise, in one transaction under RUN_START_LOCK."""
    values = asdict(run)
    async with db.transaction(lock=RUN_START_LOCK) as conn:
        cursor = await conn.execute(
            f"INSERT INTO runs ({', '.join(values)}) VALUES ({marks(values)}) RETURNING id",
            tuple(values.values()),
        )
        run_id = (await cursor.fetchone())[0]
        if admit is not None:  # SQLite's RETURNING is before its trigger charged the run
            cursor = await conn.execute("SELECT installation_id FROM runs WHERE id = ?", (run_id,))
            installation_id = (await cursor.fetchone())[0]
            cursor = await conn.execute(_SPENT, (installation_id, since))
            runs, usd = await cursor.fetchone()
            admit(int(runs) - 1, float(usd))  # this run is counted, at no cost yet
    return run_id


async def finish_run(
    db: Database,
    run_id: int,
    usage: Mapping[str, Any],
    costs: Mapping[str, float | None],
    *,
    status: str,
    error: str | None,
    tool_calls: int,
    cost_usd: float | None,
) -> None:
    """The run's end: its usage per model (`usage[model]` has the four token counts) and
    costs, its outcome."""
    async with db.transaction() as conn:
        for model, u in usage.items():
            await conn.execute(
                "INSERT INTO run_usage (run_id, model, input_tokens, output_tokens,"
                " cache_read_tokens, cache_write_tokens, cost_usd)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    model,
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_tokens,
                    u.cache_write_tokens,
                    costs[model],
                ),
            )
        await conn.execute(
            "UPDATE runs SET status = ?, error = ?, tool_calls = ?, cost_usd = ?,"
            " finished_at = ? WHERE id = ?",
            (status, error, tool_calls, cost_usd, time.time(), run_id),
        )


async def close_interrupted_runs(db: Database) -> int:
    """At start-up: runs a dead process left `running` end as failed; their usage was not
    recorded, so their cost stays unknown."""
    return await db.execute(
        "UPDATE runs SET status = 'failed', error = 'interrupted by a restart', finished_at = ?"
        " WHERE status = 'running'",
        (time.time(),),
    )


async def spent_since(db: Database, installation_id: int | None, since: float) -> tuple[int, float]:
    """(runs, USD) the installation's model runs have cost since `since` (an unknown cost
    counts as 0)."""
    row = await db.fetchone(_SPENT, (installation_id, since))
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


async def review_costs(db: Database, review_id: int) -> list[tuple[str, int, float | None]]:
    """Per provider, in first-use order: the review's model runs (its own, its verify pass,
    cross-review turns and revisions) and their USD (None when any run's cost is unknown)."""
    rows = await db.fetchall(
        "SELECT provider, cost_usd FROM runs WHERE review_id = ? ORDER BY id", (review_id,)
    )
    by_provider: dict[str, list[float | None]] = {}
    for row in rows:
        by_provider.setdefault(row["provider"], []).append(row["cost_usd"])
    return [
        (provider, len(costs), None if None in costs else sum(c for c in costs if c is not None))
        for provider, costs in by_provider.items()
    ]


async def pass_costs(db: Database, review_id: int) -> list[tuple[int, int, float | None]]:
    """A review in several passes (`passes`): per pass, its model runs (`subkind` `pass-N`)
    and their USD (None when any run's cost is unknown); empty for a review of one pass."""
    rows = await db.fetchall(
        "SELECT subkind, cost_usd FROM runs WHERE review_id = ? AND subkind LIKE 'pass-%'"
        " ORDER BY id",
        (review_id,),
    )
    by_pass: dict[int, list[float | None]] = {}
    for row in rows:
        by_pass.setdefault(int(row["subkind"].removeprefix("pass-")), []).append(row["cost_usd"])
    return [
        (number, len(costs), None if None in costs else sum(c for c in costs if c is not None))
        for number, costs in sorted(by_pass.items())
    ]


async def session_cost(db: Database, session_id: int) -> float | None:
    """USD of the session's runs; None when any run's cost is unknown."""
    rows = await db.fetchall("SELECT cost_usd FROM runs WHERE session_id = ?", (session_id,))
    costs = [row["cost_usd"] for row in rows]
    return None if None in costs else sum(c for c in costs if c is not None)


async def session_spend(
    db: Database, session_id: int
) -> list[tuple[str | None, int, float | None]]:
    """(subkind, tokens, USD) of every run of the session and of the sessions started from
    it (a verify pass), failed runs included; USD None when a model has no known rate."""
    rows = await db.fetchall(
        "SELECT r.subkind, r.cost_usd, (SELECT COALESCE(SUM(u.input_tokens + u.output_tokens"
        " + u.cache_read_tokens + u.cache_write_tokens), 0) FROM run_usage u"
        " WHERE u.run_id = r.id) AS tokens FROM runs r WHERE r.session_id IN"
        " (SELECT id FROM sessions WHERE id = ? OR parent_session_id = ?)",
        (session_id, session_id),
    )
    return [(row["subkind"], int(row["tokens"]), row["cost_usd"]) for row in rows]


async def prune_runs(db: Database, older_than: float, chunk: int) -> int:
    """Delete the runs started before `older_than` whose review and session are gone
    (retention pruned them; their figures stay in `review_figures`), and their usage, `chunk`
    rows at a time. A run something still shows (a review's or a session's cost) stays."""
    gone = (
        "SELECT u.id FROM runs u WHERE u.started_at < ?"
        " AND NOT EXISTS (SELECT 1 FROM reviews r WHERE r.id = u.review_id)"
        " AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = u.session_id)"
    )
    return await delete_in_chunks(
        db,
        older_than,
        chunk,
        f"DELETE FROM run_usage WHERE run_id IN ({gone}"
        " AND u.id IN (SELECT run_id FROM run_usage) LIMIT ?)",
        f"DELETE FROM runs WHERE id IN ({gone} LIMIT ?)",
    )
