"""The sign-in `state`: sealed (AES-GCM) by this server, so it cannot be forged or read;
10 minutes; used once (bot/records/user_tokens.use_state); optionally bound to the GitHub
user who must complete it and carrying what to do then (`then`: a job to enqueue)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

from bot.auth import seal
from bot.config import Settings

STATE_SECONDS = 600
CONTEXT = "state"


class BadState(Exception):
    """Forged, altered, or sealed with another key; the page says so (`why`: forged|expired)."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


@dataclass(frozen=True)
class State:
    nonce: str
    expires_at: float
    user_id: int | None = None  # who must complete it (None: whoever signs in)
    then: dict[str, Any] | None = None  # {"job": kind, "args": {...}, "key"?: …, "queue"?: …}


def new_state(
    settings: Settings, user_id: int | None = None, then: dict[str, Any] | None = None
) -> tuple[State, str]:
    state = State(secrets.token_urlsafe(16), time.time() + STATE_SECONDS, user_id, then)
    plain = orjson.dumps(
        {"n": state.nonce, "e": state.expires_at, "u": state.user_id, "t": state.then}
    )
    return state, seal.seal_text(seal.derived(settings, seal.STATE), plain, CONTEXT)


def read_state(settings: Settings, text: str, now: float | None = None) -> State:
    """The state `text` carries; BadState when it is not ours or no longer valid."""
    try:
        plain = seal.unseal_text(seal.derived(settings, seal.STATE), text, CONTEXT)
        data = orjson.loads(plain)
        state = State(str(data["n"]), float(data["e"]), data["u"], data["t"])
    except (seal.Unsealable, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise BadState("forged") from None
    if state.expires_at < (time.time() if now is None else now):
        raise BadState("expired")
    return state
