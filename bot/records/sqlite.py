"""SQLite storage (aiosqlite, WAL): one server process owns the file."""

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
from bot.records.schema import SQLITE, STEPS, VERSIONS, Migrated, behind, ddl, statements

BUSY_TIMEOUT_MS = 5000  # how long a statement waits for the inbox's write lock


async def _use_wal(conn: aiosqlite.Connection, wait: float) -> None:
    """`PRAGMA journal_mode=WAL` answers "database is locked" at once, without the busy
    timeout, while another connection holds the file's write lock in rollback mode: another
    process turning the same new file to WAL. Asked again until `wait` seconds have passed."""
    deadline, pause = time.monotonic() + wait, 0.005
    while True:
        try:
            await conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)


class SqliteDatabase:
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn
        self.migrated: Migrated | None = None  # what opening it applied (None: opened as is)
        self._lock = asyncio.Lock()
        self._held: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """In this process: one process owns the file."""
        lock = self._held.setdefault(key, asyncio.Lock())
        async with lock:
            yield

    @classmethod
    async def open(
        cls, path: Path | str, *, busy_timeout_ms: int = BUSY_TIMEOUT_MS, migrate: bool = True
    ) -> SqliteDatabase:
        """`migrate`: create it if need be and apply the schema's steps; else open an existing
        file as it is. WAL with `synchronous=NORMAL` survives a killed process; the inbox commits
        deliveries on its own connection at `synchronous=FULL`."""
        if str(path) == ":memory:":
            target, uri = ":memory:", False
        elif migrate:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            target, uri = str(path), False
        else:  # never create it
            target, uri = Path(path).absolute().as_uri() + "?mode=rw", True
        conn = await aiosqlite.connect(target, isolation_level=None, uri=uri)
        conn.row_factory = sqlite3.Row
        db = cls(conn)
        try:
            # First: another process may be making the file (its journal mode, its schema).
            await conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            await conn.execute("PRAGMA foreign_keys=ON")
            if migrate:
                await _use_wal(conn, busy_timeout_ms / 1000)
                await conn.execute("PRAGMA synchronous=NORMAL")
                db.migrated = await db.migrate()
            else:
                await db.schema_version()  # a file that is no database says so here
        except BaseException:
            await conn.close()  # its thread would keep the process alive
            raise
        return db

    async def close(self) -> None:
        await self.conn.close()

    async def migrate(self) -> Migrated:
        """Every step (each is idempotent) at every start, in one exclusive transaction: a second
        process opening a new file at the same time waits for it, then finds everything there."""
        async with self._lock:
            await self.conn.execute("BEGIN IMMEDIATE")
            try:
                done = Migrated(before=await self._recorded_version())
                await self._apply(VERSIONS)
                for step in STEPS:
                    await self._apply(step.schema)
                    for table, column, declaration in step.columns:
                        present = await self.conn.execute_fetchall(f"PRAGMA table_info({table})")
                        if column not in {row["name"] for row in present}:
                            await self.conn.execute(
                                f"ALTER TABLE {table} ADD COLUMN {column} {declaration}"
                            )
                    await self._apply(step.after)
                    await self._apply(step.sqlite)
                await self._apply(REPAIR_LINES)
                recorded = await self.conn.execute_fetchall(
                    "INSERT INTO schema_versions (version, name, applied_at) VALUES "
                    + ", ".join("(?, ?, ?)" for _ in STEPS)
                    + " ON CONFLICT (version) DO NOTHING RETURNING version",
                    [value for step in STEPS for value in (step.version, step.name, time.time())],
                )
                done.steps = sorted(row[0] for row in recorded)
                done.version = await self._recorded_version()
            except BaseException:
                await self.conn.execute("ROLLBACK")
                raise
            await self.conn.execute("COMMIT")
        return done

    async def _apply(self, script: str) -> None:
        """Statement by statement: `executescript` would commit the transaction."""
        for statement in statements(ddl(script, SQLITE)):
            await self.conn.execute(statement)

    async def _recorded_version(self) -> int:
        rows = await self.conn.execute_fetchall(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'"
        )
        if not rows:
            return 0
        rows = await self.conn.execute_fetchall("SELECT MAX(version) FROM schema_versions")
        return int(rows[0][0] or 0)

    async def schema_version(self) -> int:
        async with self._lock:
            return await self._recorded_version()

    async def empty(self) -> bool:
        row = await self.fetchone("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
        return not (row and row[0])

    async def check_schema(self) -> None:
        if (problem := behind(await self.schema_version())) is not None:
            raise problem

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
            return (await self.conn.execute(sql, args)).rowcount

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
