"""Notices and model-starting commands counted in the database, so every process agrees."""

from __future__ import annotations

from collections.abc import Sequence

from bot.records.database import Database


async def first_notice(db: Database, key: str, now: float, every: float) -> bool:
    """True when notice `key` was not given in the last `every` seconds (it counts as given now)."""
    row = await db.fetchone(
        "INSERT INTO notices (key, sent_at) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
        " SET sent_at = excluded.sent_at WHERE notices.sent_at <= ? RETURNING key",
        (key, now, now - every),
    )
    return row is not None


async def take_uses(
    db: Database, windows: Sequence[tuple[str, int, float]], now: float
) -> tuple[int, float] | None:
    """One use of every key, when each (key, count, seconds) has room in its window: None.
    Else nothing is counted, and (the index of the first full window, seconds until it has
    room). One decision at a time across processes."""
    async with db.transaction(lock="command_uses") as conn:
        for index, (key, count, seconds) in enumerate(windows):
            cursor = await conn.execute(
                "SELECT COUNT(*), MIN(used_at) FROM command_uses WHERE key = ? AND used_at > ?",
                (key, now - seconds),
            )
            used, first = await cursor.fetchone()
            if used >= count:
                return index, seconds - (now - first)
        await conn.executemany(
            "INSERT INTO command_uses (key, used_at) VALUES (?, ?)",
            [(key, now) for key, _, _ in windows],
        )
    return None


async def forget_before(db: Database, older_than: float) -> None:
    await db.execute("DELETE FROM notices WHERE sent_at < ?", (older_than,))
    await db.execute("DELETE FROM command_uses WHERE used_at < ?", (older_than,))
