"""Sliding-window limits on commands that start model work, per PR and per person."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_pr = per_pr
        self.per_user = per_user
        self.clock = clock
        self._seen: dict[str, deque[float]] = {}

    def check(self, pr: str, user: str) -> tuple[str, float] | None:
        """None if allowed (and counted); else (why, seconds until allowed)."""
        now = self.clock()
        for key, limit, why in (
            (f"pr:{pr}", self.per_pr, "this PR"),
            (f"user:{user}", self.per_user, "you"),
        ):
            window = self._seen.setdefault(key, deque())
            while window and now - window[0] > limit.seconds:
                window.popleft()
            if len(window) >= limit.count:
                wait = limit.seconds - (now - window[0])
                return f"at most {limit.count} per hour for {why}", wait
        for key in (f"pr:{pr}", f"user:{user}"):
            self._seen[key].append(now)
        return None
