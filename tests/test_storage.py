"""The server's database connection next to the inbox's: waiting for the write lock."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest

from bot.records.sqlite import SqliteDatabase


@pytest.fixture
async def sqlite_db(tmp_path):
    database = await SqliteDatabase.open(tmp_path / "s.sqlite3")
    yield database
    await database.close()


def hold_write_lock(path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # as the inbox does for a group commit
    return other


SQL = "INSERT INTO skill_versions (name, sha256, body, created_at) VALUES ('s', ?, 'x', 0)"


@pytest.mark.parametrize("how", ["execute", "fetchall", "transaction"])
async def test_writes_wait_for_a_lock_held_elsewhere_then_go_through(sqlite_db, tmp_path, how):
    db = sqlite_db
    other = hold_write_lock(tmp_path / "s.sqlite3")
    started = time.monotonic()  # before the release is scheduled: it comes 0.2 s later or more
    asyncio.get_running_loop().call_later(0.2, other.execute, "COMMIT")
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
    db = await SqliteDatabase.open(tmp_path / "s.sqlite3", busy_timeout_ms=200)
    other = hold_write_lock(tmp_path / "s.sqlite3")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await db.execute(SQL, ("late",))
    finally:
        other.execute("ROLLBACK")
        other.close()
        await db.close()


# -- both backends: the SqliteDatabase interface ---------------------------------------------


def sqlite_columns(path) -> dict[str, set[str]]:
    with sqlite3.connect(path) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: {row[1] for row in conn.execute(f"PRAGMA table_info({t})")} for t in tables}


@pytest.mark.backends
@pytest.mark.postgres_only("compares the Postgres schema with SQLite's")
async def test_postgres_has_exactly_the_sqlite_tables_and_columns(tmp_path, backend, db):
    sqlite_db = await SqliteDatabase.open(tmp_path / "ref.sqlite3")
    await sqlite_db.close()
    expected = sqlite_columns(tmp_path / "ref.sqlite3")
    await db.migrate()  # again: nothing changes
    rows = await db.fetchall(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name NOT LIKE 'procrastinate%'"
    )
    found: dict[str, set[str]] = {}
    for row in rows:
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    assert found == expected


@pytest.mark.backends
async def test_migrate_runs_again_and_keeps_rows(db, backend):
    await db.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 1)")
    await db.migrate()
    await db.migrate()
    assert (await db.fetchone("SELECT COUNT(*) FROM pulls"))[0] == 1


@pytest.mark.backends
async def test_insert_returning_gives_the_new_id_and_update_its_rowcount(db, backend):
    insert = "INSERT INTO pulls (repo, number) VALUES (?, ?) RETURNING id"
    [first] = await db.fetchone(insert, ("a/b", 1))
    [second] = await db.fetchone(insert, ("a/b", 2))
    assert second == first + 1
    assert await db.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 3)") == 1
    async with db.transaction(lock="pulls") as conn:
        cursor = await conn.execute(
            "INSERT INTO reviews (pull_id, head_sha, created_at, updated_at)"
            " VALUES (?, 'abc', 0, 0) RETURNING id",
            (first,),
        )
        assert (await cursor.fetchone())[0]
        cursor = await conn.execute("UPDATE pulls SET title = '100%?' WHERE number > ?", (0,))
        assert cursor.rowcount == 3
    row = await db.fetchone("SELECT * FROM pulls WHERE id = ?", (first,))
    assert (row["repo"], row[2], row["title"], dict(row)["number"]) == ("a/b", "a/b", "100%?", 1)
    assert await db.execute("UPDATE pulls SET title = 'x' WHERE number = 9") == 0


@pytest.mark.backends
async def test_a_violated_constraint_is_an_integrity_error_and_rolls_back(db, backend):
    await db.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 1)")
    with pytest.raises(sqlite3.IntegrityError, match="pulls"):
        async with db.transaction() as conn:
            await conn.execute("INSERT INTO pulls (repo, number) VALUES ('c/d', 1)")
            await conn.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 1)")
    assert (await db.fetchone("SELECT COUNT(*) FROM pulls"))[0] == 1


@pytest.mark.backends
@pytest.mark.postgres_only("one process owns a SQLite file")
async def test_a_compare_and_set_claim_is_won_once_across_processes(db, backend, database_url):
    """Two processes (two pools) approve the same draft at once: one claim wins."""
    from bot.records import review_state
    from bot.records.postgres import PgDatabase

    other = await PgDatabase.open(database_url)
    try:
        for n in range(20):
            [review_id] = await db.fetchone(
                "INSERT INTO reviews (pull_id, head_sha, state, created_at, updated_at)"
                " VALUES (1, ?, 'draft', 0, 0) RETURNING id",
                (f"sha{n}",),
            )
            won = await asyncio.gather(
                *(
                    review_state.claim_posting(d, review_id, who, "COMMENT", [])
                    for d, who in ((db, "a"), (other, "b"), (db, "c"), (other, "d"))
                )
            )
            assert sorted(won) == [False, False, False, True]
    finally:
        await other.close()


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
    db = await SqliteDatabase.open(path)
    await db.migrate()  # every start runs it again
    columns = {row[1] for row in await db.fetchall("PRAGMA table_info(reviews)")}
    assert {"verify_provider", "verify_error", "base_sha"} <= columns
    row = await db.fetchone("SELECT head_sha, verify_error FROM reviews")
    assert tuple(row) == ("abc", None)
    eval_columns = {row[1] for row in await db.fetchall("PRAGMA table_info(eval_cases)")}
    assert {"case_id", "status", "scores"} <= eval_columns
    await db.close()
