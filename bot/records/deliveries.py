"""Webhook deliveries as the inbox stores them and as their job reads and records them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from bot.records import jobs
from bot.records.database import Database, delete_in_chunks
from bot.records.sqlite import BUSY_TIMEOUT_MS
from bot.records.types import StoredDelivery
from bot.records.vocab import DeliveryStatus

_INSERT = "INSERT INTO deliveries (id, event, action, installation_id, repo, body, received_at)"
_CHUNK = 500  # ids per statement


def connect(path: Path | str, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """The SQLite inbox's own connection: every commit reaches the disk before the ack."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode=WAL")  # already WAL: `SqliteDatabase.open` made it so
    conn.execute("PRAGMA synchronous=FULL")
    return conn


def store_new(
    conn: sqlite3.Connection, rows: dict[str, tuple], routes: dict[str, tuple]
) -> set[str]:
    """SQLite, on the inbox's connection (a worker thread): the deliveries not stored before,
    each with its job, in one transaction; returns their ids. A fixed handful of statements
    per batch, whatever its size: each statement hands the interpreter lock back and forth
    with the event loop, which is what a commit waits on."""
    ids = list(rows)
    conn.execute("BEGIN IMMEDIATE")
    try:
        seen = {
            row[0]
            for n in range(0, len(ids), _CHUNK)
            for row in conn.execute(
                "SELECT id FROM deliveries WHERE id IN"
                f" ({','.join('?' * len(ids[n : n + _CHUNK]))})",
                ids[n : n + _CHUNK],
            )
        }
        new = [i for i in ids if i not in seen]
        conn.executemany(_INSERT + " VALUES (?, ?, ?, ?, ?, ?, ?)", [rows[i] for i in new])
        jobs.insert_many(conn, [routes[i] for i in new])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return set(new)


def probe(conn: sqlite3.Connection) -> None:
    """Whether a commit could take the write lock now (sqlite3.Error if not)."""
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("ROLLBACK")


async def insert_new(conn: Any, rows: dict[str, tuple], statement_seconds: int) -> set[str]:
    """Postgres, inside the caller's transaction (which defers the jobs of the ids returned):
    a repeated id is skipped by its primary key, also when another process stored it."""
    await conn.execute(f"SET LOCAL statement_timeout = '{int(statement_seconds)}s'")
    ids = list(rows)
    fresh: set[str] = set()
    for n in range(0, len(ids), _CHUNK):
        chunk = [rows[i] for i in ids[n : n + _CHUNK]]
        cursor = await conn.execute(
            _INSERT
            + " VALUES "
            + ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
            + " ON CONFLICT (id) DO NOTHING RETURNING id",
            [value for row in chunk for value in row],
        )
        fresh.update(row[0] for row in await cursor.fetchall())
    return fresh


async def queued_delivery(db: Database, delivery_id: str) -> StoredDelivery | None:
    return await StoredDelivery.one(
        db,
        "SELECT id, event, installation_id, repo, body, status FROM deliveries"
        f" WHERE id = ? AND status = '{DeliveryStatus.QUEUED}'",
        (delivery_id,),
    )


async def record(
    db: Database, delivery_id: str, status: str, outcome: str, attempts: int, now: float
) -> None:
    await db.execute(
        "UPDATE deliveries SET status = ?, outcome = ?, attempts = ?, processed_at = ?"
        " WHERE id = ?",
        (status, outcome[:1000], attempts, now, delivery_id),
    )


async def prune(db: Database, older_than: float, chunk: int) -> int:
    return await delete_in_chunks(
        db,
        older_than,
        chunk,
        "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
        f" WHERE status != '{DeliveryStatus.QUEUED}' AND received_at < ? LIMIT ?)",
    )
