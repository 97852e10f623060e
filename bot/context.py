"""The services handlers and jobs work with, passed explicitly (never a global)."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp

from bot.agents.providers import ModelClients
from bot.auth.tokens import UserTokens
from bot.config import Settings
from bot.github import GitHubApp
from bot.metrics import Metrics
from bot.queue import JobQueue
from bot.ratelimit import CommandLimits
from bot.records.database import Database
from bot.worktrees import Mirrors


@dataclass
class Context:
    settings: Settings
    db: Database
    jobs: JobQueue
    github: GitHubApp
    metrics: Metrics
    http: aiohttp.ClientSession
    mirrors: Mirrors
    models: ModelClients
    limits: CommandLimits = field(default_factory=CommandLimits)
    user_tokens: UserTokens | None = None  # people's sign-ins (bot/auth/)
