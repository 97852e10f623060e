"""GitHub App client: JWT, cached installation tokens, ETag cache, rate-limit aware retries."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import cachetools
import gidgethub
import gidgethub.aiohttp
from gidgethub import apps

from bot.config import Secret, Settings
from bot.metrics import Metrics
from bot.redaction import redact, register
from bot.texts import PEOPLE, say

log = logging.getLogger(__name__)

USER_AGENT = "pr-cockpit"
TOKEN_REFRESH_MARGIN = 300.0  # renew installation tokens ~5 minutes before they expire
MAX_RATE_LIMIT_WAIT = 60.0  # wait this long in-process; longer waits fail the job for a retry
MAX_ATTEMPTS = 4
PERMISSION_TTL = 300.0  # a person's repository permission is trusted this long
PERMISSIONS = ("none", "read", "triage", "write", "maintain", "admin")  # lowest first
NEXT_PAGES_REMEMBERED = 64  # pagination links handed out by GitHub, per client


class AbsoluteURLError(ValueError):
    """A URL from a payload would bypass GITHUB_API_URL; the bot only calls relative paths."""


def graphql_url(api_url: str) -> str:
    """GitHub's GraphQL endpoint: beside the REST root, or `/api/graphql` for GHES's `/api/v3`."""
    parts = urlsplit(api_url.strip())
    path = parts.path.rstrip("/")
    if path.endswith("/api/v3"):
        path = path.removesuffix("/v3")
    return urlunsplit(parts._replace(path=path + "/graphql", query="", fragment=""))


@dataclass(frozen=True)
class InstallationToken:
    token: str = field(repr=False)
    expires_at: float


def retry_delay(
    exc: gidgethub.HTTPException, attempt: int, now: float, method: str = "GET"
) -> float | None:
    if attempt >= MAX_ATTEMPTS:
        return None
    status = int(exc.status_code)
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    if status in (403, 429):
        try:
            if "retry-after" in headers:
                return max(0.0, float(headers["retry-after"]))
            if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
                return max(0.0, float(headers["x-ratelimit-reset"]) - now + 1)
        except ValueError:  # a header that is not a number
            return 60.0
        return 60.0 * attempt if status == 429 else None
    if status >= 500 and method != "POST":  # a POST may have succeeded: never repeat it blind
        return min(8.0, 0.5 * 2 ** (attempt - 1))
    return None


def github_transient(exc: BaseException) -> bool:
    """GitHub did not really answer (unreachable, timed out, 5xx, rate limited): worth
    retrying later, unlike a 4xx that says no."""
    if isinstance(exc, gidgethub.HTTPException):
        limited = isinstance(exc, gidgethub.RateLimitExceeded)
        return limited or retry_delay(exc, 1, time.time()) is not None
    return isinstance(exc, aiohttp.ClientError | TimeoutError | ConnectionError)


class CockpitGitHubAPI(gidgethub.aiohttp.GitHubAPI):
    """gidgethub client that only calls relative URLs, retries limits, and counts calls.

    The one absolute URL it follows is a pagination link GitHub itself just returned, on this
    client's own base (a GHES writes its configured hostname into links, which may not be the
    name the bot reaches it by); any other (one found in a payload, even on the API host) is
    refused."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        metrics: Metrics | None = None,
        token_source: Callable[[], Awaitable[str]] | None = None,
        app_id: str | None = None,
        private_key: str | None = None,
        cache: Any = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(
            session,
            USER_AGENT,
            base_url=base_url,
            cache=cache,
            app_id=app_id,
            private_key=private_key,
        )
        self._token_source = token_source
        self._metrics = metrics
        self._sleep = sleep
        self._next_pages: cachetools.LRUCache = cachetools.LRUCache(NEXT_PAGES_REMEMBERED)
        self.graphql_url = graphql_url(base_url)

    def __repr__(self) -> str:
        return f"CockpitGitHubAPI(base_url={self.base_url!r})"

    async def sleep(self, seconds: float) -> None:
        await self._sleep(seconds)

    async def _make_request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if "://" in url:
            if method != "GET" or url not in self._next_pages:
                raise AbsoluteURLError(f"refusing to call an absolute URL ({method})")
            url = self._on_base(url)
        if self._token_source and kwargs.get("jwt") is None and kwargs.get("oauth_token") is None:
            kwargs["oauth_token"] = await self._token_source()
        data, more, status = await super()._make_request(method, url, *args, **kwargs)
        if more:
            self._next_pages[more] = True
        return data, more, status

    def _on_base(self, link: str) -> str:
        root = urlsplit(self.base_url).path.rstrip("/")
        parts = urlsplit(link)
        if not parts.path.startswith(root + "/"):
            raise AbsoluteURLError("refusing a page link outside the API root")
        return parts.path[len(root) :] + (f"?{parts.query}" if parts.query else "")

    async def graphql(self, query: str, **variables: Any) -> Any:
        """A GraphQL query or mutation at this API's GraphQL endpoint (gidgethub's own
        `graphql()` ignores `base_url` and would go to github.com), with the client's token."""
        if self._token_source is not None:
            self.oauth_token = await self._token_source()
        return await super().graphql(query, endpoint=self.graphql_url, **variables)

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        status, response_headers, data = await super()._request(method, url, headers, body)
        if self._metrics:
            self._metrics.github_calls.labels(method=method, status=str(status)).inc()
            remaining = response_headers.get("x-ratelimit-remaining")
            if remaining and remaining.isdigit():
                self._metrics.github_rate_limit_remaining.set(int(remaining))
        return status, response_headers, data

    async def handle_rate_limit_error(
        self, *, method: str, url: str, exception: gidgethub.HTTPException, attempt: int
    ) -> bool:
        delay = retry_delay(exception, attempt, time.time(), method)
        if delay is None or delay > MAX_RATE_LIMIT_WAIT:
            return False
        log.warning(
            "GitHub call failed, retrying",
            extra={
                "fields": {
                    "status": int(exception.status_code),
                    "delay": delay,
                    "method": method,
                    "attempt": attempt,
                }
            },
        )
        await self.sleep(delay)
        return True


class GitHubApp:
    def __init__(
        self,
        settings: Settings,
        session: aiohttp.ClientSession,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.session = session
        self.metrics = metrics
        self._sleep = sleep
        self._tokens: cachetools.TLRUCache = cachetools.TLRUCache(
            maxsize=4096,
            ttu=lambda _key, value, _now: value.expires_at - TOKEN_REFRESH_MARGIN,
            timer=clock,
        )
        self._inflight: dict[int, asyncio.Future[InstallationToken]] = {}
        self._etags: cachetools.LRUCache = cachetools.LRUCache(maxsize=256)
        self._slug: str | None = settings.app_slug
        self._permissions: cachetools.TTLCache = cachetools.TTLCache(
            maxsize=4096, ttl=PERMISSION_TTL, timer=clock
        )

    def _private_key(self) -> str:
        key = self.settings.private_key
        if not isinstance(key, Secret):
            raise RuntimeError("GITHUB_PRIVATE_KEY is not configured")
        return key.reveal()

    def _client(self, **auth: Any) -> CockpitGitHubAPI:
        return CockpitGitHubAPI(
            self.session,
            base_url=self.settings.api_url,
            metrics=self.metrics,
            sleep=self._sleep,
            **auth,
        )

    def app_api(self) -> CockpitGitHubAPI:
        return self._client(app_id=self.settings.app_id, private_key=self._private_key())

    def installation_api(self, installation_id: int) -> CockpitGitHubAPI:
        cache = self._etags.setdefault(installation_id, cachetools.LRUCache(maxsize=512))
        return self._client(
            token_source=lambda: self.installation_token(installation_id), cache=cache
        )

    def user_api(self, token: str) -> CockpitGitHubAPI:
        """A person's GitHub, with their user access token (`vet`: their pending review)."""

        async def source() -> str:
            return token

        return self._client(token_source=source)

    async def installation_token(self, installation_id: int) -> str:
        cached = self._tokens.get(installation_id)
        if cached is not None:
            return cached.token
        pending = self._inflight.get(installation_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch_token(installation_id))
            self._inflight[installation_id] = pending
            pending.add_done_callback(lambda _f: self._inflight.pop(installation_id, None))
        return (await asyncio.shield(pending)).token

    async def _fetch_token(self, installation_id: int) -> InstallationToken:
        response = await apps.get_installation_access_token(
            self.app_api(),
            installation_id=str(installation_id),
            app_id=str(self.settings.app_id),
            private_key=self._private_key(),
        )
        expires_at = dt.datetime.fromisoformat(response["expires_at"]).timestamp()
        token = InstallationToken(token=response["token"], expires_at=expires_at)
        register(token.token)
        self._tokens[installation_id] = token
        return token

    def forget_installation(self, installation_id: int) -> None:
        self._tokens.pop(installation_id, None)
        self._etags.pop(installation_id, None)

    async def permission(self, gh: Any, owner: str, repo: str, user: str) -> str:
        """The person's permission on the repository (one of PERMISSIONS), cached a few
        minutes. The collaborator endpoint decides; `author_association` is only a hint."""
        key = (owner.casefold(), repo.casefold(), user.casefold())
        if key not in self._permissions:
            try:
                data = await gh.getitem(
                    "/repos/{owner}/{repo}/collaborators/{username}/permission",
                    {"owner": owner, "repo": repo, "username": user},
                )
            except gidgethub.BadRequest as exc:
                if int(exc.status_code) not in (403, 404):
                    raise
                data = {}  # not a collaborator at all
            # `permission` is the legacy field (maintain shows as write, triage as read);
            # `role_name` has the real level when it is a standard one.
            role = data.get("role_name")
            level = role if role in PERMISSIONS else data.get("permission", "none")
            self._permissions[key] = level if level in PERMISSIONS else "none"
        return self._permissions[key]

    async def bot_login(self) -> str:
        """`<slug>[bot]`: GITHUB_APP_SLUG, or looked up once with GET /app."""
        if self._slug is None:
            app = await self.app_api().getitem("/app")
            self._slug = app["slug"]
        return f"{self._slug}[bot]"


def describe_failure(exc: Exception) -> str:
    """A failure as people on the PR are told it (no internals, no secrets)."""
    if isinstance(exc, gidgethub.HTTPException):
        return redact(say(PEOPLE, "github_answered", status=int(exc.status_code), error=str(exc)))
    if isinstance(exc, OSError):
        return say(PEOPLE, "local_error", error_class=exc.__class__.__name__)
    return redact(str(exc))


def permits(level: str, required: str = "write") -> bool:
    """Unknown levels permit nothing."""
    return level in PERMISSIONS and PERMISSIONS.index(level) >= PERMISSIONS.index(required)
