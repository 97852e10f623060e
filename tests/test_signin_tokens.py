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
from bot.auth.oauth import GitHubUser, TokenPair, exchange_code
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


async def test_jobs_of_one_process_needing_an_expired_token_at_once_refresh_it_once(
    github, db, signin_settings
):
    tokens = UserTokens(db, signin_settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    await _age(db, tokens, user_id)
    found = await asyncio.gather(*(tokens.token_for(user_id) for _ in range(4)))
    assert len(set(found)) == 1 and found[0].startswith("ghu_")
    assert github.oauth.refreshes == 1


async def test_a_refused_refresh_deletes_the_token(github, db, signin_settings):
    tokens = UserTokens(db, signin_settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    github.oauth.revoke("alice")
    await _age(db, tokens, user_id)
    assert await tokens.token_for(user_id) is None
    assert github.oauth.refreshes == 1
    assert await db.fetchone("SELECT 1 FROM user_tokens WHERE user_id = ?", (user_id,)) is None


async def test_github_unreachable_keeps_the_token_and_says_try_later(github, db, signin_settings):
    from bot.auth.tokens import TokenUnavailable

    tokens = UserTokens(db, signin_settings)
    user_id, _ = await _signed_in(github, tokens, "alice")
    await _age(db, tokens, user_id)
    github.fail_next("POST", r"^/login/oauth/access_token$", 502)
    with pytest.raises(TokenUnavailable) as raised:
        await tokens.token_for(user_id)
    assert "ghr_" not in str(raised.value) and "ghu_" not in str(raised.value)
    assert await tokens.signed_in(user_id)
    fresh = await tokens.token_for(user_id)  # GitHub answers again: the kept refresh token works
    assert fresh and fresh.startswith("ghu_")


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


# -- schema step 9 on a database of the previous release ---------------------------------------


async def test_an_upgrade_adds_the_sign_in_tables(backend, tmp_path, request, github, settings):

    from bot.records import schema
    from tests.schema_steps import open_from_before

    [step] = [s for s in schema.STEPS if "user_tokens" in s.schema]
    assert step.version == 9
    db = await open_from_before(backend, tmp_path, request, step)
    try:
        assert await db.schema_version() == schema.SCHEMA_VERSION
        tokens = UserTokens(db, dataclasses.replace(settings, secret_key=Secret("q" * 32)))
        token = github.user_token_for("alice")
        pair = TokenPair(token, 4e9, "ghr_x", 5e9)
        await tokens.store(GitHubUser(5, "alice"), pair)
        assert await tokens.token_for(5) == token
    finally:
        await db.close()


# -- the settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_url", "web_url"),
    [
        ("https://api.github.com", "https://github.com"),
        ("https://api.github.com/", "https://github.com"),
        ("https://ghe.example.com/api/v3", "https://ghe.example.com"),
        ("https://ghe.example.com/api/v3/", "https://ghe.example.com"),
        ("https://ghe.example.com:8443/api/v3", "https://ghe.example.com:8443"),
        ("https://example.com/github/api/v3", "https://example.com/github"),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("http://127.0.0.1:9000/some/path", "http://127.0.0.1:9000"),
    ],
)
def test_github_web_url_defaults_from_the_api_url(api_url, web_url):
    from bot.config import load_settings

    assert load_settings({"GITHUB_API_URL": api_url}, github=False).github_web_url == web_url
    given = {"GITHUB_API_URL": api_url, "GITHUB_WEB_URL": "https://gh.test/"}
    assert load_settings(given, github=False).github_web_url == "https://gh.test"


def test_sign_in_settings_fail_fast_naming_the_variable():
    from bot.config import ConfigError, check_settings, load_settings

    short = {"COCKPIT_SECRET_KEY": "too-short-a-key"}
    with pytest.raises(ConfigError) as raised:
        load_settings(short, github=False)
    assert raised.value.variable == "COCKPIT_SECRET_KEY" and "too-short" not in str(raised.value)
    with pytest.raises(ConfigError, match="COCKPIT_PUBLIC_URL"):
        load_settings({"COCKPIT_PUBLIC_URL": "cockpit.example.com"}, github=False)
    # Web and worker processes share stored sign-ins: one key, given to all of them.
    client = {"GITHUB_CLIENT_ID": "Iv1.abc", "GITHUB_WEBHOOK_SECRET": "s3cret-value"}
    [problem] = check_settings(client, role="web")
    assert problem.variable == "COCKPIT_SECRET_KEY"
    assert check_settings({**client, "COCKPIT_SECRET_KEY": "k" * 32}, role="web") == []
    assert check_settings({"GITHUB_WEBHOOK_SECRET": "s3cret-value"}, role="web") == []
    secret = {"GITHUB_CLIENT_SECRET": "c" * 40, "COCKPIT_SECRET_KEY": "k" * 40}
    settings = load_settings(secret, github=False)
    assert set(settings.secrets()) >= {"c" * 40, "k" * 40}
    assert "c" * 40 not in repr(settings) and "k" * 40 not in repr(settings)


def test_a_generated_key_is_made_once_mode_0600(tmp_path):
    import stat

    from bot.auth import seal
    from bot.config import load_settings

    settings = load_settings({"COCKPIT_DATA_DIR": str(tmp_path / "data")}, github=False)
    first = seal.master_key(settings)
    path = seal.key_file(settings)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert seal.master_key(settings) == first and len(first) == 64
    given = dataclasses.replace(settings, secret_key=Secret("g" * 32))
    assert seal.master_key(given) == b"g" * 32
    assert seal.derived(settings, seal.TOKENS) != seal.derived(settings, seal.STATE)
