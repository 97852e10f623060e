"""PRs are known by their repository's id: renames keep state, a reused name starts fresh."""

from __future__ import annotations

import pytest

from bot.records.pulls import find_pull, get_pull, upsert_pull
from bot.records.sqlite import SqliteDatabase


@pytest.fixture
async def db(tmp_path):
    database = await SqliteDatabase.open(tmp_path / "p.sqlite3")
    yield database
    await database.close()


def repo(repo_id: int | None, full_name: str) -> dict:
    found = {"full_name": full_name, "clone_url": f"https://github.test/{full_name}.git"}
    return found if repo_id is None else {**found, "id": repo_id}


PR = {"number": 1, "head": {"sha": "a" * 40}, "base": {"ref": "main"}}


async def test_a_renamed_repository_keeps_its_prs(db):
    first = await upsert_pull(db, 7, repo(5, "octo/old"), PR)
    assert await upsert_pull(db, 7, repo(5, "octo/new"), PR) == first
    assert (await find_pull(db, repo(5, "whatever"), 1)).repo == "octo/new"


async def test_a_new_repository_with_an_old_name_does_not_inherit_its_state(db):
    old = await upsert_pull(db, 7, repo(5, "octo/widgets"), PR)
    new = await upsert_pull(db, 8, repo(6, "octo/widgets"), PR)
    assert new != old
    assert (await get_pull(db, "octo/widgets", 1)).id == new
    assert (await find_pull(db, repo(5, "octo/widgets"), 1)).id == old
    assert (await find_pull(db, repo(6, "octo/widgets"), 1)).installation_id == 8


async def test_a_pr_stored_before_repository_ids_is_adopted(db):
    legacy = await upsert_pull(db, 7, repo(None, "octo/widgets"), PR)
    assert await upsert_pull(db, 7, repo(5, "octo/widgets"), PR) == legacy
    assert (await find_pull(db, repo(5, "x"), 1)).id == legacy


async def test_a_rename_onto_a_name_used_before_ids_takes_it(db):
    legacy = await upsert_pull(db, 7, repo(None, "octo/new"), PR)
    moved = await upsert_pull(db, 7, repo(5, "octo/old"), PR)
    assert await upsert_pull(db, 7, repo(5, "octo/new"), PR) == moved != legacy
    assert (await get_pull(db, "octo/new", 1)).id == moved


async def test_an_old_database_gains_the_new_columns(tmp_path):
    path = tmp_path / "old.sqlite3"
    database = await SqliteDatabase.open(path)
    await database.execute("DROP INDEX pulls_repo_id")
    await database.execute("ALTER TABLE pulls DROP COLUMN repo_id")
    await database.close()
    for _ in range(2):  # every start, idempotently
        database = await SqliteDatabase.open(path)
        columns = {r[1] for r in await database.fetchall("PRAGMA table_info(pulls)")}
        await database.close()
        assert "repo_id" in columns
