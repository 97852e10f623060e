"""Limits that hold whoever asks: the daily model budget per installation (read from the
runs ledger in the database, so every process agrees) and the free-space watermark."""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path

from bot.config import Settings
from bot.storage import Database


def day_start(now: float) -> float:
    """00:00 UTC of the day `now` falls in."""
    day = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


@dataclass(frozen=True)
class Spend:
    runs: int
    usd: float  # runs whose cost is unknown (no rate) count as 0

    def describe(self, settings: Settings) -> str:
        parts = [f"{self.runs} model run(s)", f"${self.usd:.2f}"]
        if settings.daily_max_runs is not None:
            parts[0] += f" of {settings.daily_max_runs}"
        if settings.daily_max_usd is not None:
            parts[1] += f" of ${settings.daily_max_usd:.2f}"
        return ", ".join(parts)


async def spent_today(db: Database, installation_id: int | None, now: float) -> Spend:
    row = await db.fetchone(
        "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM runs"
        " WHERE COALESCE(installation_id, 0) = COALESCE(?, 0) AND started_at >= ?",
        (installation_id, day_start(now)),
    )
    return Spend(int(row[0]), float(row[1])) if row else Spend(0, 0.0)


async def budget_used_up(
    settings: Settings, db: Database, installation_id: int | None, now: float
) -> Spend | None:
    """Today's spend when it has reached a daily limit (no new model run starts), else None."""
    spend = await spent_today(db, installation_id, now)
    over_runs = settings.daily_max_runs is not None and spend.runs >= settings.daily_max_runs
    over_usd = settings.daily_max_usd is not None and spend.usd >= settings.daily_max_usd
    return spend if over_runs or over_usd else None


@dataclass(frozen=True)
class Disk:
    free_mb: int
    min_mb: int

    @property
    def low(self) -> bool:
        return self.free_mb < self.min_mb


def disk(settings: Settings) -> Disk:
    """Free space where mirrors, worktrees and the database live."""
    path = Path(settings.data_dir)
    while not path.exists() and path != path.parent:
        path = path.parent
    return Disk(shutil.disk_usage(path).free // (1024 * 1024), settings.min_free_mb)
