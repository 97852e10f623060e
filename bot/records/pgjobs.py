"""The Postgres job queue's rows: procrastinate's `procrastinate_jobs`, as `bot.queue`'s
procrastinate backend reads them (procrastinate's own manager writes them, but for the two
repairs here)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from bot.records.database import Database
from bot.records.vocab import JobState

STATES = {  # procrastinate's statuses as the SQLite queue names them
    "todo": JobState.QUEUED,
    "doing": JobState.RUNNING,
    "succeeded": JobState.DONE,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELLED,
    "aborted": JobState.CANCELLED,
}


async def open_ids(conn: Any, task: str, key: str, kind: str | None) -> list[int]:
    """The key's jobs in line or running (of `kind`, if given), newest first: the jobs in
    line before the running one (inside the caller's transaction)."""
    cursor = await conn.execute(
        "SELECT id FROM procrastinate_jobs WHERE lock = ? AND task_name = ?"
        " AND status IN ('todo', 'doing')"
        + (" AND args->>'kind' = ?" if kind else "")
        + " ORDER BY id DESC",
        (key, task, kind) if kind else (key, task),
    )
    return [row[0] for row in await cursor.fetchall()]


async def busy(db: Database, key: str) -> bool:
    """Whether the key has a job running or in line."""
    row = await db.fetchone(
        "SELECT 1 FROM procrastinate_jobs WHERE lock = ? AND status IN ('todo', 'doing') LIMIT 1",
        (key,),
    )
    return row is not None


async def pending(db: Database) -> int:
    """Jobs with work to do now: running, or waiting and due."""
    row = await db.fetchone(
        "SELECT COUNT(*) FROM procrastinate_jobs WHERE status = 'doing'"
        " OR (status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now()))"
    )
    return int(row[0]) if row else 0


async def counts(db: Database) -> dict[str, int]:
    rows = await db.fetchall(
        "SELECT status::text AS state, COUNT(*) AS n FROM procrastinate_jobs GROUP BY status"
    )
    found: Counter[str] = Counter()
    for row in rows:  # two statuses are one state
        found[STATES.get(row["state"], row["state"])] += int(row["n"])
    return dict(found)


async def states(db: Database, task: str, kind: str | None, key: str | None) -> list[str]:
    """The states of the task's jobs of a kind and/or key, oldest first."""
    rows = await db.fetchall(
        "SELECT status::text AS state FROM procrastinate_jobs WHERE task_name = ?"
        " AND (?::text IS NULL OR args->>'kind' = ?) AND (?::text IS NULL OR lock = ?)"
        " ORDER BY id",
        (task, kind, kind, key, key),
    )
    return [STATES.get(row["state"], row["state"]) for row in rows]


async def put_back(db: Database, job_id: int, worker_id: int | None, attempts: int) -> tuple:
    """A job interrupted when its worker stopped goes back in line with the attempts it had:
    still `doing` under that worker (its retry could not be written) it is retried; retried
    already (an attempt counted) it gets it back. A job another worker took meanwhile is left
    alone. Returns what was found (status, worker, attempts; empty when it is gone)."""
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "SELECT status::text, worker_id, attempts FROM procrastinate_jobs"
            " WHERE id = ? FOR UPDATE",
            (job_id,),
        )
        row = await cursor.fetchone()
        if row is not None and row[0] == "doing" and row[1] in (worker_id, None):
            await conn.execute(
                "SELECT procrastinate_retry_job_v2(?, now(), NULL, NULL, NULL)", (job_id,)
            )
            row = ("todo", None, attempts + 1)
        if row is not None and row[0] == "todo" and row[2] == attempts + 1:
            await conn.execute(
                "UPDATE procrastinate_jobs SET attempts = ? WHERE id = ?", (attempts, job_id)
            )
    return tuple(row or ())
