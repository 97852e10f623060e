"""The one write to procrastinate's `procrastinate_jobs` outside its own API (`put_back`)."""

from __future__ import annotations

from bot.records.database import Database


async def put_back(db: Database, job_id: int, worker_id: int | None, attempts: int) -> tuple:
    """A job interrupted when its worker stopped goes back in line with the attempts it had:
    still `doing` under that worker (its retry could not be written) it is retried; retried
    already (an attempt counted) it gets it back. A job another worker took meanwhile is left
    alone. procrastinate has no API to restore an attempt count: an interruption seen by a
    living process is not a crash, so it must not count. Returns what was found (status,
    worker, attempts; empty when it is gone)."""
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
