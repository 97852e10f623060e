"""`cockpit migrate`: versioned schema steps (ours and procrastinate's), an upgrade from the last
release without them, `serve` refusing a schema that is behind, and locks taken with a bound."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading

import psycopg
import pytest

from bot.records import schema
from bot.records.postgres import (
    PROCRASTINATE_BASELINE,
    PgDatabase,
    SchemaBehind,
    procrastinate_migrations,
    step_ddl,
)
from bot.records.sqlite import SqliteDatabase
from tests.conftest import WEBHOOK_SECRET
from tests.schema_steps import apply_sqlite_step
from tests.serverproc import ServerProcess


def previous_release(url: str) -> None:
    """The schema as the last release without versioned steps left it: its own DDL (step 1,
    frozen) and procrastinate 3.10's schema, no record of either; a PR and a job in it."""
    from procrastinate.schema import SchemaManager

    with psycopg.connect(url, autocommit=True) as conn:
        for statement in step_ddl(schema.STEPS[0]):
            conn.execute(statement.sql)
        conn.execute(SchemaManager.get_schema())
        conn.execute("INSERT INTO pulls (repo, number, title) VALUES ('octo/widgets', 7, 'kept')")
        conn.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status)"
            " VALUES ('events', 'cockpit.job', '{}', 'todo')"
        )


def pg(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


def cockpit(*args: str, env: dict[str, str], cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def empty_database(pg_cluster) -> str:
    return pg_cluster.create_database()


def test_migrate_upgrades_a_database_of_the_previous_release(tmp_path, empty_database):
    previous_release(empty_database)
    env = {"COCKPIT_DATABASE_URL": empty_database}
    first = cockpit("migrate", env=env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    all_steps = ", ".join(str(step.version) for step in schema.STEPS)
    assert first.stdout.endswith(
        f"/{empty_database.rsplit('/', 1)[1]}: schema from version 0 to"
        f" {schema.SCHEMA_VERSION} (steps {all_steps}); procrastinate's existing schema"
        " recorded\n"
    ), first.stdout
    versions = pg(empty_database, "SELECT version FROM schema_versions ORDER BY version")
    assert [v for (v,) in versions] == [step.version for step in schema.STEPS]
    columns = pg(
        empty_database,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'reviews'",
    )
    assert ("run_owner",) in columns
    assert pg(empty_database, "SELECT to_regclass('command_uses') IS NOT NULL") == [(True,)]
    assert pg(empty_database, "SELECT title FROM pulls") == [("kept",)]
    assert pg(empty_database, "SELECT COUNT(*) FROM procrastinate_jobs") == [(1,)]
    recorded = [n for (n,) in pg(empty_database, "SELECT name FROM procrastinate_migrations")]
    assert max(recorded) == PROCRASTINATE_BASELINE
    again = cockpit("migrate", env=env, cwd=tmp_path)
    assert again.returncode == 0
    assert again.stdout.endswith(
        f": schema already at version {schema.SCHEMA_VERSION}; procrastinate's schema current\n"
    )


async def test_a_missing_procrastinate_migration_is_applied_and_recorded(pg_cluster):
    url = pg_cluster.create_database()
    previous_release(url)
    last = procrastinate_migrations()[-1].name
    db = await PgDatabase.open(url)
    try:
        await db.migrate()
        await db.execute("DELETE FROM procrastinate_migrations WHERE name = ?", (last,))
        assert await db.missing_migrations() == [last]
        with pytest.raises(SchemaBehind, match="1 procrastinate migration"):
            await db.check_schema()
        done = await db.migrate()
        assert done.procrastinate == [last] and done.steps == []
        await db.check_schema()
    finally:
        await db.close()


async def test_serve_refuses_a_schema_that_is_behind_unless_told_to_migrate(
    tmp_path, github, empty_database
):
    previous_release(empty_database)
    env = {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        "COCKPIT_DATABASE_URL": empty_database,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",  # a worker's reviewer
    }
    refused = cockpit("serve", "--role", "worker", env=env, cwd=tmp_path)
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.startswith("✗ database:")]
    assert len(lines) == 1 and "cockpit migrate" in lines[0] and "no recorded" in lines[0]
    assert pg(empty_database, "SELECT to_regclass('schema_versions')") == [(None,)]
    server = ServerProcess(
        {**env, "COCKPIT_MIGRATE_ON_START": "1"}, tmp_path / "data", tmp_path / "serve.log"
    )
    try:
        await server.start()
    finally:
        server.terminate()
    assert pg(empty_database, "SELECT MAX(version) FROM schema_versions") == [
        (schema.SCHEMA_VERSION,)
    ]


async def test_migrate_waits_out_a_long_read_without_stopping_ingress(tmp_path, empty_database):
    """A long transaction reads `reviews` (a report, a pg_dump): the migration's ALTER waits
    at most lock_timeout at a time and tries again, ingress keeps storing deliveries, and the
    migration completes once the reader is gone."""
    previous_release(empty_database)
    reader = psycopg.connect(empty_database)
    reader.execute("SELECT COUNT(*) FROM reviews").fetchall()  # holds ACCESS SHARE until commit
    result: dict[str, subprocess.CompletedProcess] = {}
    migrating = threading.Thread(
        target=lambda: result.update(
            run=cockpit("migrate", env={"COCKPIT_DATABASE_URL": empty_database}, cwd=tmp_path)
        )
    )
    migrating.start()
    try:
        with psycopg.connect(empty_database, autocommit=True) as ingress:
            waiting = "SELECT COUNT(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            waiting += " WHERE c.relname = 'reviews' AND NOT l.granted"
            for _ in range(600):  # the migration is queued for the lock (bounded wait)
                if ingress.execute(waiting).fetchone()[0]:
                    break
                await asyncio.sleep(0.05)
            ingress.execute("SET statement_timeout = '4s'")  # the inbox's own bound
            for n in range(3):
                ingress.execute(
                    "INSERT INTO deliveries (id, event, body, received_at) VALUES (%s, 'ping',"
                    " '\\x00', 0)",
                    (f"during-migration-{n}",),
                )
    finally:
        reader.rollback()
        reader.close()
        await asyncio.to_thread(migrating.join, 120)
    assert result["run"].returncode == 0, result["run"].stderr
    assert pg(empty_database, "SELECT COUNT(*) FROM deliveries") == [(3,)]
    assert pg(empty_database, "SELECT MAX(version) FROM schema_versions") == [
        (schema.SCHEMA_VERSION,)
    ]


async def test_sqlite_applies_its_steps_at_start_and_records_them(tmp_path):
    path = tmp_path / "previous.sqlite3"
    with sqlite3.connect(path) as old:  # the last release without versioned steps
        apply_sqlite_step(old, schema.STEPS[0])
        old.execute("INSERT INTO pulls (repo, number) VALUES ('octo/widgets', 7)")
    db = await SqliteDatabase.open(path)
    try:
        assert await db.schema_version() == schema.SCHEMA_VERSION
        columns = {row[1] for row in await db.fetchall("PRAGMA table_info(reviews)")}
        assert {"run_owner", "revision"} <= columns
        assert (await db.migrate()).steps == []  # every start runs them again: nothing new
        assert (await db.fetchone("SELECT COUNT(*) FROM pulls"))[0] == 1
    finally:
        await db.close()


async def test_sqlite_upgrade_adds_who_dropped_and_keeps_earlier_drops(tmp_path):
    """A database of the release before `findings.dropped_by`: the step adds the column;
    a finding dropped before it keeps its reason, with no login (none was recorded)."""
    [step] = [s for s in schema.STEPS if ("findings", "dropped_by", "TEXT") in s.columns]
    path = tmp_path / "before.sqlite3"
    with sqlite3.connect(path) as old:
        old.executescript(schema.VERSIONS)
        for earlier in schema.STEPS[: schema.STEPS.index(step)]:
            apply_sqlite_step(old, earlier)
            old.execute(
                "INSERT INTO schema_versions VALUES (?, ?, 0)", (earlier.version, earlier.name)
            )
        old.execute(
            "INSERT INTO findings (review_id, ordinal, path, severity, title, state,"
            " checked_by, why) VALUES (1, 1, 'a.py', 'minor', 't', 'dropped', 'human', 'noise')"
        )
    db = await SqliteDatabase.open(path)
    try:
        assert await db.schema_version() == schema.SCHEMA_VERSION
        row = await db.fetchone("SELECT state, why, dropped_by FROM findings")
        assert tuple(row) == ("dropped", "noise", None)
    finally:
        await db.close()


def test_migrate_on_sqlite_reports_the_version(tmp_path):
    done = cockpit("migrate", env={"COCKPIT_DATA_DIR": str(tmp_path / "d")}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "d" / "cockpit.sqlite3"
    assert done.stdout == f"SQLite {path}: schema from version 0 to {schema.SCHEMA_VERSION}" + (
        f" (steps {', '.join(str(step.version) for step in schema.STEPS)})\n"
    )


async def test_a_fresh_sqlite_databases_integer_keys_are_rowids(tmp_path):
    """One DDL text serves both backends, yet in SQLite a single integer key stays the rowid
    (an integer, never NULL) as before: the #29 review found `review_figures.review_id`
    declared BIGINT, which SQLite keeps as an ordinary column that takes '7x'."""
    db = await SqliteDatabase.open(tmp_path / "fresh.sqlite3")
    await db.close()
    conn = sqlite3.connect(tmp_path / "fresh.sqlite3")
    with conn, pytest.raises(sqlite3.IntegrityError, match="datatype mismatch"):
        conn.execute("INSERT INTO review_figures (review_id) VALUES ('7x')")
    conn.close()
