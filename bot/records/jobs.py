"""The SQLite job queue's rows (`jobs`): the only module that writes them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from bot.records.database import Database, delete_in_chunks
from bot.records.types import Job
from bot.records.vocab import UNFINISHED_JOB, JobState, sql_in

_INSERT = (
    "INSERT INTO jobs (kind, queue, key, payload, max_attempts, run_after, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def new_row(
    kind: str,
    key: str,
    payload: dict[str, Any],
    *,
    queue: str,
    max_attempts: int,
    delay: float,
    now: float,
) -> tuple:
    return (kind, queue, key, json.dumps(payload), max_attempts, now + delay, now)


async def insert(conn: Any, row: tuple) -> int:
    cursor = await conn.execute(_INSERT + " RETURNING id", row)
    return (await cursor.fetchone())[0]


def insert_many(conn: sqlite3.Connection, rows: list[tuple]) -> None:
    """On a plain sqlite3 connection, inside its transaction (the inbox's commit)."""
    conn.executemany(_INSERT, rows)


async def cancel_in(conn: Any, key: str, kind: str | None, now: float) -> list[int]:
    """Returns the ids of the key's running jobs, which the caller interrupts."""
    kind_clause = " AND kind = ?" if kind else ""
    args: tuple = (key, kind) if kind else (key,)
    # The jobs in line first: the head's exit then moves up only a job that stays.
    for state in (JobState.WAITING, JobState.QUEUED):
        await conn.execute(
            "UPDATE jobs SET state = 'cancelled', finished_at = ?, error = 'superseded'"
            f" WHERE key = ? AND state = '{state}'{kind_clause}",
            (now, *args),
        )
    cursor = await conn.execute(
        f"SELECT id FROM jobs WHERE key = ? AND state = 'running'{kind_clause}", args
    )
    return [row[0] for row in await cursor.fetchall()]


async def count_open(conn: Any, key: str, kind: str | None) -> int:
    cursor = await conn.execute(
        f"SELECT COUNT(*) FROM jobs WHERE key = ? AND state IN {sql_in(UNFINISHED_JOB)}"
        + (" AND kind = ?" if kind else ""),
        (key, kind) if kind else (key,),
    )
    return int((await cursor.fetchone())[0])


async def claim(db: Database, queue: str, now: float, lease_until: float) -> Job | None:
    """Only heads of their keys' lines, due, with attempts left, whose key runs nothing else;
    its attempt is counted."""
    return await Job.one(
        db,
        "UPDATE jobs SET state = 'running', attempts = attempts + 1,"
        " started_at = ?, lease_until = ?"
        " WHERE id = (SELECT j.id FROM jobs j WHERE j.queue = ? AND j.state = 'queued'"
        "   AND j.run_after <= ? AND j.attempts < j.max_attempts"
        "   AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.key = j.key AND r.state = 'running')"
        "   ORDER BY j.run_after, j.id LIMIT 1)"
        " RETURNING *",
        (now, lease_until, queue, now),
    )


async def finish(db: Database, job_id: int, state: str, error: str | None, now: float) -> None:
    await db.execute(
        "UPDATE jobs SET state = ?, error = ?, finished_at = ?, lease_until = NULL"
        " WHERE id = ? AND state = 'running'",
        (state, error, now, job_id),
    )


async def retry_at(db: Database, job_id: int, error: str, run_after: float) -> None:
    await db.execute(
        "UPDATE jobs SET state = 'queued', error = ?, run_after = ?, lease_until = NULL"
        " WHERE id = ? AND state = 'running'",
        (error, run_after, job_id),
    )


async def requeue_uncounted(db: Database, job_id: int, now: float) -> None:
    await db.execute(
        "UPDATE jobs SET state = 'queued', attempts = MAX(attempts - 1, 0), lease_until = NULL,"
        " run_after = ? WHERE id = ? AND state = 'running'",
        (now, job_id),
    )


async def renew_lease(db: Database, job_id: int, until: float) -> None:
    await db.execute(
        "UPDATE jobs SET lease_until = ? WHERE id = ? AND state = 'running'", (until, job_id)
    )


async def requeue_lost(
    db: Database,
    now: float,
    lost: Callable[[Job], str],
    *,
    expired_before: float | None = None,
    alive: list[int] = (),
) -> tuple[list[Job], int]:
    """Jobs left running by a dead process (with `expired_before`, those whose lease ended
    before it and that are not `alive` here) go back in line, their attempt counted; those at
    their limit fail for good instead. Returns (those, how many went back in line)."""
    where, args = "state = 'running'", ()
    if expired_before is not None:
        where += f" AND lease_until < ? AND id NOT IN ({','.join('?' * len(alive))})"
        args = (expired_before, *alive)
    async with db.transaction() as conn:
        cursor = await conn.execute(
            f"UPDATE jobs SET state = 'failed', lease_until = NULL, finished_at = ?"
            f" WHERE {where} AND attempts >= max_attempts RETURNING *",
            (now, *args),
        )
        exhausted = [Job.from_row(row) for row in await cursor.fetchall()]
        for job in exhausted:
            await conn.execute("UPDATE jobs SET error = ? WHERE id = ?", (lost(job), job.id))
        cursor = await conn.execute(
            f"UPDATE jobs SET state = 'queued', lease_until = NULL, run_after = ? WHERE {where}",
            (now, *args),
        )
        return exhausted, cursor.rowcount


async def busy(db: Database, key: str) -> bool:
    row = await db.fetchone(
        f"SELECT 1 FROM jobs WHERE key = ? AND state IN {sql_in(UNFINISHED_JOB)} LIMIT 1",
        (key,),
    )
    return row is not None


async def in_line_behind(db: Database, key: str, job_id: int) -> bool:
    row = await db.fetchone(
        "SELECT 1 FROM jobs WHERE key = ? AND state IN ('queued', 'waiting') AND id != ?",
        (key, job_id),
    )
    return row is not None


async def pending(db: Database, now: float) -> int:
    """Jobs with work to do now: running, waiting in a line, or queued and due."""
    row = await db.fetchone(
        "SELECT COUNT(*) FROM jobs WHERE state IN ('running', 'waiting')"
        " OR (state = 'queued' AND run_after <= ?)",
        (now,),
    )
    return row[0] if row else 0


async def counts(db: Database) -> dict[str, int]:
    rows = await db.fetchall("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
    return {row["state"]: row["n"] for row in rows}


async def prune(db: Database, older_than: float, chunk: int) -> int:
    return await delete_in_chunks(
        db,
        older_than,
        chunk,
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs"
        " WHERE state IN ('done', 'failed', 'cancelled')"
        " AND COALESCE(finished_at, created_at) < ? LIMIT ?)",
    )


# At every start, so the lines are right whatever happened before: jobs behind their key's
# oldest (databases from before 'waiting') wait; a line without a head gets one.
REPAIR_LINES = """
UPDATE jobs SET state = 'waiting' WHERE state = 'queued' AND EXISTS (
    SELECT 1 FROM jobs r WHERE r.key = jobs.key
    AND r.state IN ('queued', 'running') AND r.id < jobs.id);
UPDATE jobs SET state = 'queued' WHERE state = 'waiting'
    AND id IN (SELECT MIN(id) FROM jobs WHERE state = 'waiting' GROUP BY key)
    AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.key = jobs.key
        AND r.state IN ('queued', 'running'));
"""
