"""Limits that hold whoever asks: the daily model budget per installation (read from the
runs ledger in the database, so every process agrees) and the free-space watermark.

The budget is enforced where every model run starts (`charge_run`, in the transaction that
writes the run's ledger row), so no path that starts a run can pass it; commands and the
review job also ask first (`budget_used_up`) to answer at once instead of queueing work that
could not run."""

from __future__ import annotations

import datetime as dt
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from bot.agents.base import AgentError
from bot.config import Settings
from bot.storage import Database
from bot.texts import render

# Run starts take this lock (Postgres: a transaction advisory lock; SQLite's BEGIN IMMEDIATE
# already excludes every other writer), so two runs cannot both take an installation's last
# slot. Starts are a few a minute and the critical section two indexed statements.
RUN_START_LOCK = "daily-budget"
_SPENT = (
    "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM runs"
    " WHERE COALESCE(installation_id, 0) = COALESCE(?, 0) AND started_at >= ?"
)


class DailyLimits(Protocol):
    """The daily caps, as `Settings` and an agent's `Budget` both carry them."""

    @property
    def daily_max_runs(self) -> int | None: ...

    @property
    def daily_max_usd(self) -> float | None: ...


def day_start(now: float) -> float:
    """00:00 UTC of the day `now` falls in."""
    day = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


@dataclass(frozen=True)
class Spend:
    runs: int
    usd: float  # runs whose cost is unknown (no rate) count as 0

    def describe(self, limits: DailyLimits) -> str:
        parts = [f"{self.runs} model run(s)", f"${self.usd:.2f}"]
        if limits.daily_max_runs is not None:
            parts[0] += f" of {limits.daily_max_runs}"
        if limits.daily_max_usd is not None:
            parts[1] += f" of ${limits.daily_max_usd:.2f}"
        return ", ".join(parts)

    def reached(self, limits: DailyLimits) -> bool:
        """No new run may start: a daily limit is reached."""
        runs, usd = limits.daily_max_runs, limits.daily_max_usd
        return (runs is not None and self.runs >= runs) or (usd is not None and self.usd >= usd)


class DailyBudgetSpent(AgentError):
    """A model run was refused: its installation's budget for the day is used up."""

    def __init__(self, spend: Spend, limits: DailyLimits) -> None:
        self.spend = spend
        super().__init__(
            render("reply.md.j2", kind="budget_spent", spent=spend.describe(limits)).strip()
        )


async def spent_today(db: Database, installation_id: int | None, now: float) -> Spend:
    row = await db.fetchone(_SPENT, (installation_id, day_start(now)))
    return Spend(int(row[0]), float(row[1])) if row else Spend(0, 0.0)


async def budget_used_up(
    limits: DailyLimits, db: Database, installation_id: int | None, now: float
) -> Spend | None:
    """Today's spend when it has reached a daily limit (no new model run starts), else None."""
    spend = await spent_today(db, installation_id, now)
    return spend if spend.reached(limits) else None


async def refuse_when_spent(
    settings: Settings, db: Database, installation_id: int | None, now: float
) -> None:
    """Raise DailyBudgetSpent when the installation's budget for today is used up: a command
    that would start a model run answers at once instead of queueing it."""
    spend = await budget_used_up(settings, db, installation_id, now)
    if spend is not None:
        raise DailyBudgetSpent(spend, settings)


async def charge_run(conn: Any, run_id: int, limits: DailyLimits, now: float) -> None:
    """Inside the transaction that wrote run `run_id`'s ledger row (holding RUN_START_LOCK):
    raise DailyBudgetSpent, which rolls the row back, when the run's installation had reached
    a daily limit before it. The schema trigger has charged the row to its installation."""
    if limits.daily_max_runs is None and limits.daily_max_usd is None:
        return
    cursor = await conn.execute("SELECT installation_id FROM runs WHERE id = ?", (run_id,))
    installation_id = (await cursor.fetchone())[0]
    cursor = await conn.execute(_SPENT, (installation_id, day_start(now)))
    runs, usd = await cursor.fetchone()
    before = Spend(int(runs) - 1, float(usd))  # this run is counted, at no cost yet
    if before.reached(limits):
        raise DailyBudgetSpent(before, limits)


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
