"""The job queue on SQLite and the worker pools that run it (one process owns the file)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from bot.queue import JobQueue, NewJob, PermanentError, backoff_seconds, failure, job_log, lost
from bot.records import jobs as rows
from bot.records.database import Database
from bot.records.types import Job
from bot.records.vocab import JobState

log = logging.getLogger(__name__)

LEASE_SECONDS = 60.0
POLL_SECONDS = 0.5

_CURRENT: contextvars.ContextVar[int | None] = contextvars.ContextVar("cockpit_job", default=None)


class Jobs(JobQueue):
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self._wake: dict[str, asyncio.Event] = {}
        self._interrupted: set[int] = set()  # cancelled by a stop, to be re-queued uncounted
        self._every: dict[str, tuple[str, float]] = {}  # kind -> (queue, seconds)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def row(self, job: NewJob) -> tuple:
        return rows.new_row(
            job.kind,
            job.key,
            job.payload,
            queue=job.queue,
            max_attempts=job.max_attempts,
            delay=job.delay,
            now=self.clock(),
        )

    @contextlib.asynccontextmanager
    async def _adding(self, job: NewJob, supersede: bool) -> AsyncIterator[Any]:
        async with self.db.transaction() as conn:
            running: list[int] = []
            if supersede:
                running = await rows.cancel_in(conn, job.key, job.kind, self.clock())
            yield conn
        self._interrupt(running)  # once the cancellation is committed
        self.wake(job.queue)

    async def _insert(self, conn: Any, job: NewJob, supersede: bool) -> int:
        return await rows.insert(conn, self.row(job))

    async def cancel(self, key: str, kind: str | None = None) -> int:
        async with self.db.transaction() as conn:
            count = await rows.count_open(conn, key, kind)
            running = await rows.cancel_in(conn, key, kind, self.clock())
        self._interrupt(running)
        self._wake_all()  # a job of another kind may have moved up in this key's line
        return count

    def _interrupt(self, job_ids: list[int]) -> None:
        for job_id in job_ids:
            task = self._running.get(job_id)
            if task is not None:
                task.cancel()

    async def claim(self, queue: str) -> Job | None:
        now = self.clock()
        return await rows.claim(self.db, queue, now, now + LEASE_SECONDS)

    async def _finish(self, job: Job, state: JobState, error: str | None = None) -> None:
        await rows.finish(self.db, job.id, state, error, self.clock())

    async def _retry_or_fail(self, job: Job, exc: Exception) -> str:
        error = failure(exc)
        if isinstance(exc, PermanentError) or job.attempts >= job.max_attempts:
            await self._finish(job, JobState.FAILED, error)
            await self._gave_up(job, error)
            return "failed"
        await rows.retry_at(self.db, job.id, error, self.clock() + backoff_seconds(job.attempts))
        return "retrying"

    async def recover(self, *, expired_before: float | None = None) -> int:
        """`JobQueue.recover`; with `expired_before` (the lease reaper), only the jobs whose
        lease ended before it and that do not run here (a late heartbeat is no lost job)."""
        exhausted, requeued = await rows.requeue_lost(
            self.db, self.clock(), lost, expired_before=expired_before, alive=list(self._running)
        )
        for job in exhausted:
            await self._lost_for_good(job)
        return requeued

    async def reap_expired_leases(self) -> int:
        reaped = await self.recover(expired_before=self.clock())
        if reaped:
            self._wake_all()
        return reaped

    async def busy(self, key: str) -> bool:
        return await rows.busy(self.db, key)

    async def pending(self) -> int:
        return await rows.pending(self.db, self.clock())

    async def counts(self) -> dict[str, int]:
        return await rows.counts(self.db)

    def wake(self, queue: str) -> None:
        event = self._wake.get(queue)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        for event in self._wake.values():
            event.set()

    async def every(self, kind: str, *, cron: str, seconds: float, queue: str) -> None:
        self._every[kind] = (queue, seconds)
        await self.enqueue(kind, kind, {}, queue=queue, supersede=True)

    async def _next_run(self, job: Job) -> None:
        queue, seconds = self._every[job.kind]
        if not await rows.in_line_behind(self.db, job.key, job.id):  # a restart queued one
            await self.enqueue(job.kind, job.key, {}, queue=queue, delay=seconds)

    async def prune(self, older_than: float, *, chunk: int) -> int:
        return await rows.prune(self.db, older_than, chunk)

    def start(self, pools: dict[str, int]) -> None:
        self._start_local()
        for queue, size in pools.items():
            self._wake[queue] = asyncio.Event()
            for n in range(size):
                self._workers.append(asyncio.create_task(self._worker(queue), name=f"{queue}-{n}"))
        self._repeat("lease-reaper", LEASE_SECONDS / 2, self.reap_expired_leases)

    def interrupted(self) -> bool:
        return _CURRENT.get() in self._interrupted

    async def stop(self, grace: float = 0.0) -> None:
        self._begin_stop()
        self._wake_all()
        running = list(self._running.values())
        if running and grace > 0:
            await asyncio.wait(running, timeout=grace)
        for job_id, task in list(self._running.items()):
            if not task.done():
                self._interrupted.add(job_id)
                task.cancel()
        await self._end_workers()

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
        started = time.monotonic()
        with job_log(job):
            _CURRENT.set(job.id)
            task = asyncio.create_task(self._call(job))  # runs with this job as its current one
            self._running[job.id] = task
            heartbeat = asyncio.create_task(self._heartbeat(job))
            try:
                await asyncio.shield(task)
                outcome = "done"
                await self._finish(job, JobState.DONE)
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
                    await self._finish(job, JobState.CANCELLED, "cancelled")
            except Exception as exc:
                log.warning("job raised", exc_info=True)
                outcome = await self._retry_or_fail(job, exc)
            finally:
                heartbeat.cancel()
                self._running.pop(job.id, None)
            if outcome == "done" and job.kind in self._every:
                try:
                    await self._next_run(job)
                except (sqlite3.Error, ValueError):
                    log.exception("queueing the next run failed")
            self._finished(job, outcome, started)

    async def _requeue_uncounted(self, job: Job) -> None:
        await rows.requeue_uncounted(self.db, job.id, self.clock())

    async def _heartbeat(self, job: Job) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 3)
            await rows.renew_lease(self.db, job.id, self.clock() + LEASE_SECONDS)
