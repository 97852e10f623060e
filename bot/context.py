"""The services handlers and jobs work with, passed explicitly (never a global)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from bot.agents.providers import ModelClients
from bot.config import Settings
from bot.github import GitHubApp
from bot.metrics import Metrics
from bot.queue import Jobs
from bot.ratelimit import CommandLimits
from bot.records.sqlite import Database
from bot.worktrees import Mirrors

if TYPE_CHECKING:
    from bot.pgqueue import PgJobs
    from bot.records.postgres import PgDatabase


@dataclass
class Context:
    settings: Settings
    db: Database | PgDatabase
    jobs: Jobs | PgJobs
    github: GitHubApp
    metrics: Metrics
    http: aiohttp.ClientSession
    mirrors: Mirrors
    models: ModelClients
    limits: CommandLimits = field(default_factory=CommandLimits)
