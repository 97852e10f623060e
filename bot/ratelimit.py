"""Sliding-window limits on commands that start model work, per PR and per person."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.records.notices import take_uses
from bot.texts import PEOPLE, say


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
        """None if allowed (and counted); else (why, seconds until allowed). Counted in the
        database (`command_uses`) so every process sees the same window."""
        rules = ((f"pr:{pr}", self.per_pr, "pr"), (f"user:{user}", self.per_user, "user"))
        windows = [(key, limit.count, limit.seconds) for key, limit, _ in rules]
        full = await take_uses(db, windows, self.clock())
        if full is None:
            return None
        index, wait = full
        _, limit, per = rules[index]
        return say(PEOPLE, "rate_limited", count=limit.count, per=per), wait
