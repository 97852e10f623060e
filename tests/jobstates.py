"""The states of a queue's jobs, oldest first, read from either backend's rows (tests only)."""

from __future__ import annotations

from bot.queue import JobQueue


async def job_states(jobs: JobQueue, kind: str | None = None, key: str | None = None) -> list[str]:
    """The states of the jobs of a kind and/or key, oldest first, as the SQLite queue names them."""
    from bot.queue.sqlite import Jobs

    if isinstance(jobs, Jobs):
        rows = await jobs.db.fetchall(
            "SELECT state FROM jobs WHERE (? IS NULL OR kind = ?) AND (? IS NULL OR key = ?)"
            " ORDER BY id",
            (kind, kind, key, key),
        )
        return [row["state"] for row in rows]
    from bot.queue.postgres import STATES, TASK

    found = await jobs.app.job_manager.list_jobs_async(task=TASK, lock=key)
    return [STATES[str(job.status)] for job in found if kind in (None, job.task_kwargs["kind"])]
