"""The SQL of the finding ledger (see `bot.review.ledger`, the only caller)."""

from __future__ import annotations

import time
from dataclasses import astuple, dataclass
from typing import Any

from bot.records.database import Database
from bot.records.types import Finding, LedgerEntry, Review
from bot.records.vocab import DRAFTED, sql_in


@dataclass(frozen=True)
class NewEntry:
    ordinal: int
    fingerprint: str
    path: str
    code_key: str
    title_key: str


@dataclass(frozen=True)
class LedgerWrites:
    pull_id: int
    review_id: int
    head_sha: str
    new: tuple[NewEntry, ...] = ()
    rekeyed: tuple[NewEntry, ...] = ()  # matched findings whose code or words moved on
    fixed: tuple[int, ...] = ()
    suppressed: tuple[tuple[int, int], ...] = ()  # (ordinal, repeats)


async def entries(db: Database, pull_id: int) -> list[LedgerEntry]:
    return await LedgerEntry.all(
        db, "SELECT * FROM ledger WHERE pull_id = ? ORDER BY ordinal", (pull_id,)
    )


async def history(db: Database, pull_id: int) -> list[tuple[str, str, Finding]]:
    """Every finding of the PR's drafts, oldest review first: (review state, head sha, finding)."""
    rows = await db.fetchall(
        "SELECT f.*, r.state AS review_state, r.head_sha AS review_head FROM findings f"
        " JOIN reviews r ON r.id = f.review_id"
        f" WHERE r.pull_id = ? AND r.state IN {sql_in(DRAFTED)}"
        " ORDER BY r.id, f.ordinal",
        (pull_id,),
    )
    return [(row["review_state"], row["review_head"], Finding.from_row(row)) for row in rows]


async def last_reviewed(db: Database, pull_id: int, before: int) -> Review | None:
    """The PR's newest review before `before` that made a draft (its head is where the next
    push's delta starts)."""
    return await Review.one(
        db,
        "SELECT * FROM reviews WHERE pull_id = ? AND id < ?"
        f" AND state IN {sql_in(DRAFTED)} ORDER BY id DESC LIMIT 1",
        (pull_id, before),
    )


async def next_ordinal(db: Database, pull_id: int) -> int:
    """Numbers of drafts older than the ledger count too."""
    row = await db.fetchone(
        "SELECT MAX(n) AS n FROM (SELECT MAX(ordinal) AS n FROM ledger WHERE pull_id = ?"
        " UNION ALL SELECT MAX(f.ordinal) AS n FROM findings f JOIN reviews r"
        " ON r.id = f.review_id WHERE r.pull_id = ?) numbers",
        (pull_id, pull_id),
    )
    return int((row["n"] if row else None) or 0) + 1


async def write(conn: Any, writes: LedgerWrites) -> None:
    """Inside the caller's transaction (the one that stores the draft's findings)."""
    now = time.time()
    pull_id = writes.pull_id
    await conn.executemany(
        "INSERT INTO ledger (pull_id, ordinal, fingerprint, path, code_key, title_key,"
        " first_review_id, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (pull_id, ordinal) DO NOTHING",
        [(pull_id, *astuple(e), writes.review_id, now) for e in writes.new],
    )
    await conn.executemany(
        "UPDATE ledger SET fingerprint = ?, path = ?, code_key = ?, title_key = ?,"
        " updated_at = ? WHERE pull_id = ? AND ordinal = ?",
        [
            (e.fingerprint, e.path, e.code_key, e.title_key, now, pull_id, e.ordinal)
            for e in writes.rekeyed
        ],
    )
    await conn.executemany(
        "UPDATE ledger SET fixed_in = ?, fixed_review_id = ?, updated_at = ?"
        " WHERE pull_id = ? AND ordinal = ? AND fixed_in IS NULL",
        [(writes.head_sha, writes.review_id, now, pull_id, n) for n in writes.fixed],
    )
    await conn.executemany(
        "UPDATE ledger SET suppressed = suppressed + ?, updated_at = ?"
        " WHERE pull_id = ? AND ordinal = ?",
        [(count, now, pull_id, n) for n, count in writes.suppressed],
    )
