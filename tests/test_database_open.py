"""Opening the database from the command line: processes racing on a fresh SQLite file
serialise their schema steps, reporting commands never change the schema, `cockpit migrate`
says what it did, and a database that cannot be used is one line naming it, the same line
for every command. All through the CLI, from another folder, rows read back."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from pathlib import Path

from bot.records import schema
from bot.standin.github import GitHubStandin
from tests.schema_steps import apply_sqlite_step
from tests.serverproc import free_port

V = schema.SCHEMA_VERSION
ALL_STEPS = ", ".join(str(step.version) for step in schema.STEPS)


async def cockpit(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env},
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def app_env(data_dir: Path) -> dict[str, str]:
    """What `serve` needs set, and the reviewer's key (nothing here talks to them)."""
    github = GitHubStandin()
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": "webhook-secret-123",
        "GITHUB_API_URL": f"http://127.0.0.1:{free_port()}",
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "COCKPIT_DATA_DIR": str(data_dir),
        "COCKPIT_HOST": "127.0.0.1",
        "COCKPIT_PORT": "0",
    }


def rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def dump(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return list(conn.iterdump())


def at_version(path: Path, version: int) -> None:
    """A SQLite file as the release whose newest step was `version` left it, a PR in it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(schema.VERSIONS)
        for step in schema.STEPS[:version]:
            apply_sqlite_step(conn, step)
            conn.execute(
                "INSERT INTO schema_versions (version, name, applied_at) VALUES (?, ?, 0)",
                (step.version, step.name),
            )
        conn.execute("INSERT INTO pulls (repo, number) VALUES ('octo/widgets', 7)")


def said(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- 10: racing processes, reporting commands, what migrate did ---------------------------


async def test_turning_a_new_file_to_wal_waits_for_another_process_doing_the_same(
    tmp_path, monkeypatch
):
    """What made the race below fail one round in a hundred: `PRAGMA journal_mode=WAL` answers
    "database is locked" at once (no busy timeout) while another connection holds the new
    file's write lock in rollback mode. Here that lock is held until opening has asked twice;
    before, the first answer was the end of it."""
    import threading

    import aiosqlite

    from bot.records.sqlite import SqliteDatabase

    path = tmp_path / "cockpit.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE elsewhere (a)")  # the other process, half-way
    asked, twice = [], threading.Event()

    def traced(statement: str) -> None:
        if "journal_mode=WAL" in statement:
            asked.append(statement)
            if len(asked) == 2:
                twice.set()

    connect = aiosqlite.connect

    async def connect_traced(*args, **kwargs):
        conn = await connect(*args, **kwargs)
        await conn.set_trace_callback(traced)
        return conn

    monkeypatch.setattr(aiosqlite, "connect", connect_traced)

    def other_process() -> None:
        twice.wait(30)
        holder.execute("COMMIT")

    releasing = asyncio.create_task(asyncio.to_thread(other_process))
    db = await SqliteDatabase.open(path)
    await releasing
    try:
        assert len(asked) >= 2
        assert (await db.fetchone("PRAGMA journal_mode"))[0] == "wal"
        assert db.migrated is not None and db.migrated.version == V
    finally:
        await db.close()
        holder.close()


async def test_processes_racing_on_a_fresh_database_serialise_and_none_crashes(tmp_path):
    """Before: two processes applying the schema to a new file at once crashed (`duplicate
    column name`), and so did `stats`, which applied it too. Now the steps run in one
    exclusive transaction: one process applies them, the other finds them there."""
    for n in range(10):
        data = tmp_path / f"d{n}"
        env = {"COCKPIT_DATA_DIR": str(data)}
        first, second, stats = await asyncio.gather(
            cockpit("migrate", env=env, cwd=tmp_path),
            cockpit("migrate", env=env, cwd=tmp_path),
            cockpit("stats", env=env, cwd=tmp_path),
        )
        for code, out, err in (first, second):
            assert code == 0, (n, out, err)
        lines = sorted(said(first[1]) + said(second[1]))
        path = data / "cockpit.sqlite3"
        assert lines == [
            f"SQLite {path}: schema already at version {V}",
            f"SQLite {path}: schema from version 0 to {V} (steps {ALL_STEPS})",
        ], n
        code, out, err = stats
        assert "unexpected" not in err and "Traceback" not in err, (n, err)
        if code == 0:  # after the schema was there
            assert out.startswith(f"No reviews yet in SQLite {path}"), (n, out)
        else:  # before: nothing to read yet
            assert code == 2 and err.startswith("cockpit stats: there is no database at"), (n, err)
        assert rows(path, "SELECT version FROM schema_versions ORDER BY version") == [
            (step.version,) for step in schema.STEPS
        ]


async def test_reporting_commands_never_change_an_old_schema_and_migrate_says_what_it_did(
    tmp_path,
):
    data = tmp_path / "data"
    path = data / "cockpit.sqlite3"
    at_version(path, V - 1)
    before = dump(path)
    env = {"COCKPIT_DATA_DIR": str(data)}

    code, out, err = await cockpit("stats", env=env, cwd=tmp_path)
    assert code == 2, out + err
    assert said(err) == [
        f"✗ database: SQLite {path}: the database schema is at version {V - 1}; this release"
        f" needs version {V}: run `cockpit migrate` first"
    ]
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    [line] = [line for line in said(out) if line.startswith(("✓ database", "✗ database"))]
    assert line == (
        f"✓ database: SQLite {path}, schema at version {V - 1}: behind this release's {V};"
        " `cockpit serve` applies the missing steps at start (or run `cockpit migrate`)"
    )
    assert dump(path) == before  # neither changed anything

    code, out, err = await cockpit("migrate", env=env, cwd=tmp_path)
    assert (code, said(out)) == (
        0,
        [f"SQLite {path}: schema from version {V - 1} to {V} (steps {V})"],
    )
    assert rows(path, "SELECT MAX(version) FROM schema_versions") == [(V,)]
    assert rows(path, "SELECT repo, number FROM pulls") == [("octo/widgets", 7)]
    code, out, err = await cockpit("migrate", env=env, cwd=tmp_path)
    assert (code, said(out)) == (0, [f"SQLite {path}: schema already at version {V}"])
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert f"✓ database: SQLite {path}, schema at version {V} (current)" in said(out)
    code, out, err = await cockpit("stats", env=env, cwd=tmp_path)
    assert code == 0 and out.startswith(f"No reviews yet in SQLite {path}"), err


# -- 15: Postgres that does not answer ----------------------------------------------------


async def test_migrate_and_stats_with_postgres_down_say_what_serve_says(tmp_path):
    """Before: `migrate` waited 30 s, printed the pool's retries and `unexpected error
    (OperationalError: pool initialization incomplete after 30 sec)`; `serve` said it in one
    line. Now every command says serve's line."""
    url = f"postgresql://cockpit:pg-pass-42@127.0.0.1:{free_port()}/cockpit"
    env = {**app_env(tmp_path / "data"), "COCKPIT_DATABASE_URL": url}
    serve, migrate, stats = await asyncio.gather(
        cockpit("serve", env=env, cwd=tmp_path),
        cockpit("migrate", env=env, cwd=tmp_path),
        cockpit("stats", env=env, cwd=tmp_path),
    )
    assert serve[0] == 1, serve
    [line] = [line for line in said(serve[2]) if line.startswith("✗ database:")]
    assert line.startswith("✗ database: cannot connect to postgresql://***@127.0.0.1:")
    for code, out, err in (migrate, stats):
        assert (code, out, said(err)) == (1, "", [line])
        assert "pg-pass-42" not in err


# -- 16: a file that is not a database ------------------------------------------------------


async def test_a_file_that_is_not_a_database_is_named_by_every_command(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    path = data / "cockpit.sqlite3"
    junk = b"not a database, whatever its name says\n" * 200
    path.write_bytes(junk)
    env = app_env(data)
    expected = (
        f"✗ database: {path} is not a SQLite database (file is not a database) → move it"
        " away, or set COCKPIT_DATA_DIR to the server's data folder"
    )
    check, serve, migrate, stats = [
        await cockpit(command, env=env, cwd=tmp_path)
        for command in ("check-config", "serve", "migrate", "stats")
    ]
    assert check[0] == 2 and expected in said(check[1]), check
    assert serve[0] == 2 and expected in said(serve[2]), serve
    for code, out, err in (migrate, stats):
        assert (code, out, said(err)) == (2, "", [expected])
    assert path.read_bytes() == junk


async def test_check_config_shows_the_schema_version_of_a_sqlite_database(tmp_path):
    data = tmp_path / "data"
    env = {"COCKPIT_DATA_DIR": str(data)}
    path = data / "cockpit.sqlite3"
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert f"✓ database: SQLite {path} (created at start)" in said(out)
    assert not data.exists()
    code, out, err = await cockpit("migrate", env=env, cwd=tmp_path)
    assert code == 0, err
    _, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert f"✓ database: SQLite {path}, schema at version {V} (current)" in said(out)
