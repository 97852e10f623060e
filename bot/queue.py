"""Durable job queue in SQLite and the worker pools that run it.

Jobs have a kind, a serialisation key (one running job per key), attempts with backoff,
a lease renewed while they run, and cancellation: a newer job may supersede older ones
with the same key and kind. Jobs left `running` by a crash are re-queued at start-up with
that attempt counted; one past its `max_attempts` fails for good (a job that kills the
process is never run again and again), and its kind's `on_gave_up` hook reports it. On a
graceful stop, running jobs get a bounded grace; the rest are re-queued uncounted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiosqlite

from bot.logs import log_context
from bot.storage import Database

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
POLL_SECONDS = 0.5
BACKOFF_BASE = 2.0
BACKOFF_CAP = 300.0

# The queues and their worker pools: deliveries are routed on EVENTS; reviews, sessions and
# housekeeping (anything that may talk to a model or run git) on REVIEWS.
EVENTS = "events"
REVIEWS = "reviews"

_CURRENT: contextvars.ContextVar[int | None] = contextvars.ContextVar("cockpit_job", default=None)

INSERT_SQL = (
    "INSERT INTO jobs (kind, queue, key, payload, max_attempts, run_after, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class PermanentError(Exception):
    """A job failure that retrying cannot fix (bad input, refused by policy)."""


@dataclass(frozen=True)
class Job:
    id: int
    kind: str
    queue: str
    key: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Job:
        return cls(
            id=row["id"],
            kind=row["kind"],
            queue=row["queue"],
            key=row["key"],
            payload=json.loads(row["payload"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
        )


JobHandler = Callable[[Job], Awaitable[None]]
# Called once when a job fails for good, with the reason (e.g. to say so on the PR).
GaveUpHook = Callable[[Job, str], Awaitable[None]]
INTERRUPTED = "the process stopped while this job ran ({attempts} of {max_attempts} attempts)"


def backoff_seconds(attempts: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_BASE ** max(attempts, 1))


class Jobs:
    """The queue (rows in `jobs`) plus the asyncio workers that drain it."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock
        self.handlers: dict[str, JobHandler] = {}
        self.on_finished: Callable[[Job, str, float], None] | None = None
        self.on_gave_up: dict[str, GaveUpHook] = {}
        self._wake: dict[str, asyncio.Event] = {}
        self._workers: list[asyncio.Task] = []
        self._running: dict[int, asyncio.Task] = {}
        self._interrupted: set[int] = set()  # cancelled by a stop, to be re-queued uncounted
        self._stopping = False
        self._local: list[tuple[str, float]] = []

    # -- queue operations -------------------------------------------------

    def row(
        self,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        queue: str,
        max_attempts: int = 3,
        delay: float = 0.0,
    ) -> tuple:
        """Values for INSERT_SQL, for callers that insert jobs in their own transaction."""
        now = self.clock()
        return (kind, queue, key, json.dumps(payload), max_attempts, now + delay, now)

    async def enqueue(
        self,
        kind: str,
        key: str,
        payload: dict[str, Any],
        *,
        queue: str,
        supersede: bool = False,
        max_attempts: int = 3,
        delay: float = 0.0,
        prepare: Callable[[aiosqlite.Connection], Awaitable[dict[str, Any]]] | None = None,
    ) -> int:
        """Add a job; with `supersede`, older jobs of this kind and key are cancelled.

        `prepare` runs in the same transaction (e.g. to create the row the job works on)
        and its result is merged into the payload, so both commit or neither does.
        """
        async with self.db.transaction() as conn:
            running: list[int] = []
            if supersede:
                running = await self._cancel_in(conn, key, kind)
            if prepare is not None:
                payload = {**payload, **await prepare(conn)}
            cursor = await conn.execute(
                INSERT_SQL,
                self.row(kind, key, payload, queue=queue, max_attempts=max_attempts, delay=delay),
            )
            job_id = int(cursor.lastrowid or 0)
        self._interrupt(running)
        self.wake(queue)
        return job_id

    async def cancel(self, key: str, kind: str | None = None) -> int:
        """Cancel queued and running jobs for a key; return how many were affected."""
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "SELECT COUNT(*) FROM jobs WHERE key = ?"
                " AND state IN ('queued', 'running', 'waiting')"
                + (" AND kind = ?" if kind else ""),
                (key, kind) if kind else (key,),
            )
            count = (await cursor.fetchone())[0]
            running = await self._cancel_in(conn, key, kind)
        self._interrupt(running)
        for queue in self._wake:  # a job of another kind may have moved up in this key's line
            self.wake(queue)
        return count

    async def _cancel_in(self, conn: aiosqlite.Connection, key: str, kind: str | None) -> list[int]:
        kind_clause = " AND kind = ?" if kind else ""
        args: tuple = (key, kind) if kind else (key,)
        now = self.clock()
        # The jobs in line first: the head's exit then moves up only a job that stays.
        for state in ("waiting", "queued"):
            await conn.execute(
                "UPDATE jobs SET state = 'cancelled', finished_at = ?, error = 'superseded'"
                f" WHERE key = ? AND state = '{state}'{kind_clause}",
                (now, *args),
            )
        cursor = await conn.execute(
            f"SELECT id FROM jobs WHERE key = ? AND state = 'running'{kind_clause}", args
        )
        return [row[0] for row in await cursor.fetchall()]

    def _interrupt(self, job_ids: list[int]) -> None:
        for job_id in job_ids:
            task = self._running.get(job_id)
            if task is not None:
                task.cancel()

    async def claim(self, queue: str) -> Job | None:
        """Take the next runnable job atomically.

        A key runs its jobs one at a time and in order: the jobs behind its oldest unfinished
        one are 'waiting' (schema triggers move the next one up), so only heads are claimed,
        and a retry waiting out its backoff keeps its place.
        """
        now = self.clock()
        row = await self.db.fetchone(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1,"
            " started_at = ?, lease_until = ?"
            " WHERE id = (SELECT j.id FROM jobs j WHERE j.queue = ? AND j.state = 'queued'"
            "   AND j.run_after <= ? AND j.attempts < j.max_attempts"
            "   AND NOT EXISTS (SELECT 1 FROM jobs r WHERE r.key = j.key AND r.state = 'running')"
            "   ORDER BY j.run_after, j.id LIMIT 1)"
            " RETURNING *",
            (now, now + LEASE_SECONDS, queue, now),
        )
        return Job.from_row(row) if row else None

    async def _finish(self, job: Job, state: str, error: str | None = None) -> None:
        await self.db.execute(
            "UPDATE jobs SET state = ?, error = ?, finished_at = ?, lease_until = NULL"
            " WHERE id = ? AND state = 'running'",
            (state, error, self.clock(), job.id),
        )

    async def _retry_or_fail(self, job: Job, error: str, *, permanent: bool) -> str:
        if permanent or job.attempts >= job.max_attempts:
            await self._finish(job, "failed", error)
            await self._gave_up(job, error)
            return "failed"
        await self.db.execute(
            "UPDATE jobs SET state = 'queued', error = ?, run_after = ?, lease_until = NULL"
            " WHERE id = ? AND state = 'running'",
            (error, self.clock() + backoff_seconds(job.attempts), job.id),
        )
        return "retrying"

    async def recover(self) -> int:
        """Re-queue jobs a crashed process left running (their attempt stays counted); those
        already at their limit fail for good instead. Returns how many were re-queued."""
        return await self._requeue_lost("state = 'running'", ())

    async def reap_expired_leases(self) -> int:
        alive = list(self._running)  # still running here: a late heartbeat, not a lost job
        return await self._requeue_lost(
            f"state = 'running' AND lease_until < ? AND id NOT IN ({','.join('?' * len(alive))})",
            (self.clock(), *alive),
        )

    async def _requeue_lost(self, where: str, args: tuple) -> int:
        async with self.db.transaction() as conn:
            cursor = await conn.execute(
                "UPDATE jobs SET state = 'failed', lease_until = NULL, finished_at = ?,"
                " error = 'the process stopped while this job ran (' || attempts || ' of '"
                " || max_attempts || ' attempts)'"
                f" WHERE {where} AND attempts >= max_attempts RETURNING *",
                (self.clock(), *args),
            )
            exhausted = [Job.from_row(row) for row in await cursor.fetchall()]
            cursor = await conn.execute(
                "UPDATE jobs SET state = 'queued', lease_until = NULL, run_after = ?"
                f" WHERE {where}",
                (self.clock(), *args),
            )
            requeued = cursor.rowcount
        for job in exhausted:
            reason = INTERRUPTED.format(attempts=job.attempts, max_attempts=job.max_attempts)
            with log_context(job=job.id, job_kind=job.kind, key=job.key):
                log.error("job failed for good: interrupted at every attempt")
            await self._gave_up(job, reason)
        return requeued

    async def _gave_up(self, job: Job, reason: str) -> None:
        hook = self.on_gave_up.get(job.kind)
        if hook is None:
            return
        try:
            await hook(job, reason)
        except Exception:
            log.exception("reporting a failed job failed", extra={"fields": {"job": job.id}})

    async def busy(self, key: str) -> bool:
        """Whether the key has a job running or in line."""
        row = await self.db.fetchone(
            "SELECT 1 FROM jobs WHERE key = ? AND state IN ('queued', 'running', 'waiting')"
            " LIMIT 1",
            (key,),
        )
        return row is not None

    async def pending(self) -> int:
        """Jobs with work to do now: running, waiting in a line, or queued and due (a job
        scheduled for later, like tomorrow's maintenance, does not count)."""
        row = await self.db.fetchone(
            "SELECT COUNT(*) FROM jobs WHERE state IN ('running', 'waiting')"
            " OR (state = 'queued' AND run_after <= ?)",
            (self.clock(),),
        )
        return row[0] if row else 0

    async def counts(self) -> dict[str, int]:
        rows = await self.db.fetchall("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
        return {row["state"]: row["n"] for row in rows}

    async def states(self, kind: str | None = None, key: str | None = None) -> list[str]:
        """The states of the jobs of a kind and/or key, oldest first."""
        rows = await self.db.fetchall(
            "SELECT state FROM jobs WHERE (? IS NULL OR kind = ?) AND (? IS NULL OR key = ?)"
            " ORDER BY id",
            (kind, kind, key, key),
        )
        return [row["state"] for row in rows]

    # -- workers ----------------------------------------------------------

    def wake(self, queue: str) -> None:
        event = self._wake.get(queue)
        if event is not None:
            event.set()

    def every_here(self, kind: str, seconds: float) -> None:
        """Run `kind` in this process every `seconds` (the first time at once), outside the
        queue: for what is local to a worker, like its disk. Call before `start`."""
        self._local.append((kind, seconds))

    def start(self, pools: dict[str, int]) -> None:
        self._stopping = False
        for queue, size in pools.items():
            self._wake[queue] = asyncio.Event()
            for n in range(size):
                self._workers.append(asyncio.create_task(self._worker(queue), name=f"{queue}-{n}"))
        self._workers.append(asyncio.create_task(self._reaper(), name="lease-reaper"))
        for kind, seconds in self._local:
            self._workers.append(asyncio.create_task(self._here(kind, seconds), name="local"))

    async def _here(self, kind: str, seconds: float) -> None:
        job = Job(id=0, kind=kind, queue="local", key=kind, payload={}, attempts=1, max_attempts=1)
        while not self._stopping:
            handler = self.handlers.get(kind)
            try:
                if handler is not None:
                    await handler(job)
            except Exception:
                log.exception("local periodic work failed", extra={"fields": {"kind": kind}})
            await asyncio.sleep(seconds)

    @property
    def workers_alive(self) -> int:
        return sum(1 for task in self._workers if not task.done())

    @property
    def workers_total(self) -> int:
        return len(self._workers)

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def stopping(self) -> bool:
        """True once a stop began."""
        return self._stopping

    def interrupted(self) -> bool:
        """Inside a job being cancelled: whether it is interrupted (a graceful stop: it runs
        again at the next start, its state kept) rather than cancelled (stop, supersede)."""
        return _CURRENT.get() in self._interrupted

    async def stop(self, grace: float = 0.0) -> None:
        """Stop claiming; let running jobs finish for up to `grace` seconds; re-queue the
        rest without counting the attempt (they run again at the next start)."""
        self._stopping = True
        for event in self._wake.values():
            event.set()
        running = list(self._running.values())
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        for job_id, task in list(self._running.items()):
            if not task.done():
                self._interrupted.add(job_id)
                task.cancel()
        for task in self._workers:
            if task.get_name() in ("lease-reaper", "local"):
                task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._workers.clear()

    async def _worker(self, queue: str) -> None:
        wake = self._wake[queue]
        while not self._stopping:
            try:
                job = await self.claim(queue)
            except (sqlite3.Error, ValueError):
                log.exception("claiming a job failed", extra={"fields": {"queue": queue}})
                job = None
            if job is not None and self._stopping:  # claimed as the stop began: not started
                await self._requeue_uncounted(job)
                return
            if job is None:
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), POLL_SECONDS)
                continue
            await self._run(job)

    async def _run(self, job: Job) -> None:
        handler = self.handlers.get(job.kind)
        started = time.monotonic()
        with log_context(job=job.id, job_kind=job.kind, key=job.key):
            if handler is None:
                log.error("no handler for job kind")
                await self._finish(job, "failed", f"no handler for {job.kind!r}")
                return
            _CURRENT.set(job.id)
            task = asyncio.create_task(handler(job))  # runs with this job as its current one
            self._running[job.id] = task
            heartbeat = asyncio.create_task(self._heartbeat(job))
            try:
                await asyncio.shield(task)
                outcome = "done"
                await self._finish(job, "done")
            except asyncio.CancelledError:
                if not task.done():  # the worker itself is being cancelled
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                    raise
                if job.id in self._interrupted:  # a graceful stop: it runs again next start
                    self._interrupted.discard(job.id)
                    outcome = "interrupted"
                    await self._requeue_uncounted(job)
                else:
                    outcome = "cancelled"
                    await self._finish(job, "cancelled", "cancelled")
            except Exception as exc:
                error = f"{exc.__class__.__name__}: {exc}"[:2000]
                log.warning("job raised", exc_info=True)
                outcome = await self._retry_or_fail(
                    job, error, permanent=isinstance(exc, PermanentError)
                )
            finally:
                heartbeat.cancel()
                self._running.pop(job.id, None)
            if self.on_finished:
                self.on_finished(job, outcome, time.monotonic() - started)

    async def _requeue_uncounted(self, job: Job) -> None:
        await self.db.execute(
            "UPDATE jobs SET state = 'queued', attempts = MAX(attempts - 1, 0), lease_until = NULL,"
            " run_after = ? WHERE id = ? AND state = 'running'",
            (self.clock(), job.id),
        )

    async def _reaper(self) -> None:
        """Re-queue jobs whose worker stopped renewing their lease."""
        while not self._stopping:
            await asyncio.sleep(LEASE_SECONDS / 2)
            try:
                if await self.reap_expired_leases():
                    for event in self._wake.values():
                        event.set()
            except (sqlite3.Error, ValueError):
                log.exception("reaping expired leases failed")

    async def _heartbeat(self, job: Job) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            await self.db.execute(
                "UPDATE jobs SET lease_until = ? WHERE id = ? AND state = 'running'",
                (self.clock() + LEASE_SECONDS, job.id),
            )
