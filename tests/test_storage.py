"""The server's database connection next to the inbox's: waiting for the write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from bot.storage import Database


@pytest.fixture
async def db(tmp_path):
    database = await Database.open(tmp_path / "s.sqlite3")
    yield database
    await database.close()


def hold_write_lock(path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # as the inbox does for a group commit
    return other


SQL = "INSERT INTO skill_versions (name, sha256, body, created_at) VALUES ('s', ?, 'x', 0)"


@pytest.mark.parametrize("how", ["execute", "fetchall", "transaction"])
async def test_writes_wait_for_a_lock_held_elsewhere_then_go_through(db, tmp_path, how):
    other = hold_write_lock(tmp_path / "s.sqlite3")
    asyncio.get_running_loop().call_later(0.2, other.execute, "COMMIT")
    started = time.monotonic()
    if how == "execute":
        await db.execute(SQL, (how,))
    elif how == "fetchall":
        await db.fetchall(SQL + " RETURNING id", (how,))
    else:
        async with db.transaction() as conn:
            await conn.execute(SQL, (how,))
    assert time.monotonic() - started >= 0.2
    assert (await db.fetchone("SELECT COUNT(*) FROM skill_versions"))[0] == 1
    other.close()


async def test_a_lock_held_too_long_fails_clearly(tmp_path):
    db = await Database.open(tmp_path / "s.sqlite3", busy_timeout_ms=200)
    other = hold_write_lock(tmp_path / "s.sqlite3")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await db.execute(SQL, ("late",))
    finally:
        other.execute("ROLLBACK")
        other.close()
        await db.close()


async def test_an_older_database_gains_new_columns_and_schema_runs_again_unchanged(tmp_path):
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE reviews (id INTEGER PRIMARY KEY AUTOINCREMENT, pull_id INTEGER NOT NULL,"
        " head_sha TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued', created_at REAL NOT NULL,"
        " updated_at REAL NOT NULL);"
        "INSERT INTO reviews (pull_id, head_sha, created_at, updated_at) VALUES (1, 'abc', 0, 0);"
    )
    old.close()
    db = await Database.open(path)
    await db.ensure_schema()  # every start runs it again
    columns = {row[1] for row in await db.fetchall("PRAGMA table_info(reviews)")}
    assert {"verify_provider", "verify_error", "base_sha"} <= columns
    row = await db.fetchone("SELECT head_sha, verify_error FROM reviews")
    assert tuple(row) == ("abc", None)
    eval_columns = {row[1] for row in await db.fetchall("PRAGMA table_info(eval_cases)")}
    assert {"case_id", "status", "scores"} <= eval_columns
    await db.close()
