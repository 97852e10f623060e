"""People's user tokens (bot/auth/tokens.py): stored sealed, refreshed once when expired,
deleted when GitHub refuses the refresh; the sign-in link (bot/auth/)."""

from __future__ import annotations

import dataclasses
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from bot.auth import SignInUnavailable, sign_in_link
from bot.auth.oauth import GitHubUser, exchange_code
from bot.auth.state import BadState, read_state
from bot.auth.tokens import UserTokens
from bot.config import Secret

pytestmark = pytest.mark.backends


@pytest.fixture
def signin_settings(settings, github):
    return dataclasses.replace(
        settings,
        client_id=github.oauth.client_id,
        client_secret=Secret(github.oauth.client_secret),
        public_url="http://cockpit.test",
    )


async def _signed_in(github, tokens, login: str) -> tuple[int, str]:
    """`login` signs in: a real code exchange with the stand-in, the pair stored."""
    github.oauth.callback_urls = ["http://cockpit.test/auth/github/callback"]
    github.oauth.authorized.add((login, github.oauth.client_id))
    github.web_user = login
    async with aiohttp.ClientSession() as http:
        async with http.get(
            f"{github.url}/login/oauth/authorize",
            params={"client_id": github.oauth.client_id, "state": "s"},
            allow_redirects=False,
        ) as response:
            code = parse_qs(urlsplit(response.headers["Location"]).query)["code"][0]
        pair = await exchange_code(http, tokens.settings, code)
    user = GitHubUser(github.oauth.user_id(login), login)
    await tokens.store(user, pair)
    return user.id, pair.access


async def test_a_stored_token_is_sealed_and_used_until_it_expires(github, db, signin_settings):
    tokens = UserTokens(db, signin_settings)
    user_id, access = await _signed_in(github, tokens, "alice")
    assert await tokens.token_for(user_id) == access
    assert github.oauth.refreshes == 0
    row = await db.fetchone("SELECT sealed FROM user_tokens WHERE user_id = ?", (user_id,))
    assert access.encode() not in bytes(row["sealed"])
    assert await tokens.token_for(user_id + 1) is None


async def test_an_expired_token_is_refreshed_once(github, db, signin_settings):
    tokens = UserTokens(db, signin_settings)
    user_id, access = await _signed_in(github, tokens, "alice")
    github.oauth.expire_access("alice")
    # A stored expiry in the past: what the database says decides, as after 8 hours.
    await _age(db, tokens, user_id)
    fresh = await tokens.token_for(user_id)
    assert fresh and fresh != access and fresh.startswith("ghu_")
    assert github.oauth.refreshes == 1
    assert await tokens.token_for(user_id) == fresh
    assert github.oauth.refreshes == 1


async def test_a_refused_refresh_deletes_the_token(github, db, signin_settings):
    tokens = UserTokens(db, signin_settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    github.oauth.revoke("alice")
    await _age(db, tokens, user_id)
    assert await tokens.token_for(user_id) is None
    assert github.oauth.refreshes == 1
    assert await db.fetchone("SELECT 1 FROM user_tokens WHERE user_id = ?", (user_id,)) is None


async def test_forget_deletes(github, db, signin_settings):
    tokens = UserTokens(db, signin_settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    await tokens.forget(user_id)
    assert await tokens.token_for(user_id) is None


async def _age(db, tokens: UserTokens, user_id: int) -> None:
    """The stored access token's expiry moved to the past (its refresh token kept)."""
    from bot.records import user_tokens as rows

    stored = await rows.sealed_token(db, user_id)
    pair = tokens._open(stored)
    aged = dataclasses.replace(pair, access_expires=pair.access_expires - 9 * 3600)
    await rows.store_token(db, user_id, stored.login, tokens.seal(user_id, aged), 1.0)


def test_sign_in_link_needs_the_client_and_the_public_url(settings, signin_settings):
    with pytest.raises(SignInUnavailable) as raised:
        sign_in_link(settings, 7, {"job": "vet", "args": {}})
    for name in ("GITHUB_CLIENT_ID", "GITHUB_CLIENT_SECRET", "COCKPIT_PUBLIC_URL"):
        assert name in str(raised.value)
    link = sign_in_link(signin_settings, 7, {"job": "vet", "args": {"pull_id": 3}})
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == (
        "http://cockpit.test/auth/github/login"
    )
    state = read_state(signin_settings, parse_qs(parts.query)["state"][0])
    assert state.user_id == 7 and state.then == {"job": "vet", "args": {"pull_id": 3}}
    with pytest.raises(BadState):
        read_state(signin_settings, parse_qs(parts.query)["state"][0][:-2] + "AA")
    with pytest.raises(BadState) as expired:
        read_state(signin_settings, parse_qs(parts.query)["state"][0], now=state.expires_at + 1)
    assert expired.value.why == "expired"
