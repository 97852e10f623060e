"""Sliding-window limits on commands that start model work, per PR and per person, counted in
the database (`command_uses`) so every process sees the same window."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limit:
    count: int
    seconds: float


class CommandLimits:
    def __init__(
        self,
        *,
        per_pr: Limit = Limit(6, 3600),
        per_user: Limit = Limit(20, 3600),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.per_pr = per_pr
        self.per_user = per_user
        self.clock = clock

    async def check(self, db: Any, pr: str, user: str) -> tuple[str, float] | None:
        """None if allowed (and counted); else (why, seconds until allowed). One decision at
        a time across processes (an advisory lock on Postgres, the write lock on SQLite)."""
        now = self.clock()
        rules = ((f"pr:{pr}", self.per_pr, "this PR"), (f"user:{user}", self.per_user, "you"))
        async with db.transaction(lock="command_uses") as conn:
            for key, limit, why in rules:
                cursor = await conn.execute(
                    "SELECT COUNT(*), MIN(used_at) FROM command_uses WHERE key = ? AND used_at > ?",
                    (key, now - limit.seconds),
                )
                count, first = await cursor.fetchone()
                if count >= limit.count:
                    wait = limit.seconds - (now - first)
                    return f"at most {limit.count} per hour for {why}", wait
            await conn.executemany(
                "INSERT INTO command_uses (key, used_at) VALUES (?, ?)",
                [(key, now) for key, _, _ in rules],
            )
        return None


async def forget_command_uses(db: Any, older_than: float) -> int:
    """Maintenance: uses older than every window."""
    return await db.execute("DELETE FROM command_uses WHERE used_at < ?", (older_than,))
