"""The inbox's group commit, without the server: each delivery once, with its job."""

from __future__ import annotations

import sqlite3
import zlib

import pytest

from bot.delivery import Delivery
from bot.inbox import commit
from bot.records.deliveries import connect
from bot.records.sqlite import SqliteDatabase


def item(delivery_id: str, body: bytes = b'{"action": "opened"}', key: str | None = None):
    delivery = Delivery(delivery_id, "pull_request", body, "opened", 7, "o/r")
    job = ("delivery", "events", key or f"delivery:{delivery_id}", "{}", 5, 1.0, 1.0)
    return delivery, job


@pytest.fixture
async def conn(tmp_path):
    db = await SqliteDatabase.open(tmp_path / "c.sqlite3")  # the real schema
    await db.close()
    conn = connect(tmp_path / "c.sqlite3")
    yield conn
    conn.close()


async def test_one_commit_stores_new_deliveries_once_with_their_jobs(conn):
    first = [item("a"), item("b"), item("a", b'{"other": 1}')]
    assert commit(conn, first) == [True, True, False]  # the repeat in the batch is seen
    assert commit(conn, [item("b"), item("c")]) == [False, True]
    rows = conn.execute("SELECT id, body FROM deliveries ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["a", "b", "c"]
    assert zlib.decompress(rows[0][1]) == b'{"action": "opened"}'  # the first request's body
    jobs = conn.execute("SELECT key FROM jobs ORDER BY id").fetchall()
    assert [j[0] for j in jobs] == ["delivery:a", "delivery:b", "delivery:c"]


async def test_deliveries_about_one_pr_line_up_behind_the_first(conn):
    batch = [item(name, key="events:o/r#1") for name in ("a", "b", "c")]
    assert commit(conn, batch) == [True, True, True]
    states = [r[0] for r in conn.execute("SELECT state FROM jobs ORDER BY id")]
    assert states == ["queued", "waiting", "waiting"]


async def test_a_failed_commit_leaves_nothing_behind(conn):
    delivery, job = item("a")
    bad_job = (*job[:5], None, 1.0)  # run_after is NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        commit(conn, [item("ok"), (delivery, bad_job)])
    assert conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 0
    assert not conn.in_transaction


async def test_a_large_batch_is_checked_for_repeats_in_chunks(conn):
    batch = [item(f"d{n}") for n in range(1200)]
    assert commit(conn, batch) == [True] * 1200
    assert commit(conn, [*batch[:5], item("new")]) == [False] * 5 + [True]


async def test_a_delivery_that_arrives_as_the_inbox_stops_gets_an_answer(tmp_path):
    import asyncio

    from bot.inbox import Inbox, InboxUnavailable, SqliteCommits
    from bot.queue.sqlite import Jobs

    db = await SqliteDatabase.open(tmp_path / "c.sqlite3")
    box = Inbox(SqliteCommits(tmp_path / "c.sqlite3"), Jobs(db))
    await box.start()

    async def first_then_second():
        await box.store(item("d1")[0])  # resumes in the tick its commit ends
        return await box.store(item("d2")[0])

    client = asyncio.create_task(first_then_second())
    await asyncio.sleep(0)  # the first request waits for its commit
    await box.stop()
    try:
        with pytest.raises(InboxUnavailable):  # refused (503), never left unanswered
            await asyncio.wait_for(client, 5)
    finally:
        await db.close()
