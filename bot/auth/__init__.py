"""People's own GitHub identity: "Sign in with GitHub" (GitHub App user authorization, web
flow), their tokens stored encrypted and refreshed (`tokens.UserTokens`), the sign-in link a
command replies with (`sign_in_link`), and the server's `/auth/…` routes (`web.py`)."""

from __future__ import annotations

from typing import Any

from bot.config import Settings
from bot.texts import PEOPLE, say

__all__ = ["SignInUnavailable", "missing_settings", "sign_in_link"]

LOGIN_PATH = "/auth/github/login"


class SignInUnavailable(Exception):
    """Sign-in is not set up here: the message (for people) says which variables to set."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(say(PEOPLE, "sign_in.unset", missing=missing))


def missing_settings(settings: Settings) -> list[str]:
    """The variables sign-in needs that are not set."""
    needed = {
        "GITHUB_CLIENT_ID": settings.client_id,
        "GITHUB_CLIENT_SECRET": settings.client_secret,
        "COCKPIT_PUBLIC_URL": settings.public_url,
    }
    return [name for name, value in needed.items() if not value]


def sign_in_link(settings: Settings, user_id: int, then: dict[str, Any]) -> str:
    """`{COCKPIT_PUBLIC_URL}/auth/github/login?state=…`: single use, 10 minutes, bound to
    GitHub user `user_id`. When that user completes it, their token is stored and job
    `then["job"]` is enqueued with `then["args"]` (key `then.get("key")`, default
    `sign-in:<user_id>`; queue `then.get("queue")`, default the reviews queue); completed by
    anyone else it enqueues nothing. SignInUnavailable when sign-in is not set up."""
    from urllib.parse import urlencode

    from bot.auth.state import new_state

    if missing := missing_settings(settings):
        raise SignInUnavailable(missing)
    if not isinstance(then.get("job"), str) or not isinstance(then.get("args", {}), dict):
        raise ValueError("then must be {'job': kind, 'args': {...}}")
    _, text = new_state(settings, user_id, then)
    return f"{settings.public_url}{LOGIN_PATH}?{urlencode({'state': text})}"
