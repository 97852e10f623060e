"""The daily model budget per installation, read from the runs in the database."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from bot.agents.base import AgentError, Budget
from bot.config import Settings
from bot.records.database import Database
from bot.records.runs import Admit, spent_since
from bot.texts import render

DailyLimits = Settings | Budget  # both carry the daily caps


def day_start(now: float) -> float:
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
        runs, usd = limits.daily_max_runs, limits.daily_max_usd
        return (runs is not None and self.runs >= runs) or (usd is not None and self.usd >= usd)


class DailyBudgetSpent(AgentError):
    def __init__(self, spend: Spend, limits: DailyLimits) -> None:
        self.spend = spend
        super().__init__(
            render("reply.md.j2", kind="budget_spent", spent=spend.describe(limits)).strip()
        )


async def budget_used_up(
    limits: DailyLimits, db: Database, installation_id: int | None, now: float
) -> Spend | None:
    """Today's spend when it has reached a daily limit, else None."""
    spend = Spend(*await spent_since(db, installation_id, day_start(now)))
    return spend if spend.reached(limits) else None


async def refuse_when_spent(
    settings: Settings, db: Database, installation_id: int | None, now: float
) -> None:
    """A command that would start a model run answers at once instead of queueing it."""
    spend = await budget_used_up(settings, db, installation_id, now)
    if spend is not None:
        raise DailyBudgetSpent(spend, settings)


def admission(limits: DailyLimits) -> Admit | None:
    """What every run's start asks, in the transaction that wrote its row (so no path that
    starts a run can pass it): DailyBudgetSpent, which rolls the row back, when the run's
    installation had reached a daily limit before it. None: no daily limit at all."""
    if limits.daily_max_runs is None and limits.daily_max_usd is None:
        return None

    def admit(runs: int, usd: float) -> None:
        before = Spend(runs, usd)
        if before.reached(limits):
            raise DailyBudgetSpent(before, limits)

    return admit
