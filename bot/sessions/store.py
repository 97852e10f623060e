"""Sessions and their ordered messages `msg-0, msg-1, …`; the only writer of session status."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from bot.storage import Database


@dataclass(frozen=True)
class Session:
    id: int
    provider: str
    model: str
    role: str
    status: str
    pull_id: int | None
    review_id: int | None
    parent_session_id: int | None


def _session(row: Any) -> Session:
    return Session(
        row["id"],
        row["provider"],
        row["model"],
        row["role"],
        row["status"],
        row["pull_id"],
        row["review_id"],
        row["parent_session_id"],
    )


async def create_session(
    db: Database,
    *,
    provider: str,
    model: str,
    role: str = "primary",
    pull_id: int | None = None,
    review_id: int | None = None,
    parent_session_id: int | None = None,
) -> Session:
    """One creation path for primary and child sessions (a child's first message is context)."""
    now = time.time()
    session_id = await db.execute(
        "INSERT INTO sessions (pull_id, review_id, provider, model, role, status,"
        " parent_session_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)",
        (pull_id, review_id, provider, model, role, parent_session_id, now, now),
    )
    return await get_session(db, session_id)


async def get_session(db: Database, session_id: int) -> Session:
    row = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise LookupError(f"session {session_id} does not exist")
    return _session(row)


def _role(item: dict[str, Any]) -> str:
    if "role" in item:
        return str(item["role"])
    return "tool" if item.get("type") == "function_call_output" else "assistant"


async def append_messages(
    db: Database,
    session_id: int,
    items: list[dict[str, Any]],
    *,
    github_comment_id: int | None = None,
) -> list[str]:
    """Store native messages in order; ids are `msg-<seq>`, stable across restarts."""
    ids = []
    now = time.time()
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?", (session_id,)
        )
        seq = (await cursor.fetchone())[0]
        for item in items:
            message_id = f"msg-{seq}"
            await conn.execute(
                "INSERT INTO messages (session_id, seq, id, role, content, github_comment_id,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    seq,
                    message_id,
                    _role(item),
                    json.dumps(item),
                    github_comment_id,
                    now,
                ),
            )
            ids.append(message_id)
            seq += 1
        await conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))
    return ids


async def load_messages(db: Database, session_id: int) -> list[dict[str, Any]]:
    rows = await db.fetchall(
        "SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
    )
    return [json.loads(row["content"]) for row in rows]


async def set_status(db: Database, session_id: int, status: str) -> None:
    await db.execute(
        "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?",
        (status, time.time(), session_id),
    )


async def end_pull_sessions(db: Database, pull_id: int) -> None:
    """The PR closed: its sessions end, and so do the cross-reviews between them."""
    now = time.time()
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE sessions SET status = 'ended', updated_at = ?"
            " WHERE pull_id = ? AND status != 'ended'",
            (now, pull_id),
        )
        await conn.execute(
            "UPDATE session_reviews SET ended_at = ? WHERE ended_at IS NULL AND"
            " parent_session_id IN (SELECT id FROM sessions WHERE pull_id = ?)",
            (now, pull_id),
        )
