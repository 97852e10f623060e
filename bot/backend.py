"""The storage backend the configuration names, opened: the only place that asks which one.
SQLite under COCKPIT_DATA_DIR by default (one process owns the file, its own job queue);
Postgres with jobs on procrastinate when COCKPIT_DATABASE_URL is set (several processes).
Both implement one contract: `bot.records.database.Database`, `bot.queue.JobQueue` and the
inbox's `Commits`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bot.config import ConfigError, Settings, shown_url
from bot.inbox import Commits, PgCommits, SqliteCommits
from bot.queue import JobQueue
from bot.queue.sqlite import Jobs
from bot.records.database import Database
from bot.records.sqlite import Database as SqliteDatabase
from bot.texts import catalogue


@dataclass
class Backend:
    db: Database
    jobs: JobQueue
    commits: Commits  # the inbox's: deliveries with their jobs, in one transaction

    async def close(self) -> None:
        await self.jobs.close()
        await self.db.close()


def _said(kind: str, **context: object) -> str:
    """What the operator is told (templates/cli/messages.txt.j2; `bot.checks.say` is above us)."""
    return catalogue("cli/messages.txt.j2", kind, **context)


def describe(settings: Settings) -> str:
    """The configured database in a few words, a password never shown."""
    if settings.database_url is None:
        return _said("sqlite_label", path=settings.db_path.absolute())
    return shown_url(settings.database_url.reveal())


def missing(settings: Settings) -> bool:
    """Nothing to read yet: the SQLite file was never made (Postgres is asked, not looked for)."""
    return settings.database_url is None and not settings.db_path.is_file()


@dataclass(frozen=True)
class Reach:
    """What trying the configured database found (for `check-config` and `serve`'s start)."""

    label: str  # `describe`
    shared: bool = False  # Postgres (several processes), else the SQLite file
    exists: bool = True  # SQLite: the file is there already (`serve` creates it)
    error: str | None = None  # it could not be reached: why (may name secrets: redact it)
    refused: bool = False  # Postgres refused these credentials or this database
    timed_out: bool = False
    version: int | None = None  # the schema's recorded version
    behind: str | None = None  # the schema is behind this release's: why


async def reach(settings: Settings, wait: float) -> Reach:
    """Try the configured database within about `wait` seconds: SQLite's file is only
    looked for; Postgres is connected to and its schema version read."""
    label = describe(settings)
    if settings.database_url is None:
        return Reach(label, exists=settings.db_path.exists())
    import psycopg

    from bot.records.postgres import PgDatabase, SchemaBehind

    url = settings.database_url.reveal()
    try:
        async with asyncio.timeout(wait + 1):
            conn = await psycopg.AsyncConnection.connect(url, connect_timeout=max(2, int(wait)))
        await conn.close()
    except TimeoutError:
        return Reach(label, shared=True, timed_out=True)
    except psycopg.Error as exc:
        refused = getattr(exc, "sqlstate", None) in ("28P01", "28000", "3D000")
        reason = " ".join(str(exc).split()) or exc.__class__.__name__
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
    except (TimeoutError, OSError) as exc:
        return Reach(label, shared=True, error=exc.__class__.__name__)
    return Reach(label, shared=True, version=version)


def check_role(settings: Settings, role: str) -> None:
    """ConfigError when a process of `role` cannot run on the configured backend: only `all`
    runs on SQLite (one process owns the file)."""
    if role != "all" and settings.database_url is None:
        raise ConfigError("COCKPIT_DATABASE_URL", "role_needs_postgres", role=role)


async def open_database(settings: Settings) -> Database:
    """The configured database, its schema current: the SQLite file applies its steps itself
    (one process owns it); a Postgres schema behind this release's is refused
    (`bot.records.postgres.SchemaBehind`) unless COCKPIT_MIGRATE_ON_START=1 lets this
    process migrate it."""
    if settings.database_url is None:
        return await SqliteDatabase.open(settings.db_path)
    from bot.records.postgres import PgDatabase

    db = await PgDatabase.open(settings.database_url.reveal())
    try:
        if settings.migrate_on_start:
            await db.migrate()
        await db.check_schema()
    except BaseException:
        await db.close()
        raise
    return db


async def open_backend(settings: Settings) -> Backend:
    """The database, the job queue on it (opened) and the inbox's commits."""
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
    Postgres) and say where the schema is now, in one line."""
    if settings.database_url is None:
        db = await SqliteDatabase.open(settings.db_path)  # opening applies the steps
        try:
            return _said(
                "sqlite_migrated", path=settings.db_path, version=await db.schema_version()
            )
        finally:
            await db.close()
    from bot.records.postgres import PgDatabase

    pg = await PgDatabase.open(settings.database_url.reveal())
    try:
        done = await pg.migrate()
        await pg.check_schema()
    finally:
        await pg.close()
    return _said(
        "pg_migrated",
        version=done.version,
        steps=done.steps,
        theirs=done.procrastinate_schema,
        applied=len(done.procrastinate),
    )
