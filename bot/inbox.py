"""Durable inbox: deliveries and their jobs committed before the ack, many per commit, on
either backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bot.delivery import Delivery
from bot.queue import EVENTS, JobQueue, NewJob, failure
from bot.records import deliveries
from bot.records.sqlite import BUSY_TIMEOUT_MS

if TYPE_CHECKING:
    from bot.queue.postgres import PgJobs
    from bot.records.postgres import PgDatabase

log = logging.getLogger(__name__)


class InboxUnavailable(RuntimeError):
    """The delivery was not committed (the server answers 503; it can be redelivered)."""


class Inbox:
    def __init__(self, commits: Commits, jobs: JobQueue) -> None:
        self.commits = commits
        self.jobs = jobs
        self._waiting: list[tuple[Delivery, Any, asyncio.Future[bool]]] = []
        self._committing: asyncio.Task | None = None
        self._failing = False  # the last commit failed (e.g. disk full): unhealthy until one works
        self._closing = False

    async def start(self) -> None:
        self._closing = False
        await self.commits.start()

    async def stop(self) -> None:
        """Finish the commits under way (their requests get answers), then close."""
        self._closing = True
        if self._committing is not None:
            with contextlib.suppress(Exception):
                await self._committing
        await self.commits.stop()

    @property
    def alive(self) -> bool:
        return self.commits.open and not self._failing

    async def recover(self) -> bool:
        """After a failed commit: alive again once a probe works, without waiting for a delivery."""
        if self.commits.open and not self._closing and await self.commits.probe():
            self._failing = False
        return self.alive

    async def store(self, delivery: Delivery) -> bool:
        """True if the delivery is new, False if this id was stored before."""
        if not self.commits.open or self._closing:
            raise InboxUnavailable("inbox is not open")
        job = self.jobs.row(
            NewJob("delivery", delivery.key, {"delivery_id": delivery.id}, EVENTS, max_attempts=5)
        )
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((delivery, job, future))
        if self._committing is None:
            self._committing = asyncio.create_task(self._commit_waiting(), name="inbox-commit")
        return await future

    async def _commit_waiting(self) -> None:
        try:
            while self._waiting and self.commits.open:
                batch, self._waiting = self._waiting, []
                try:
                    stored = await self.commits.commit([(d, job) for d, job, _ in batch])
                except Exception as exc:  # whatever it was, the batch is not stored: 503s
                    self._failing = True
                    reason = failure(exc)
                    log.error("inbox commit failed", extra={"fields": {"reason": reason}})
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(InboxUnavailable(f"inbox commit failed: {reason}"))
                    continue
                self._failing = False
                for (_, _, future), new in zip(batch, stored, strict=True):
                    if not future.done():  # a request that went away still counts as stored
                        future.set_result(new)
                if any(stored):
                    self.jobs.wake(EVENTS)
        finally:
            self._committing = None


# Postgres: a commit's statements, and the whole commit with its wait for a connection.
PG_STATEMENT_SECONDS = 4
PG_COMMIT_SECONDS = 7.0


def _rows(batch: list[tuple[Delivery, Any]], now: float) -> tuple[dict[str, tuple], dict]:
    """A repeat within one batch is the same delivery, its first request's."""
    rows: dict[str, tuple] = {}
    routes: dict[str, Any] = {}
    for d, job in batch:
        if d.id not in rows:
            rows[d.id] = (d.id, d.event, d.action, d.installation_id, d.repo,
                          zlib.compress(d.body, 1), now)  # fmt: skip
            routes[d.id] = job
    return rows, routes


def _stored(batch: list[tuple[Delivery, Any]], fresh: set[str]) -> list[bool]:
    stored, fresh = [], set(fresh)
    for d, _ in batch:
        stored.append(d.id in fresh)
        fresh.discard(d.id)
    return stored


def commit(conn: sqlite3.Connection, batch: list[tuple[Delivery, tuple]]) -> list[bool]:
    """SQLite, on a worker thread (the event loop keeps answering while zlib and SQLite work)."""
    return _stored(batch, deliveries.store_new(conn, *_rows(batch, time.time())))


class Commits(Protocol):
    @property
    def open(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        """Each new delivery with its job in one transaction; True where it was new."""

    async def probe(self) -> bool: ...


class SqliteCommits:
    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None

    @property
    def open(self) -> bool:
        return self._conn is not None

    async def start(self) -> None:
        self._conn = await asyncio.to_thread(deliveries.connect, self.path, self.busy_timeout_ms)

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.to_thread(conn.close)

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        if self._conn is None:
            raise sqlite3.OperationalError("inbox is closed")
        return await asyncio.to_thread(commit, self._conn, batch)

    async def probe(self) -> bool:
        if self._conn is None:
            return False
        try:
            await asyncio.to_thread(deliveries.probe, self._conn)
        except sqlite3.Error:
            return False
        return True


class PgCommits:
    """The deliveries and their procrastinate jobs deferred on the same connection, so both
    commit before the ack or neither does."""

    def __init__(self, db: PgDatabase, jobs: PgJobs) -> None:
        self.db = db
        self.jobs = jobs
        self.open = False

    async def start(self) -> None:
        self.open = True

    async def stop(self) -> None:
        self.open = False

    async def probe(self) -> bool:
        return self.open and await self.db.ping()

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        """Bounded, so a delivery gets its 503 well within GitHub's 10 s when Postgres is
        away or a lock holds the tables (an acknowledged delivery is always committed)."""
        try:
            async with asyncio.timeout(PG_COMMIT_SECONDS):
                rows, routes = _rows(batch, time.time())
                async with self.db.transaction() as conn:
                    fresh = await deliveries.insert_new(conn, rows, PG_STATEMENT_SECONDS)
                    await self.jobs.insert_in(conn, [routes[i] for i in rows if i in fresh])
        except TimeoutError:
            raise OSError(f"the commit took over {PG_COMMIT_SECONDS:g} s") from None
        return _stored(batch, fresh)
