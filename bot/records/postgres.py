"""Postgres storage (psycopg 3, async pool) for several processes sharing one database."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import psycopg.rows
import psycopg_pool
from psycopg_pool import AsyncConnectionPool

from bot.records import schema
from bot.records.database import Interrupted
from bot.records.schema import Migrated
from bot.records.schema import SchemaBehind as SchemaBehind  # where callers long found it
from bot.texts import OPERATOR, say

log = logging.getLogger(__name__)

POOL_MAX = 10
SCHEMA_LOCK = 0x636F636B  # "cock": one process at a time migrates the schema
# An outage must fail fast: a delivery gets its 503 well within GitHub's 10 s, health answers
# within 2 s, and a pool reconnects within seconds of the server being back (psycopg_pool's
# backoff doubles until `reconnect_timeout`; past it, the next request starts afresh).
CONNECT_TIMEOUT = 3  # seconds to open a connection
POOL_TIMEOUT = 3.0  # seconds to wait for a pooled connection
RECONNECT_TIMEOUT = 5.0
PING_TIMEOUT = 1.5
STATEMENT_TIMEOUT = "60s"  # any statement of the server's own work (maintenance is chunked)
# Migrations take their locks for at most this long, then try again (a long `pg_dump` or
# report holding a table never stops ingress behind a waiting ALTER).
LOCK_TIMEOUT = "5s"
MIGRATE_TRIES = 12
# The last migration of the procrastinate release (3.10) whose schema the last release without
# versioned steps created: such a database has exactly these, and nothing records them.
PROCRASTINATE_BASELINE = "03.04.00_50_post_add_retry_failed_job_procedure.sql"
PROCRASTINATE_VERSIONS = """
CREATE TABLE IF NOT EXISTS procrastinate_migrations (
    name TEXT PRIMARY KEY,
    applied_at DOUBLE PRECISION NOT NULL
)"""

# What a CREATE statement makes, so one already there is skipped (see `Statement`).
_CREATES = re.compile(r"CREATE (?:TABLE|(?:UNIQUE )?INDEX) IF NOT EXISTS (\w+)")
_MARK = re.compile(r"('[^']*')|\?")  # a string literal (kept), or a placeholder


class MigrationFailed(RuntimeError): ...


class IntegrityError(sqlite3.IntegrityError):
    """A constraint said no. Subclasses sqlite3's, so callers catch one error hierarchy
    whichever backend runs; the Postgres error is the cause."""


class OperationalError(sqlite3.OperationalError): ...


@dataclass(frozen=True)
class Statement:
    """One DDL statement and a query saying whether what it makes is there already (then it
    is skipped: an existing table is never locked by a migration that would change nothing)."""

    sql: str
    present: str


def step_ddl(step: schema.Step) -> tuple[Statement, ...]:
    found = [*_creates(step.schema)]
    for table, column, declaration in step.columns:
        found.append(
            Statement(
                f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {declaration}",
                "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema ="
                f" current_schema() AND table_name = '{table}' AND column_name = '{column}')",
            )
        )
    found += _creates(step.after)
    found += [
        Statement(
            sql,
            f"SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = '{name}'"
            " AND NOT tgisinternal)",
        )
        for name, sql in step.postgres.items()
    ]
    return tuple(found)


def _creates(script: str) -> list[Statement]:
    found = []
    for statement in schema.statements(schema.ddl(script, schema.POSTGRES)):
        name = _CREATES.search(statement)
        if name is None:
            raise ValueError(f"not a CREATE … IF NOT EXISTS: {statement[:60]}")
        found.append(Statement(statement, f"SELECT to_regclass('{name.group(1)}') IS NOT NULL"))
    return found


def procrastinate_migrations() -> list[Path]:
    """Oldest first (their names sort by version)."""
    from procrastinate.schema import SchemaManager

    folder = Path(SchemaManager.get_migrations_path())
    return sorted(folder.glob("*.sql"), key=lambda path: path.name)


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """Every statement is written once, with `?` placeholders (sqlite3's own, which psycopg
    lacks): here they become `%s`, string literals kept and a literal `%` doubled."""
    if re.match(r"^\s*INSERT\s+OR\b", sql, re.I):
        raise ValueError("INSERT OR … is SQLite only: use INSERT … ON CONFLICT")
    return _MARK.sub(lambda found: found[1] or "%s", sql.replace("%", "%%"))


class Row(tuple):
    """Read by position or by column name, like sqlite3.Row (psycopg's row factories give one
    or the other, and the floor reads both ways on either backend)."""

    _index: dict[str, int]

    def __new__(cls, values: Iterable[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> Any:
    description = cursor.description
    if description is None:
        return None
    return functools.partial(Row, index={column.name: n for n, column in enumerate(description)})


class Cursor:
    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    async def fetchone(self) -> Row | None:
        return self._rows.pop(0) if self._rows else None

    async def fetchall(self) -> list[Row]:
        rows, self._rows = self._rows, []
        return rows


@contextlib.contextmanager
def _errors():
    try:
        yield
    except psycopg.errors.IntegrityError as exc:
        raise IntegrityError(str(exc)) from exc
    except psycopg.errors.QueryCanceled as exc:  # statement_timeout (asyncio cancels raise)
        raise Interrupted(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise OperationalError(str(exc)) from exc


class Connection:
    """With a `deadline` on the event loop's clock, each statement may run only until then."""

    def __init__(self, conn: psycopg.AsyncConnection, deadline: float | None = None) -> None:
        self.raw = conn
        self.deadline = deadline

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor:
        with _errors():
            if self.deadline is not None:
                left = self.deadline - asyncio.get_running_loop().time()
                await self.raw.execute(f"SET LOCAL statement_timeout = {max(1, int(left * 1000))}")
            cursor = await self.raw.execute(translate(sql), tuple(args))
            rows = await cursor.fetchall() if cursor.description is not None else []
        return Cursor(rows, cursor.rowcount)

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with _errors():
            async with self.raw.cursor() as cursor:
                await cursor.executemany(translate(sql), [tuple(r) for r in rows])


async def _configure(conn: psycopg.AsyncConnection) -> None:
    """A statement never runs unbounded (a pooler in session mode keeps this; an `options`
    startup parameter it might refuse)."""
    await conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")


class PgDatabase:
    """`transaction(lock=…)` also takes a transaction-scoped advisory lock, so other processes
    wait for it."""

    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, url: str, *, max_size: int = POOL_MAX) -> PgDatabase:
        pool = AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs={
                "autocommit": True,
                "row_factory": _row_factory,
                "connect_timeout": CONNECT_TIMEOUT,
            },
            configure=_configure,
            open=False,
            check=AsyncConnectionPool.check_connection,
            timeout=POOL_TIMEOUT,
            reconnect_timeout=RECONNECT_TIMEOUT,
        )
        with _errors():
            try:
                await pool.open(wait=True, timeout=30)
            except BaseException:
                await pool.close()
                raise
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    async def migrate(self) -> Migrated:
        """Our steps, then procrastinate's schema or its newer migrations, each once and recorded,
        each in its own transaction under the schema lock with `lock_timeout`, tried again while
        a long transaction holds a table."""
        done = Migrated(before=await self.schema_version())
        await self._in_step(self._bootstrap)
        for step in schema.STEPS:
            if await self._in_step(lambda conn, step=step: self._apply_step(conn, step)):
                done.steps.append(step.version)
        done.procrastinate_schema = await self._in_step(self._procrastinate_baseline) or ""
        for path in procrastinate_migrations():
            if await self._in_step(lambda conn, path=path: self._apply_migration(conn, path)):
                done.procrastinate.append(path.name)
        done.version = await self.schema_version()
        if done.steps or done.procrastinate:
            log.info(
                "schema migrated",
                extra={"fields": {"steps": done.steps, "procrastinate": done.procrastinate}},
            )
        return done

    async def _in_step(self, work: Any) -> Any:
        for attempt in range(1, MIGRATE_TRIES + 1):
            try:
                async with self.pool.connection() as conn, conn.transaction():
                    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    await conn.execute("SET LOCAL statement_timeout = 0")
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    return await work(conn)
            except psycopg.errors.LockNotAvailable as exc:
                if attempt == MIGRATE_TRIES:
                    why = say(
                        OPERATOR, "migration_locked", error=exc, tries=attempt, wait=LOCK_TIMEOUT
                    )
                    raise MigrationFailed(why) from None
                log.warning("migration waits for a lock", extra={"fields": {"try": attempt}})
                await asyncio.sleep(min(0.5 * attempt, 5.0))
        return None

    async def _bootstrap(self, conn: psycopg.AsyncConnection) -> None:
        for text in (schema.VERSIONS, PROCRASTINATE_VERSIONS):
            await conn.execute(text)

    async def _apply_step(self, conn: psycopg.AsyncConnection, step: schema.Step) -> bool:
        cursor = await conn.execute(
            "SELECT 1 FROM schema_versions WHERE version = %s", (step.version,)
        )
        if await cursor.fetchone():
            return False
        for statement in step_ddl(step):
            present = await (await conn.execute(statement.present)).fetchone()
            if not (present and present[0]):
                await conn.execute(statement.sql)
        await conn.execute(
            "INSERT INTO schema_versions (version, name, applied_at) VALUES (%s, %s, %s)",
            (step.version, step.name, time.time()),
        )
        return True

    async def _procrastinate_baseline(self, conn: psycopg.AsyncConnection) -> str | None:
        """A database without records: a new one gets procrastinate's whole schema (all its
        migrations, so to speak); one the last unversioned release made has its baseline."""
        from procrastinate.schema import SchemaManager

        if await (await conn.execute("SELECT 1 FROM procrastinate_migrations LIMIT 1")).fetchone():
            return None
        present = await (
            await conn.execute("SELECT to_regclass('procrastinate_jobs') IS NOT NULL")
        ).fetchone()
        names = [path.name for path in procrastinate_migrations()]
        if present and present[0]:
            names = [name for name in names if name <= PROCRASTINATE_BASELINE]
        else:
            await conn.execute(SchemaManager.get_schema())
        for name in names:
            await conn.execute(
                "INSERT INTO procrastinate_migrations (name, applied_at) VALUES (%s, %s)",
                (name, time.time()),
            )
        return "recorded" if present and present[0] else "created"

    async def _apply_migration(self, conn: psycopg.AsyncConnection, path: Path) -> bool:
        cursor = await conn.execute(
            "SELECT 1 FROM procrastinate_migrations WHERE name = %s", (path.name,)
        )
        if await cursor.fetchone():
            return False
        await conn.execute(path.read_text())
        await conn.execute(
            "INSERT INTO procrastinate_migrations (name, applied_at) VALUES (%s, %s)",
            (path.name, time.time()),
        )
        return True

    async def schema_version(self) -> int:
        row = await self.fetchone("SELECT to_regclass('schema_versions') IS NOT NULL")
        if not (row and row[0]):
            return 0
        row = await self.fetchone("SELECT COALESCE(MAX(version), 0) FROM schema_versions")
        return int(row[0]) if row else 0

    async def missing_migrations(self) -> list[str]:
        names = [path.name for path in procrastinate_migrations()]
        row = await self.fetchone("SELECT to_regclass('procrastinate_migrations') IS NOT NULL")
        if not (row and row[0]):
            return names
        recorded = {r[0] for r in await self.fetchall("SELECT name FROM procrastinate_migrations")}
        return [name for name in names if name not in recorded]

    async def empty(self) -> bool:
        row = await self.fetchone(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"
        )
        return not (row and row[0])

    async def check_schema(self) -> None:
        """A newer schema is fine: steps only add, so a rollout may run both."""
        version, missing = await self.schema_version(), await self.missing_migrations()
        if (problem := schema.behind(version, missing=len(missing), on_start=True)) is not None:
            raise problem

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """One holder of `key` at a time across every process: a session advisory lock on a
        connection of its own, released when the work ends or its process dies. A connection
        whose lock state is unknown (cancelled while waiting, or the unlock failed) is closed,
        not handed back to the pool holding a lock."""
        with _errors():  # waiting for a connection (PoolTimeout) too
            async with self.pool.connection() as conn:
                clean = False
                try:
                    await conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
                    try:
                        yield
                    finally:
                        await conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
                        clean = True
                finally:
                    if not clean:
                        await conn.close()

    @contextlib.asynccontextmanager
    async def transaction(
        self, lock: str | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[Connection]:
        """With `timeout`, each statement gets what is left of it as its `statement_timeout`
        (a cancelled caller's statement is cancelled by psycopg)."""
        with _errors():  # also waiting for a connection (PoolTimeout)
            async with self.pool.connection() as conn, conn.transaction():
                now = asyncio.get_running_loop().time()
                bounded = Connection(conn, None if timeout is None else now + timeout)
                if lock is not None:
                    await bounded.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (lock,))
                yield bounded

    async def _statement(self, sql: str, args: Sequence[Any]) -> Cursor:
        with _errors():  # also waiting for a connection (PoolTimeout)
            async with self.pool.connection() as conn:
                return await Connection(conn).execute(sql, args)

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        return max((await self._statement(sql, args)).rowcount, 0)

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> Row | None:
        rows = await self.fetchall(sql, args)
        return rows[0] if rows else None

    async def fetchall(self, sql: str, args: Iterable[Any] = ()) -> list[Row]:
        return await (await self._statement(sql, tuple(args))).fetchall()

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(PING_TIMEOUT):
                async with self.pool.connection(timeout=PING_TIMEOUT) as conn:
                    await conn.execute("SELECT 1")
        except (sqlite3.Error, psycopg.Error, psycopg_pool.PoolTimeout, TimeoutError):
            return False
        return True
