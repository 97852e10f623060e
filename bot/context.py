"""What handlers and jobs are given to work with, passed explicitly (never a global)."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from bot.agents.providers import ModelClients
from bot.config import Settings
from bot.github import GitHubApp
from bot.inbox import Inbox
from bot.metrics import Metrics
from bot.queue import Jobs
from bot.storage import Database
from bot.worktrees import Mirrors


@dataclass
class Context:
    settings: Settings
    db: Database
    jobs: Jobs
    inbox: Inbox
    github: GitHubApp
    metrics: Metrics
    http: aiohttp.ClientSession
    mirrors: Mirrors
    models: ModelClients
