"""The job queue's contract (`JobQueue`), which both backends implement, and what they share."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from bot.logs import log_context
from bot.records.types import Job
from bot.texts import PEOPLE, say

log = logging.getLogger(__name__)

__all__ = ["EVENTS", "REVIEWS", "JobQueue", "NewJob", "PermanentError"]

BACKOFF_BASE = 2.0
BACKOFF_CAP = 300.0

# Deliveries are routed on EVENTS; anything that may talk to a model or run git on REVIEWS.
EVENTS = "events"
REVIEWS = "reviews"

JobHandler = Callable[[Job], Awaitable[None]]
GaveUpHook = Callable[[Job, str], Awaitable[None]]
# The job, its outcome (done, retrying, failed, cancelled, interrupted), the seconds it ran.
FinishedHook = Callable[[Job, str, float], None]


def review_key(pull_id: int) -> str:
    return f"review:{pull_id}"


def turn_key(session_id: int) -> str:
    return f"session:{session_id}"


@dataclass(frozen=True)
class NewJob:
    kind: str
    key: str
    payload: dict[str, Any]
    queue: str
    max_attempts: int = 3
    delay: float = 0.0  # seconds before it may run


class PermanentError(Exception):
    """A job failure that retrying cannot fix (bad input, refused by policy)."""


def backoff_seconds(attempts: int) -> float:
    return min(BACKOFF_CAP, BACKOFF_BASE ** max(attempts, 1))


def failure(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}"[:2000]


class JobQueue(abc.ABC):
    """The queue and this process's workers. A key runs one job at a time, in order; a job
    that fails for good is reported by its kind's `on_gave_up` hook. A difference between the
    backends that callers must respect is a method here (a no-op is a valid one)."""

    def __init__(self) -> None:
        self.handlers: dict[str, JobHandler] = {}
        self.on_finished: FinishedHook | None = None
        self.on_gave_up: dict[str, GaveUpHook] = {}
        self.restarts = 0  # workers started again after stopping by themselves
        self._running: dict[int, asyncio.Task] = {}  # job id -> the task running its handler
        self._workers: list[asyncio.Task] = []
        self._local: list[tuple[str, float, Callable[[], Awaitable[Any]]]] = []
        self._stopping = False
        self._stopped = asyncio.Event()

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def cancel(self, key: str, kind: str | None = None) -> int:
        """Cancel the key's jobs in line and interrupt its running one; returns how many."""

    @abc.abstractmethod
    async def busy(self, key: str) -> bool:
        """Whether the key has a job running or in line."""

    @abc.abstractmethod
    async def pending(self) -> int:
        """Jobs with work to do now (a job scheduled for later does not count)."""

    @abc.abstractmethod
    async def counts(self) -> dict[str, int]:
        """Jobs by `JobState`."""

    @abc.abstractmethod
    def wake(self, queue: str) -> None:
        """New jobs are in `queue` (a committed delivery's): its workers look now."""

    @abc.abstractmethod
    async def every(self, kind: str, *, cron: str, seconds: float, queue: str) -> None:
        """Run `kind` as one job at a time across the processes: now, then every `seconds`
        (SQLite) or on `cron` (Postgres). Call before `start`."""

    @abc.abstractmethod
    async def prune(self, older_than: float, *, chunk: int) -> int:
        """Forget finished jobs from before `older_than`; how many (0 where it does not say)."""

    @abc.abstractmethod
    async def recover(self) -> int:
        """Jobs a dead process left running run again (their attempt counted); one that used
        its last attempt fails for good. Returns how many run again."""

    async def finish_leftovers(self, work: Callable[[], Awaitable[None]]) -> None:
        """At start, what a dead process left mid-way outside the queue is `work`'s to
        finish, when no other process may still be at it."""
        await work()

    @abc.abstractmethod
    def start(self, pools: dict[str, int]) -> None: ...

    @abc.abstractmethod
    async def stop(self, grace: float = 0.0) -> None:
        """Stop taking jobs; running ones get up to `grace` seconds, then are interrupted
        and run again later, their attempt not counted."""

    @property
    def running(self) -> int:
        return len(self._running)

    @abc.abstractmethod
    def interrupted(self) -> bool:
        """Inside a job being cancelled: whether it is interrupted (its worker stops: it runs
        again, its state kept) rather than cancelled (stop, supersede)."""

    def every_here(self, name: str, seconds: float, work: Callable[[], Awaitable[Any]]) -> None:
        """Run `work` in this process every `seconds` (the first time at once), outside the
        queue (for what is local to a worker, like its disk). Call before `start`."""
        self._local.append((name, seconds, work))

    def _start_local(self) -> None:
        self._stopping = False
        self._stopped.clear()
        for name, seconds, work in self._local:
            self._repeat(name, seconds, work)

    def _repeat(self, name: str, seconds: float, work: Callable[[], Awaitable[Any]]) -> None:
        """`work` in this process now, then every `seconds`, until the stop."""

        async def repeat() -> None:
            while not self._stopping:
                try:
                    await work()
                except Exception:
                    log.exception("periodic work failed", extra={"fields": {"work": name}})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), seconds)

        self._workers.append(asyncio.create_task(repeat(), name=f"every-{name}"))

    def _begin_stop(self) -> None:
        self._stopping = True
        self._stopped.set()

    async def _end_workers(self) -> None:
        """Cancel the periodic work, then wait for every task."""
        for task in self._workers:
            if task.get_name().startswith("every-"):
                task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._workers.clear()

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def workers_alive(self) -> int:
        return sum(1 for task in self._workers if not task.done())

    @property
    def workers_total(self) -> int:
        return len(self._workers)

    async def _gave_up(self, job: Job, reason: str) -> None:
        hook = self.on_gave_up.get(job.kind)
        if hook is None:
            return
        try:
            await hook(job, reason)
        except Exception:
            log.exception("reporting a failed job failed", extra={"fields": {"job": job.id}})

    async def _lost_for_good(self, job: Job) -> None:
        with job_log(job):
            log.error("job failed for good: interrupted at every attempt")
        await self._gave_up(job, lost(job))

    async def _call(self, job: Job) -> None:
        handler = self.handlers.get(job.kind)
        if handler is None:
            log.error("no handler for job kind")
            raise PermanentError(say(PEOPLE, "no_handler", job_kind=repr(job.kind)))
        await handler(job)

    def _finished(self, job: Job, outcome: str, started: float) -> None:
        if self.on_finished:
            self.on_finished(job, outcome, time.monotonic() - started)

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
        prepare: Callable[[Any], Awaitable[dict[str, Any]]] | None = None,
    ) -> int:
        """Add a job; with `supersede`, the key's older jobs of this kind are cancelled (a
        running one is interrupted wherever it runs). `prepare` runs in the same transaction
        (e.g. to create the row the job works on) and its result joins the payload, so both
        commit or neither does."""
        job = NewJob(kind, key, payload, queue, max_attempts, delay)
        async with self._adding(job, supersede) as conn:
            if prepare is not None:
                job = replace(job, payload={**payload, **await prepare(conn)})
            return await self._insert(conn, job, supersede)

    @abc.abstractmethod
    def row(self, job: NewJob) -> Any:
        """A job to insert with the inbox's commit (in its transaction)."""

    @abc.abstractmethod
    def _adding(self, job: NewJob, supersede: bool) -> contextlib.AbstractAsyncContextManager:
        """The transaction `job` is added in (the key's older jobs of its kind cancelled in it
        when it supersedes them); what must follow the commit happens as it closes."""

    @abc.abstractmethod
    async def _insert(self, conn: Any, job: NewJob, supersede: bool) -> int: ...


def lost(job: Job) -> str:
    return say(PEOPLE, "job_interrupted", attempts=job.attempts, max_attempts=job.max_attempts)


def job_log(job: Job) -> contextlib.AbstractContextManager[None]:
    return log_context(job=job.id, job_kind=job.kind, key=job.key)
