"""People's user access tokens: stored sealed, refreshed when expired, one refresh at a time
per user across every process sharing the database, deleted when GitHub refuses them."""

from __future__ import annotations

import logging
import time

import aiohttp
import orjson

from bot.auth import oauth, seal
from bot.auth.oauth import GitHubUser, TokenPair
from bot.config import Settings
from bot.records import user_tokens as rows
from bot.records.database import Connection, Database

log = logging.getLogger(__name__)

__all__ = ["TokenUnavailable", "UserTokens"]


class TokenUnavailable(Exception):
    """GitHub could not be asked for a refresh now (network, 5xx): the work that needed the
    token is retried later; the token is kept."""


def lock_key(user_id: int) -> str:
    return f"user_token:{user_id}"


class UserTokens:
    """Built from the database and the settings (and the process's HTTP session, if any)."""

    def __init__(
        self, db: Database, settings: Settings, http: aiohttp.ClientSession | None = None
    ) -> None:
        self.db = db
        self.settings = settings
        self.http = http
        self._key: bytes | None = None

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = seal.derived(self.settings, seal.TOKENS)
        return self._key

    async def token_for(self, user_id: int) -> str | None:
        """A usable access token of GitHub user `user_id`, refreshed (under the per-user lock)
        when expired; None when there is none or the refresh was refused (then it is deleted).
        TokenUnavailable when GitHub cannot be asked now."""
        stored = await rows.sealed_token(self.db, user_id)
        if stored is None:
            return None
        pair = self._open(stored)
        if pair is not None and pair.fresh(time.time()):
            return pair.access
        async with self.db.hold(lock_key(user_id)):
            # Another process may have refreshed it while this one waited: read it again.
            stored = await rows.sealed_token(self.db, user_id)
            if stored is None:
                return None
            pair = self._open(stored)
            now = time.time()
            if pair is None:
                await self._delete(user_id, "unreadable", stored.updated_at)
                return None
            if pair.fresh(now):
                return pair.access
            if pair.refresh is None or (pair.refresh_expires or now + 1) <= now:
                await self._delete(user_id, "expired", stored.updated_at)
                return None
            try:
                async with self._session() as http:
                    new = await oauth.refresh(http, self.settings, pair.refresh)
            except oauth.Refused as exc:
                await self._delete(user_id, f"refresh refused: {exc}", stored.updated_at)
                return None
            except oauth.Unreachable as exc:
                raise TokenUnavailable(str(exc)) from None
            sealed = self.seal(user_id, new)
            if not await rows.replace_token(self.db, user_id, stored.updated_at, sealed, now):
                # Revoked (deleted) while GitHub answered: the new pair is not kept.
                return None
            log.info("user token refreshed", extra={"fields": {"user_id": user_id}})
            return new.access

    async def store(
        self, user: GitHubUser, pair: TokenPair, conn: Connection | None = None
    ) -> None:
        """Keep `user`'s new pair (in `conn`'s transaction when given)."""
        sealed = self.seal(user.id, pair)
        await rows.store_token(conn or self.db, user.id, user.login, sealed, time.time())

    async def forget(self, user_id: int) -> None:
        """Delete the user's tokens (revoked, signed out)."""
        await self._delete(user_id, "forgotten")

    async def forget_login(self, login: str) -> bool:
        """Delete the tokens of the person signed in as `login` (`/cockpit signout`); whether
        there were any."""
        if await rows.delete_token_of(self.db, login):
            log.info("user token deleted", extra={"fields": {"why": "signed out"}})
            return True
        return False

    async def signed_in(self, user_id: int) -> bool:
        return await rows.sealed_token(self.db, user_id) is not None

    def seal(self, user_id: int, pair: TokenPair) -> bytes:
        plain = orjson.dumps(
            {
                "access": pair.access,
                "access_expires": pair.access_expires,
                "refresh": pair.refresh,
                "refresh_expires": pair.refresh_expires,
            }
        )
        return seal.seal(self.key, plain, lock_key(user_id))

    def _open(self, stored: rows.SealedToken) -> TokenPair | None:
        try:
            data = orjson.loads(seal.unseal(self.key, stored.sealed, lock_key(stored.user_id)))
        except (seal.Unsealable, orjson.JSONDecodeError):
            # Another key (COCKPIT_SECRET_KEY changed) or an altered row: unusable.
            log.warning(
                "a stored user token cannot be opened with this key",
                extra={"fields": {"user_id": stored.user_id}},
            )
            return None
        return TokenPair(
            data["access"], data["access_expires"], data["refresh"], data["refresh_expires"]
        )

    async def _delete(self, user_id: int, why: str, was: float | None = None) -> None:
        if await rows.delete_token(self.db, user_id, was):
            log.info("user token deleted", extra={"fields": {"user_id": user_id, "why": why}})

    def _session(self) -> _Session:
        return _Session(self.http)


class _Session:
    """The process's HTTP session, or one for this request."""

    def __init__(self, http: aiohttp.ClientSession | None) -> None:
        self.http = http
        self.own: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> aiohttp.ClientSession:
        if self.http is not None and not self.http.closed:
            return self.http
        self.own = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self.own

    async def __aexit__(self, *exc: object) -> None:
        if self.own is not None:
            await self.own.close()
