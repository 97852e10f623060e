"""People's user tokens (bot/auth/tokens.py): stored sealed, refreshed once when expired,
deleted when GitHub refuses the refresh; the sign-in link (bot/auth/)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from bot.auth import SignInUnavailable, sign_in_link
from bot.auth.oauth import GitHubUser, exchange_code
from bot.auth.state import BadState, read_state
from bot.auth.tokens import UserTokens
from bot.config import Secret
from tests.conftest import wait_for

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


# -- two processes refreshing one user's token at once (Postgres) -----------------------------

REFRESH_SCRIPT = """
import asyncio, sys
from bot.auth.tokens import UserTokens
from bot.config import load_settings
from bot.records.postgres import PgDatabase

async def main():
    settings = load_settings(github=False)
    db = await PgDatabase.open(settings.database_url.reveal())
    try:
        print(await UserTokens(db, settings).token_for(int(sys.argv[1])))
    finally:
        await db.close()

asyncio.run(main())
"""


@pytest.mark.postgres_only
async def test_two_processes_refreshing_at_once_make_one_refresh(
    github, db, signin_settings, database_url, tmp_path
):
    """Each refresh invalidates the old pair: two workers refreshing the same expired token
    at once would leave one with a refused refresh (and delete the token). The per-user lock
    lets one ask GitHub; the other waits, reads the new token and asks nothing."""
    key = "s" * 40
    settings = dataclasses.replace(signin_settings, secret_key=Secret(key))
    tokens = UserTokens(db, settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    await _age(db, tokens, user_id)
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        "COCKPIT_DATABASE_URL": database_url,
        "COCKPIT_SECRET_KEY": key,
        "GITHUB_API_URL": github.api_url,
        "GITHUB_CLIENT_ID": settings.client_id,
        "GITHUB_CLIENT_SECRET": settings.client_secret.reveal(),
        "COCKPIT_PUBLIC_URL": settings.public_url,
    }
    github.gate.clear()  # GitHub holds the first refresh's answer until both are under way
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", REFRESH_SCRIPT, str(user_id)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:

        async def both_under_way() -> bool:
            asked = github.calls("POST", r"^/login/oauth/access_token$")
            waiting = await db.fetchone(
                "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            # One asks GitHub and the other waits for the lock (without the lock: both ask).
            return len(asked) >= 2 or (len(asked) == 1 and waiting["n"] >= 1)

        await wait_for(both_under_way, 60)
        github.gate.set()
        answers = [await asyncio.to_thread(w.communicate, timeout=60) for w in workers]
    finally:
        github.gate.set()
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
    assert [w.returncode for w in workers] == [0, 0], answers
    [first, second] = [out.strip() for out, _ in answers]
    assert first == second and first.startswith("ghu_")
    assert github.oauth.refreshes == 1
    assert github.oauth.access[first].login == "alice"
    assert await tokens.token_for(user_id) == first
