"""SQLite storage (aiosqlite, WAL): one process owns the file and applies every schema step
at every start."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

from bot.records.database import Interrupted
from bot.records.jobs import REPAIR_LINES
from bot.records.schema import STEPS, VERSIONS

BUSY_TIMEOUT_MS = 5000  # how long a statement waits for the inbox's write lock


class Database:
    """`bot.records.database.Database` on one aiosqlite connection (one process owns the
    file); writes and multi-statement work go through `transaction()`."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self._lock = asyncio.Lock()
        self._held: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """In this process: one process owns the file."""
        lock = self._held.setdefault(key, asyncio.Lock())
        async with lock:
            yield

    @classmethod
    async def open(cls, path: Path | str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> Database:
        """Open (and create) the database. WAL with `synchronous=NORMAL` survives a killed
        process; the inbox commits deliveries on its own connection at `synchronous=FULL`."""
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        conn.row_factory = sqlite3.Row
        db = cls(conn)
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=NORMAL")
            await conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            await conn.execute("PRAGMA foreign_keys=ON")
            await db.migrate()
        except BaseException:
            await conn.close()  # its thread would keep the process alive
            raise
        return db

    async def close(self) -> None:
        await self.conn.close()

    async def migrate(self) -> list[int]:
        """Apply every step (each is idempotent: one process owns the file, so every start
        runs them all) and record the new ones; returns the versions recorded now."""
        async with self._lock:
            await self.conn.executescript(VERSIONS)
            for step in STEPS:
                await self.conn.executescript(step.schema)
                for table, column, declaration in step.columns:
                    present = await self.conn.execute_fetchall(f"PRAGMA table_info({table})")
                    if column not in {row["name"] for row in present}:
                        await self.conn.execute(
                            f"ALTER TABLE {table} ADD COLUMN {column} {declaration}"
                        )
                await self.conn.executescript(step.after)
            await self.conn.executescript(REPAIR_LINES)
            recorded = await self.conn.execute_fetchall(
                "INSERT INTO schema_versions (version, name, applied_at) VALUES "
                + ", ".join("(?, ?, ?)" for _ in STEPS)
                + " ON CONFLICT (version) DO NOTHING RETURNING version",
                [value for step in STEPS for value in (step.version, step.name, time.time())],
            )
        return sorted(row[0] for row in recorded)

    async def schema_version(self) -> int:
        """The newest step recorded (0: none)."""
        row = await self.fetchone("SELECT MAX(version) FROM schema_versions")
        return int(row[0] or 0) if row else 0

    @contextlib.asynccontextmanager
    async def transaction(
        self, lock: str | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[aiosqlite.Connection]:
        """`lock` needs nothing here: BEGIN IMMEDIATE already excludes every writer."""
        async with self._lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                async with self._deadline(timeout):
                    yield self.conn
            except BaseException:
                if self.conn.in_transaction:  # an interrupted write rolled it back already
                    await self.conn.execute("ROLLBACK")
                raise
            await self.conn.execute("COMMIT")

    @contextlib.asynccontextmanager
    async def _deadline(self, seconds: float | None) -> AsyncIterator[None]:
        """Interrupt the connection's statement `seconds` from now or when the caller is
        cancelled: otherwise the statement runs on in aiosqlite's thread and everything queued
        behind it (every job: one connection) waits for it, whoever stopped waiting."""
        if seconds is None:
            yield
            return
        loop = asyncio.get_running_loop()
        interrupts: list[asyncio.Task] = []
        timer = loop.call_later(
            seconds, lambda: interrupts.append(loop.create_task(self.conn.interrupt()))
        )
        try:
            yield
        except sqlite3.OperationalError as exc:
            if interrupts and "interrupted" in str(exc):
                raise Interrupted(f"stopped after {seconds} s") from exc
            raise
        except asyncio.CancelledError:
            await self.conn.interrupt()
            raise
        finally:
            timer.cancel()
            for task in interrupts:  # done before the connection is anyone else's
                await task

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        async with self._lock:
            cursor = await self.conn.execute(sql, args)
            if sql.lstrip().upper().startswith("INSERT"):
                return cursor.lastrowid or 0
            return cursor.rowcount

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, args)
        return rows[0] if rows else None

    async def fetchall(self, sql: str, args: Iterable[Any] = ()) -> list[sqlite3.Row]:
        """One statement (a `... RETURNING` write is atomic on its own), one thread hop."""
        async with self._lock:
            return list(await self.conn.execute_fetchall(sql, tuple(args)))

    async def ping(self) -> bool:
        try:
            await self.fetchone("SELECT 1")
        except (sqlite3.Error, ValueError):
            return False
        return True
