"""GitHub's side of "Sign in with GitHub" (GitHub App user authorization, web flow): the
authorize URL, the code and refresh exchanges at `{GITHUB_WEB_URL}/login/oauth/access_token`,
and `GET /user` with the new token. No token is ever put in an error or a log line."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from bot.config import Settings

ACCESS_TOKEN_PATH = "/login/oauth/access_token"  # noqa: S105 - a path
AUTHORIZE_PATH = "/login/oauth/authorize"
CALLBACK_PATH = "/auth/github/callback"
_ERROR_WORD = re.compile(r"^[a-z_]{1,64}$")
# A token GitHub gave without expiry times (an App with user-token expiration switched off):
# used until it is refused, checked again after this long.
NO_EXPIRY = 10 * 365 * 86400.0


class Refused(Exception):
    """GitHub refused the code or the refresh token (used, expired, revoked): what it said,
    as its error word (`bad_refresh_token`, …), never a token."""


class Unreachable(Exception):
    """GitHub could not be asked now (network, 5xx): try again later."""


@dataclass(frozen=True)
class TokenPair:
    access: str
    access_expires: float
    refresh: str | None
    refresh_expires: float | None

    def __repr__(self) -> str:  # never a token in a repr
        return f"TokenPair(access_expires={self.access_expires!r})"

    def fresh(self, now: float, margin: float = 60.0) -> bool:
        return self.access_expires > now + margin


@dataclass(frozen=True)
class GitHubUser:
    id: int
    login: str


def callback_url(settings: Settings) -> str:
    return f"{settings.public_url}{CALLBACK_PATH}"


def authorize_url(settings: Settings, state: str) -> str:
    query = {
        "client_id": settings.client_id or "",
        "redirect_uri": callback_url(settings),
        "state": state,
        "allow_signup": "false",
    }
    return f"{settings.github_web_url}{AUTHORIZE_PATH}?{urlencode(query)}"


async def exchange_code(http: aiohttp.ClientSession, settings: Settings, code: str) -> TokenPair:
    return await _token_request(
        http, settings, {"code": code, "redirect_uri": callback_url(settings)}
    )


async def refresh(http: aiohttp.ClientSession, settings: Settings, token: str) -> TokenPair:
    return await _token_request(
        http, settings, {"grant_type": "refresh_token", "refresh_token": token}
    )


async def _token_request(
    http: aiohttp.ClientSession, settings: Settings, fields: dict[str, str]
) -> TokenPair:
    assert settings.client_id and settings.client_secret
    form = {
        "client_id": settings.client_id,
        "client_secret": settings.client_secret.reveal(),
        **fields,
    }
    url = settings.github_web_url + ACCESS_TOKEN_PATH
    now = time.time()
    try:
        async with http.post(url, data=form, headers={"Accept": "application/json"}) as response:
            status = response.status
            try:
                answer: Any = await response.json(content_type=None)
            except ValueError:
                answer = None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise Unreachable(exc.__class__.__name__) from None
    if status >= 500 or status == 429:
        raise Unreachable(f"HTTP {status}")
    if not isinstance(answer, dict):
        raise Refused(f"HTTP {status}")
    if "error" in answer or not isinstance(answer.get("access_token"), str):
        word = str(answer.get("error", ""))
        raise Refused(word if _ERROR_WORD.match(word) else f"HTTP {status}")
    return _pair(answer, now)


async def client_accepted(http: aiohttp.ClientSession, settings: Settings) -> bool:
    """Whether GitHub accepts the App's OAuth client (`cockpit check-config`): a code
    exchange with a code that is no code is refused as `bad_verification_code` when the
    client id and secret are right, `incorrect_client_credentials` when not. Unreachable
    when GitHub cannot be asked."""
    try:
        await _token_request(http, settings, {"code": "cockpit-check-config"})
    except Refused as exc:
        return str(exc) != "incorrect_client_credentials"
    return True  # not expected: a code that is no code cannot be exchanged


def _pair(answer: dict[str, Any], now: float) -> TokenPair:
    def seconds(key: str) -> float | None:
        value = answer.get(key)
        if isinstance(value, int | float | str) and str(value).isdigit():
            return float(value)
        return None

    expires_in = seconds("expires_in")
    refresh_in = seconds("refresh_token_expires_in")
    refresh_token = answer.get("refresh_token")
    return TokenPair(
        access=answer["access_token"],
        access_expires=now + (expires_in if expires_in is not None else NO_EXPIRY),
        refresh=refresh_token if isinstance(refresh_token, str) and refresh_token else None,
        refresh_expires=now + refresh_in if refresh_in is not None else None,
    )


async def user_of(http: aiohttp.ClientSession, settings: Settings, token: str) -> GitHubUser:
    """`GET /user` with the user's token: who signed in."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    try:
        async with http.get(settings.api_url + "/user", headers=headers) as response:
            status = response.status
            try:
                answer: Any = await response.json(content_type=None)
            except ValueError:
                answer = None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise Unreachable(exc.__class__.__name__) from None
    if status >= 500:
        raise Unreachable(f"HTTP {status}")
    if status != 200 or not isinstance(answer, dict):
        raise Refused(f"HTTP {status}")
    user_id, login = answer.get("id"), answer.get("login")
    if not isinstance(user_id, int) or not isinstance(login, str):
        raise Refused(f"HTTP {status}")
    return GitHubUser(user_id, login)
