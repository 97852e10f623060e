"""Which repositories a signed-in person sees: those of the App's installations their own
user token reaches (`GET /user/installations`, `GET /user/installations/{id}/repositories`),
cached a few minutes per person; operators (COCKPIT_OPERATORS) see every repository."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp

from bot.auth.tokens import UserTokens
from bot.config import Settings
from bot.records.pages import Reachable
from bot.records.types import Pull

log = logging.getLogger(__name__)

CACHE_SECONDS = 300.0
PER_PAGE = 100
MAX_PAGES = 10  # per list: 1,000 installations, 1,000 repositories each at most


class NotSignedIn(Exception):
    """No usable token (never signed in, signed out, revoked, a refused refresh)."""


class AccessUnavailable(Exception):
    """GitHub could not say what the person may see (no token in this message)."""


@dataclass(frozen=True)
class Viewer:
    user_id: int
    login: str
    operator: bool
    repos: Reachable | None  # None: every repository (operators)
    installations: frozenset[int] | None
    csrf: str = ""

    def sees(self, repo: str) -> bool:
        return self.repos is None or repo in self.repos

    def sees_pull(self, pull: Pull) -> bool:
        """By name, and by GitHub's id of the repository when the PR has one (a name taken
        over after a rename is not the repository that had it)."""
        if self.repos is None:
            return True
        return pull.repo in self.repos and (pull.repo_id is None or pull.repo_id in self.repos.ids)


@dataclass(frozen=True)
class Reach:
    repos: Reachable
    installations: frozenset[int]


class Access:
    """One per process; `reach` answers from the cache while it is fresh."""

    def __init__(self, settings: Settings, tokens: UserTokens | None, http: aiohttp.ClientSession):
        self.settings = settings
        self.tokens = tokens
        self.http = http
        self._cache: dict[int, tuple[float, Reach]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self.lookups = 0  # times GitHub was asked (tests)

    def is_operator(self, login: str) -> bool:
        return login.casefold() in self.settings.operators

    async def viewer(self, user_id: int, login: str, csrf: str = "") -> Viewer:
        # Every view needs a usable sign-in (a revoked or signed-out one sees nothing, even
        # while its repositories are cached).
        token = await self._token(user_id)
        if self.is_operator(login):
            return Viewer(user_id, login, True, None, None, csrf)
        reach = await self.reach(user_id, token)
        return Viewer(user_id, login, False, reach.repos, reach.installations, csrf)

    def forget(self, user_id: int) -> None:
        self._cache.pop(user_id, None)

    async def reach(self, user_id: int, token: str) -> Reach:
        cached = self._cache.get(user_id)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        lock = self._locks.setdefault(user_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(user_id)
            if cached and cached[0] > time.monotonic():
                return cached[1]
            reach = await self._ask(token)
            self._cache[user_id] = (time.monotonic() + CACHE_SECONDS, reach)
            return reach

    async def _token(self, user_id: int) -> str:
        token = await self.tokens.token_for(user_id) if self.tokens is not None else None
        if token is None:
            self.forget(user_id)
            raise NotSignedIn
        return token

    async def _ask(self, token: str) -> Reach:
        self.lookups += 1
        installations = [
            int(item["id"])
            for item in await self._list(token, "/user/installations", "installations")
        ]
        names: set[str] = set()
        ids: set[int] = set()
        for installation in installations:
            path = f"/user/installations/{installation}/repositories"
            for item in await self._list(token, path, "repositories"):
                names.add(str(item["full_name"]))
                ids.add(int(item["id"]))
        return Reach(Reachable(names, ids), frozenset(installations))

    async def _list(self, token: str, path: str, key: str) -> list[dict]:
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        found: list[dict] = []
        for page in range(1, MAX_PAGES + 1):
            url = f"{self.settings.api_url}{path}"
            query = {"per_page": str(PER_PAGE), "page": str(page)}
            try:
                async with self.http.get(url, params=query, headers=headers) as response:
                    if response.status == 401:
                        raise NotSignedIn
                    if response.status != 200:
                        raise AccessUnavailable(f"GitHub answered {response.status} to {path}")
                    body = await response.json()
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise AccessUnavailable(
                    f"GitHub could not be reached ({type(exc).__name__})"
                ) from None
            items = body.get(key) if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise AccessUnavailable(f"GitHub's answer to {path} has no {key}")
            found += [item for item in items if isinstance(item, dict)]
            if len(items) < PER_PAGE:
                break
        return found
