"""A session's native messages (each provider's own shape) in order: `msg-0, msg-1, …`."""

from __future__ import annotations

import json
import time
from typing import Any

from bot.records import sessions
from bot.records.database import Database
from bot.records.types import Message


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
    source: str | None = None,
) -> list[str]:
    """Ids are `msg-<seq>`, stable across restarts. `source` names the command a person's
    message came from (`comment:line`), so a retried turn finds it instead of adding it again."""
    now = time.time()
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE session_id = ?", (session_id,)
        )
        first = (await cursor.fetchone())[0]
        ids = [f"msg-{seq}" for seq in range(first, first + len(items))]
        await conn.executemany(
            "INSERT INTO messages (session_id, seq, id, role, content, github_comment_id,"
            " source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    session_id,
                    seq,
                    f"msg-{seq}",
                    _role(item),
                    json.dumps(item),
                    github_comment_id,
                    source,
                    now,
                )
                for seq, item in enumerate(items, first)
            ],
        )
        await sessions.touch(conn, session_id, now)
    return ids


async def load_messages(db: Database, session_id: int) -> list[dict[str, Any]]:
    return [message.item for message in await messages(db, session_id)]


async def messages(db: Database, session_id: int) -> list[Message]:
    return await Message.all(
        db, "SELECT * FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
    )


async def since_source(db: Database, session_id: int, source: str) -> list[Message] | None:
    """The messages from a command's message on (None when the command has none yet): how
    far a turn got before a restart."""
    found = await messages(db, session_id)
    start = next((n for n, message in enumerate(found) if message.source == source), None)
    return None if start is None else found[start:]


async def link_comment(db: Database, session_id: int, message_id: str, comment_id: int) -> None:
    await db.execute(
        "UPDATE messages SET github_comment_id = ? WHERE session_id = ? AND id = ?",
        (comment_id, session_id, message_id),
    )


async def count_messages(db: Database, session_id: int) -> int:
    row = await db.fetchone("SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,))
    return int(row[0]) if row else 0
