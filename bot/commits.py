"""How each backend commits a batch of deliveries with their jobs, before the ack."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bot.delivery import Delivery
from bot.records import deliveries
from bot.records.sqlite import BUSY_TIMEOUT_MS

if TYPE_CHECKING:
    from bot.queue.postgres import PgJobs
    from bot.records.postgres import PgDatabase

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
