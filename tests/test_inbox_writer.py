"""The inbox writer's framing and group commit, without the server."""

from __future__ import annotations

import sqlite3
import struct
import zlib

import pytest

from bot import inbox_writer
from bot.storage import Database


def frame(delivery_id: str, body: bytes = b'{"action": "opened"}') -> bytes:
    job = ["delivery", "events", f"delivery:{delivery_id}", "{}", 5, 1.0, 1.0]
    return inbox_writer.encode([delivery_id, "pull_request", "opened", 7, "o/r", job], body)


def test_frames_round_trip_and_partial_frames_wait_for_the_rest():
    data = frame("a") + frame("b", b"\x00binary\xff")
    cut = len(data) - 3
    frames, used = inbox_writer.decode(bytearray(data[:cut]))
    assert [h[0] for h, _ in frames] == ["a"] and used == len(frame("a"))
    buffer = bytearray(data[used:])
    frames, used = inbox_writer.decode(buffer)
    assert [(h[0], body) for h, body in frames] == [("b", b"\x00binary\xff")]
    assert used == len(buffer)


@pytest.mark.parametrize("cut", [0, 1, 7])
def test_a_header_cut_short_is_not_a_frame(cut):
    assert inbox_writer.decode(bytearray(frame("a")[:cut])) == ([], 0)


def test_an_oversized_frame_is_refused():
    with pytest.raises(ValueError):
        inbox_writer.decode(bytearray(struct.pack("!II", 1, inbox_writer.MAX_FRAME)))


@pytest.fixture
async def conn(tmp_path):
    db = await Database.open(tmp_path / "c.sqlite3")  # the real schema
    await db.close()
    conn = inbox_writer.connect(str(tmp_path / "c.sqlite3"))
    yield conn
    conn.close()


async def test_one_commit_stores_new_deliveries_once_with_their_jobs(conn):
    first = inbox_writer.decode(bytearray(frame("a") + frame("b") + frame("a")))[0]
    assert inbox_writer.commit(conn, first) == [1, 1, 0]  # the repeat in the batch is seen
    again = inbox_writer.decode(bytearray(frame("b") + frame("c")))[0]
    assert inbox_writer.commit(conn, again) == [0, 1]
    rows = conn.execute("SELECT id, body FROM deliveries ORDER BY id").fetchall()
    assert [r[0] for r in rows] == ["a", "b", "c"]
    assert zlib.decompress(rows[0][1]) == b'{"action": "opened"}'
    jobs = conn.execute("SELECT key FROM jobs ORDER BY id").fetchall()
    assert [j[0] for j in jobs] == ["delivery:a", "delivery:b", "delivery:c"]


async def test_deliveries_about_one_pr_line_up_behind_the_first(conn):
    def about_pr(delivery_id: str) -> bytes:
        job = ["delivery", "events", "events:o/r#1", "{}", 5, 1.0, 1.0]
        return inbox_writer.encode([delivery_id, "pull_request", None, 7, "o/r", job], b"{}")

    frames = inbox_writer.decode(bytearray(about_pr("a") + about_pr("b") + about_pr("c")))[0]
    # stored, and only the first can run now: the server wakes its workers for that one
    assert inbox_writer.commit(conn, frames) == [1, 3, 3]
    states = [r[0] for r in conn.execute("SELECT state FROM jobs ORDER BY id")]
    assert states == ["queued", "waiting", "waiting"]


async def test_a_failed_commit_leaves_nothing_behind(conn):
    bad_job = ["delivery", "events", "k", "{}", 5, None, 1.0]  # run_after is NOT NULL
    frames = [
        (["a", "pull_request", None, None, None, bad_job], b"{}"),
    ]
    with pytest.raises(sqlite3.IntegrityError):
        inbox_writer.commit(conn, frames)
    assert conn.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 0
    assert not conn.in_transaction
