"""The storage backend the configuration names, opened: the only place that asks which one."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass

from bot.config import ConfigError, Settings, in_words, shown_url
from bot.inbox import Commits, PgCommits, SqliteCommits
from bot.queue import JobQueue
from bot.queue.sqlite import Jobs
from bot.records.database import Database
from bot.records.schema import behind
from bot.records.sqlite import SqliteDatabase
from bot.texts import OPERATOR, say


@dataclass
class Backend:
    db: Database
    jobs: JobQueue
    commits: Commits  # the inbox's: deliveries with their jobs, in one transaction

    async def close(self) -> None:
        await self.jobs.close()
        await self.db.close()


def describe(settings: Settings) -> str:
    """A password never shown."""
    if settings.database_url is None:
        return say(OPERATOR, "sqlite_label", path=settings.db_path.absolute())
    return shown_url(settings.database_url.reveal())


@dataclass(frozen=True)
class Reach:
    """What trying the configured database found (`check-config`, `serve`'s start, commands)."""

    label: str  # `describe`
    shared: bool = False  # Postgres (several processes), else the SQLite file
    exists: bool = True  # SQLite: the file is there and holds tables (`serve` makes them)
    error: str | None = None  # it could not be used: why, in words (may name secrets: redact)
    refused: bool = False  # a setting must change: credentials, database name, the file
    not_database: bool = False  # SQLite: the file is something else
    timed_out: bool = False
    version: int | None = None  # the schema's recorded version
    behind: str | None = None  # the schema is behind this release's: why


async def reach(settings: Settings, wait: float) -> Reach:
    """Changing nothing: SQLite's file is opened as it is (if it is there), Postgres is
    connected to."""
    if settings.database_url is None:
        return await _reach_sqlite(settings, wait)
    import psycopg

    from bot.records.postgres import PgDatabase, SchemaBehind

    label = describe(settings)
    url = settings.database_url.reveal()
    try:
        async with asyncio.timeout(wait + 1):
            conn = await psycopg.AsyncConnection.connect(url, connect_timeout=max(2, int(wait)))
        await conn.close()
    except TimeoutError:
        return Reach(label, shared=True, timed_out=True)
    except psycopg.Error as exc:
        refused = getattr(exc, "sqlstate", None) in ("28P01", "28000", "3D000")
        reason = " ".join(str(exc).split()) or in_words(exc)
        return Reach(label, shared=True, error=reason, refused=refused)
    version = None
    try:
        async with asyncio.timeout(wait * 2):
            db = await PgDatabase.open(url, max_size=1)
            try:
                version = await db.schema_version()
                await db.check_schema()
            finally:
                await db.close()
    except SchemaBehind as exc:
        return Reach(label, shared=True, version=version, behind=str(exc))
    except (TimeoutError, OSError, sqlite3.Error, psycopg.Error) as exc:
        return Reach(label, shared=True, error=in_words(exc))
    return Reach(label, shared=True, version=version)


async def _reach_sqlite(settings: Settings, wait: float) -> Reach:
    label, path = describe(settings), settings.db_path
    if not path.exists():
        return Reach(label, exists=False)
    try:
        db = await SqliteDatabase.open(path, migrate=False, busy_timeout_ms=int(wait * 1000))
        try:
            version, empty = await db.schema_version(), await db.empty()
        finally:
            await db.close()
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        busy = code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        not_database = code == sqlite3.SQLITE_NOTADB
        return Reach(label, error=str(exc), refused=not busy, not_database=not_database)
    problem = behind(version)
    said = None if problem is None else str(problem)
    return Reach(label, exists=not empty, version=version, behind=said)


def check_role(settings: Settings, role: str) -> None:
    """Only `all` runs on SQLite (one process owns the file)."""
    if role != "all" and settings.database_url is None:
        raise ConfigError("COCKPIT_DATABASE_URL", "role_needs_postgres", role=role)


async def open_database(settings: Settings, *, read_only: bool = False) -> Database:
    """Its schema current, or refused (SchemaBehind says to run `cockpit migrate`): the
    server's SQLite file applies the missing steps itself, Postgres only with
    COCKPIT_MIGRATE_ON_START=1; `read_only` (a command that reports) never changes it."""
    if settings.database_url is None:
        db: Database = await SqliteDatabase.open(settings.db_path, migrate=not read_only)
    else:
        from bot.records.postgres import PgDatabase

        db = await PgDatabase.open(settings.database_url.reveal())
    try:
        if settings.database_url and settings.migrate_on_start and not read_only:
            await db.migrate()
        await db.check_schema()
    except BaseException:
        await db.close()
        raise
    return db


async def open_backend(settings: Settings) -> Backend:
    db = await open_database(settings)
    if settings.database_url is None:
        return Backend(db, Jobs(db), SqliteCommits(settings.db_path))
    from bot.queue.postgres import PgJobs

    try:
        pg_jobs = PgJobs(db, settings.database_url.reveal(), stalled_after=settings.worker_timeout)
        await pg_jobs.open()
    except BaseException:
        await db.close()
        raise
    return Backend(db, pg_jobs, PgCommits(db, pg_jobs))


async def migrate(settings: Settings) -> str:
    """`cockpit migrate`: apply the schema's missing steps (ours, and procrastinate's on
    Postgres) and say what it did, in one line."""
    label = describe(settings)
    if settings.database_url is None:
        db = await SqliteDatabase.open(settings.db_path)  # opening applies the steps
        await db.close()
        assert db.migrated is not None
        return say(OPERATOR, "migrated", label=label, done=db.migrated, shared=False)
    from bot.records.postgres import PgDatabase

    pg = await PgDatabase.open(settings.database_url.reveal())
    try:
        done = await pg.migrate()
        await pg.check_schema()
    finally:
        await pg.close()
    return say(OPERATOR, "migrated", label=label, done=done, shared=True)
