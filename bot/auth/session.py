"""The page's session: a cookie sealed with a key derived from COCKPIT_SECRET_KEY (AES-GCM,
`bot.auth.seal`) holding the GitHub user id, login and expiry; HttpOnly, SameSite=Lax, Secure
when the public URL is https. Each session has its CSRF token (an HMAC of the cookie), which
every POST form carries."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass

import orjson
from aiohttp import web

from bot.auth import seal
from bot.config import Settings

COOKIE = "cockpit_session"
SESSION_SECONDS = 7 * 86400


@dataclass(frozen=True)
class Session:
    user_id: int
    login: str
    cookie: str  # the sealed text, which the CSRF token is derived from

    def __repr__(self) -> str:  # never the cookie in a log line
        return f"Session(user_id={self.user_id}, login={self.login!r})"


def _key(settings: Settings) -> bytes:
    return seal.derived(settings, seal.COOKIE)


def secure(settings: Settings) -> bool:
    return (settings.public_url or "").startswith("https://")


def start_session(
    response: web.StreamResponse, settings: Settings, user_id: int, login: str
) -> str:
    """Sets the session cookie on `response` (the sign-in callback calls this); returns the
    new session's CSRF token."""
    plain = orjson.dumps({"u": user_id, "l": login, "e": time.time() + SESSION_SECONDS})
    cookie = seal.seal_text(_key(settings), plain, COOKIE)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_SECONDS,
        path="/",
        httponly=True,
        samesite="Lax",
        secure=secure(settings),
    )
    return csrf_token(settings, cookie)


def end_session(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/")


def read_session(request: web.Request, settings: Settings) -> Session | None:
    """The request's session, or None (none, forged, another key's, expired)."""
    cookie = request.cookies.get(COOKIE, "")
    if not cookie:
        return None
    try:
        data = orjson.loads(seal.unseal_text(_key(settings), cookie, COOKIE))
    except (seal.Unsealable, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("e"), int | float):
        return None
    if data["e"] < time.time():
        return None
    user_id, login = data.get("u"), data.get("l")
    if not isinstance(user_id, int) or not isinstance(login, str):
        return None
    return Session(user_id, login, cookie)


def csrf_token(settings: Settings, cookie: str) -> str:
    return hmac.digest(_key(settings), b"csrf:" + cookie.encode(), hashlib.sha256).hex()


def csrf_ok(settings: Settings, session: Session, given: str) -> bool:
    return hmac.compare_digest(given.encode(), csrf_token(settings, session.cookie).encode())
