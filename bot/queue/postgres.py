"""The job queue on procrastinate (Postgres), for several processes sharing the database."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import logging
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import procrastinate
from procrastinate import job_context, retry
from procrastinate import jobs as pjobs
from procrastinate.worker import Worker

from bot.queue import JobQueue, NewJob, PermanentError, backoff_seconds, failure, job_log
from bot.records import pgjobs
from bot.records.postgres import (
    CONNECT_TIMEOUT,
    POOL_TIMEOUT,
    RECONNECT_TIMEOUT,
    Connection,
    PgDatabase,
)
from bot.records.types import Job
from bot.records.vocab import JobState

log = logging.getLogger(__name__)

TASK = "cockpit.job"
STATES = {  # procrastinate's statuses as the SQLite queue names them
    "todo": JobState.QUEUED,
    "doing": JobState.RUNNING,
    "succeeded": JobState.DONE,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELLED,
    "aborted": JobState.CANCELLED,
}
STALLED_AFTER = 20.0  # a worker silent this long is dead: its jobs run again elsewhere
# procrastinate announces a new job (NOTIFY) but not a freed key: a job waiting behind its key's
# running one starts at the next poll. 0.25 s keeps that wait small for about 8 cheap queries
# a second per idle process (was 1 s: up to a second for each queued step of a PR).
FETCH_POLL_SECONDS = 0.25
ABORT_POLL_SECONDS = 1.0  # a fallback: abort requests are announced too
RESTART_FIRST = 0.5  # seconds before a worker that stopped by itself starts again …
RESTART_CAP = 4.0  # … doubling up to this while it keeps failing (Postgres still down)
STEADY_SECONDS = 60.0  # a worker that ran this long starts again after RESTART_FIRST
_CURRENT: contextvars.ContextVar[job_context.JobContext | None] = contextvars.ContextVar(
    "cockpit_pg_job", default=None
)


class WorkerStopped(Exception):
    """The worker stopped while the job ran: it runs again (procrastinate retries it)."""


class _Retry(retry.BaseRetryStrategy):
    def get_retry_decision(
        self, *, exception: BaseException, job: pjobs.Job
    ) -> retry.RetryDecision | None:
        return retry_decision(exception, job.attempts + 1, int(job.task_kwargs["max_attempts"]))


def retry_decision(
    exception: BaseException, attempts: int, max_attempts: int
) -> retry.RetryDecision | None:
    """Retry with the SQLite queue's backoff until `max_attempts`; never a cancelled job
    (stop, supersede) or a PermanentError. An interrupted job retries at once."""
    if isinstance(exception, WorkerStopped):
        return retry.RetryDecision(retry_in={"seconds": 0})
    if not isinstance(exception, Exception) or isinstance(exception, PermanentError):
        return None
    if attempts >= max_attempts:
        return None
    return retry.RetryDecision(retry_in={"seconds": int(backoff_seconds(attempts))})


class PgJobs(JobQueue):
    def __init__(self, db: PgDatabase, url: str, *, stalled_after: float = STALLED_AFTER) -> None:
        super().__init__()
        self.db = db
        self.stalled_after = stalled_after
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(
                conninfo=url,
                min_size=1,
                max_size=4,
                timeout=POOL_TIMEOUT,
                reconnect_timeout=RECONNECT_TIMEOUT,
                kwargs={"connect_timeout": CONNECT_TIMEOUT},
            )
        )
        self.app.task(name=TASK, pass_context=True, retry=_Retry())(self._execute)
        self._procrastinate: dict[str, Worker] = {}
        # Jobs interrupted here (this process's worker stopped): job id -> (the worker id
        # that ran it, its attempts when fetched), until they are back in line uncounted.
        self._interrupted: dict[int, tuple[int | None, int]] = {}
        self._settling = asyncio.Lock()

    async def open(self) -> None:
        await self.app.open_async()

    async def close(self) -> None:
        await self.app.close_async()

    def row(self, job: NewJob, queueing_lock: str | None = None) -> pjobs.Job:
        later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=job.delay)
        scheduled = later if job.delay else None
        return pjobs.Job(
            queue=job.queue,
            lock=job.key,
            queueing_lock=queueing_lock,
            task_name=TASK,
            task_kwargs={
                "kind": job.kind,
                "key": job.key,
                "payload": job.payload,
                "max_attempts": job.max_attempts,
            },
            scheduled_at=scheduled,
        )

    async def insert_in(self, conn: Connection, rows: list[pjobs.Job]) -> list[int]:
        if not rows:
            return []
        deferred = await self.app.job_manager.batch_defer_jobs_async(rows, connection=conn.raw)
        return [int(job.id or 0) for job in deferred]

    @contextlib.asynccontextmanager
    async def _adding(self, job: NewJob, supersede: bool) -> AsyncIterator[Connection]:
        async with self.db.transaction(lock=f"jobs:{job.key}" if supersede else None) as conn:
            if supersede:
                await self._cancel_in(conn, job.key, job.kind)
            yield conn

    async def _insert(self, conn: Connection, job: NewJob, supersede: bool) -> int:
        row = self.row(job, queueing_lock=f"{job.key}|{job.kind}" if supersede else None)
        [job_id] = await self.insert_in(conn, [row])
        return job_id

    async def cancel(self, key: str, kind: str | None = None) -> int:
        async with self.db.transaction(lock=f"jobs:{key}") as conn:
            return await self._cancel_in(conn, key, kind)

    async def _cancel_in(self, conn: Connection, key: str, kind: str | None) -> int:
        found = [job for job in await self._open(key) if kind in (None, job.task_kwargs["kind"])]
        ids = sorted((int(job.id or 0) for job in found), reverse=True)  # the jobs in line first
        for job_id in ids:
            await self.app.job_manager.cancel_job_by_id_async(
                job_id, abort=True, connection=conn.raw
            )
        return len(ids)

    async def _open(self, key: str) -> list[pjobs.Job]:
        manager = self.app.job_manager
        return [
            job
            for status in ("todo", "doing")
            for job in await manager.list_jobs_async(task=TASK, lock=key, status=status)
        ]

    async def busy(self, key: str) -> bool:
        return bool(await self._open(key))

    async def pending(self) -> int:
        now = dt.datetime.now(dt.UTC)
        manager = self.app.job_manager
        due = [
            job
            for job in await manager.list_jobs_async(status="todo")
            if job.scheduled_at is None or job.scheduled_at <= now
        ]
        return len(due) + len(await manager.list_jobs_async(status="doing"))

    async def counts(self) -> dict[str, int]:
        found: Counter[str] = Counter()
        for queue in await self.app.job_manager.list_queues_async():
            for status, state in STATES.items():  # two statuses are one state
                found[state] += queue[status]
        return {state: n for state, n in found.items() if n}

    async def every(self, kind: str, *, cron: str, seconds: float, queue: str) -> None:
        self.app.periodic(
            cron=cron,
            periodic_id=kind,
            queue=queue,
            lock=kind,
            queueing_lock=kind,
            task_kwargs={"kind": kind, "key": kind, "payload": {}, "max_attempts": 1},
        )(self.app.tasks[TASK])

    async def prune(self, older_than: float, *, chunk: int) -> int:
        """In whole hours (procrastinate does not say how many it deleted: 0)."""
        await self.app.job_manager.delete_old_jobs(
            nb_hours=int((time.time() - older_than) // 3600),
            include_failed=True,
            include_cancelled=True,
            include_aborted=True,
        )
        return 0

    async def finish_leftovers(self, work: Callable[[], Awaitable[None]]) -> None:
        """Nothing here: what one process left mid-way may be another's work under way."""

    async def recover(self) -> int:
        manager = self.app.job_manager
        stalled = await manager.get_stalled_jobs(seconds_since_heartbeat=self.stalled_after)
        retried = 0
        for found in stalled:
            job = self._job(found)
            try:
                if job.attempts < job.max_attempts:
                    await manager.retry_job_by_id_async(job.id, dt.datetime.now(dt.UTC))
                    retried += 1
                    continue
                await manager.finish_job_by_id_async(job.id, pjobs.Status.FAILED, delete_job=False)
            except procrastinate.exceptions.ConnectorException:
                continue  # another worker recovered it first
            await self._lost_for_good(job)
        return retried

    def wake(self, queue: str) -> None:
        """procrastinate's workers hear about new jobs through NOTIFY."""

    def start(self, pools: dict[str, int]) -> None:
        self._start_local()
        for queue, size in pools.items():
            self._workers.append(
                asyncio.create_task(self._supervise(queue, size), name=f"worker-{queue}")
            )
        self._repeat("stalled-jobs", self.stalled_after / 2, self.recover)

    async def _supervise(self, queue: str, size: int) -> None:
        """A procrastinate worker stops by itself when one of its connections fails: start
        it again here (compose or a bare host has no orchestrator to do it)."""
        delay = RESTART_FIRST
        while not self._stopping:
            worker = self._procrastinate[queue] = Worker(
                self.app,
                queues=[queue],
                name=queue,
                concurrency=size,
                install_signal_handlers=False,
                fetch_job_polling_interval=FETCH_POLL_SECONDS,
                abort_job_polling_interval=ABORT_POLL_SECONDS,
                update_heartbeat_interval=self.stalled_after / 4,
                stalled_worker_timeout=self.stalled_after,
                shutdown_graceful_timeout=0.0,
            )
            started = time.monotonic()
            reason = "it stopped"
            try:
                await worker.run()
            except Exception as exc:
                reason = failure(exc)
            if self._stopping:
                return
            if time.monotonic() - started > STEADY_SECONDS:
                delay = RESTART_FIRST
            self.restarts += 1
            log.error(
                "job worker stopped by itself; starting it again",
                extra={"fields": {"queue": queue, "reason": reason, "in_seconds": delay}},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), delay)
            delay = min(delay * 2, RESTART_CAP)
            while not await self._settle_interrupted() and not self._stopping:
                with contextlib.suppress(TimeoutError):  # before any worker fetches them
                    await asyncio.wait_for(self._stopped.wait(), delay)

    async def _settle_interrupted(self) -> bool:
        """False when the database could not be reached (the rest waits for the next call)."""
        async with self._settling:
            for job_id, (worker_id, attempts) in list(self._interrupted.items()):
                try:
                    row = await pgjobs.put_back(self.db, job_id, worker_id, attempts)
                except (OSError, sqlite3.Error):
                    log.warning("interrupted jobs wait for the database", exc_info=True)
                    return False
                found = {"job": job_id, "found": list(row), "attempts": attempts}
                log.info("interrupted job back in line", extra={"fields": found})
                self._interrupted.pop(job_id, None)
        return True

    def interrupted(self) -> bool:
        context = _CURRENT.get()
        return context is not None and (context.abort_reason() == job_context.AbortReason.SHUTDOWN)

    async def stop(self, grace: float = 0.0) -> None:
        self._begin_stop()
        for worker in self._procrastinate.values():
            worker.shutdown_graceful_timeout = grace
            worker.stop()
        await self._end_workers()
        self._procrastinate.clear()
        await self._settle_interrupted()

    def _job(self, found: pjobs.Job) -> Job:
        kwargs = found.task_kwargs
        return Job(
            id=int(found.id or 0),
            kind=kwargs["kind"],
            queue=found.queue,
            key=kwargs["key"],
            payload=kwargs.get("payload") or {},
            attempts=found.attempts + 1,
            max_attempts=int(kwargs.get("max_attempts", 1)),
        )

    async def _execute(self, context: job_context.JobContext, **kwargs: Any) -> None:
        job = self._job(context.job)
        started = time.monotonic()
        outcome = "done"
        self._running[job.id] = asyncio.current_task()
        _CURRENT.set(context)
        with job_log(job):
            try:
                await self._call(job)
            except asyncio.CancelledError:
                if context.abort_reason() == job_context.AbortReason.SHUTDOWN:
                    outcome = "interrupted"  # this worker is stopping: run it again later
                    found = context.job
                    self._interrupted[job.id] = (found.worker_id, found.attempts)
                    raise WorkerStopped("the worker stopped") from None
                outcome = "cancelled"  # stop, supersede, or the job saw it was superseded
                raise
            except Exception as exc:
                decision = retry_decision(exc, job.attempts, job.max_attempts)
                outcome = "retrying" if decision else "failed"
                log.warning("job raised", exc_info=True)
                if decision is None:
                    await self._gave_up(job, failure(exc))
                raise
            finally:
                self._running.pop(job.id, None)
                self._finished(job, outcome, started)
