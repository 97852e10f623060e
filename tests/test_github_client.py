"""GitHub App auth and the client's protocol behaviour, against the stand-in over real HTTP."""

from __future__ import annotations

import asyncio
import http

import aiohttp
import gidgethub
import jwt
import pytest

from bot.github import AbsoluteURLError, GitHubApp, retry_delay
from bot.metrics import Metrics


@pytest.fixture
async def app_client(settings, github):
    github.add_repo(
        "octo",
        "widgets",
        clone_url="file:///nowhere",
        installation_id=7,
        files={".github/cockpit.toml": "verify = true\n"},
    )
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with aiohttp.ClientSession() as session:
        app = GitHubApp(settings, session, metrics=Metrics(), sleep=fake_sleep)
        app.sleeps = sleeps
        yield app


async def test_app_jwt_is_rs256_backdated_and_short_lived(app_client, github):
    await app_client.installation_token(7)
    header = github.calls("POST", r"/access_tokens$")[0]["headers"]["Authorization"]
    token = header.split(" ", 1)[1]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert jwt.get_unverified_header(token)["alg"] == "RS256"
    assert claims["iss"] == github.app_id
    assert claims["exp"] - claims["iat"] <= 600
    import time

    assert claims["iat"] <= time.time() - 30  # issued in the past for clock drift


async def test_concurrent_jobs_share_one_token_request(app_client, github):
    tokens = await asyncio.gather(*[app_client.installation_token(7) for _ in range(20)])
    assert len(set(tokens)) == 1
    assert github.token_requests == 1


async def test_token_is_renewed_five_minutes_before_expiry(settings, github):
    github.add_repo("octo", "widgets", clone_url="file:///x", installation_id=7)
    now = [1_000.0]
    async with aiohttp.ClientSession() as session:
        app = GitHubApp(settings, session, clock=lambda: now[0])
        first = await app.installation_token(7)
        expires_at = app._tokens[7].expires_at
        now[0] = expires_at - 301
        assert await app.installation_token(7) == first
        now[0] = expires_at - 299
        assert await app.installation_token(7) != first
    assert github.token_requests == 2


async def test_repository_calls_carry_the_installation_token(app_client, github):
    gh = app_client.installation_api(7)
    await gh.getitem("/repos/octo/widgets")
    auth = github.calls("GET", r"^/repos/octo/widgets$")[0]["headers"]["Authorization"]
    assert auth.split(" ", 1)[1] in github.tokens


async def test_wrong_private_key_is_rejected_by_github(settings, github):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from bot.config import Secret

    other = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    github.add_repo("octo", "widgets", clone_url="file:///x", installation_id=7)
    async with aiohttp.ClientSession() as session:
        app = GitHubApp(
            settings.__class__(**{**settings.__dict__, "private_key": Secret(other)}), session
        )
        with pytest.raises(gidgethub.BadRequest) as caught:
            await app.installation_token(7)
    assert int(caught.value.status_code) == 401


async def test_urls_off_the_api_base_are_never_called(app_client, github):
    gh = app_client.installation_api(7)
    for url in (
        "https://evil.example/repos/octo/widgets",
        "http://127.0.0.1:1/repos/x/y",
        f"{github.url}.evil.example/repos/octo/widgets",
    ):
        with pytest.raises(AbsoluteURLError):
            await gh.getitem(url)
    assert github.calls(path_regex="evil|repos") == []


async def test_pagination_links_on_the_api_base_are_followed(app_client, github):
    for n in range(75):
        github.issue_comments[n] = {
            "id": n,
            "repo": "octo/widgets",
            "number": 1,
            "body": f"c{n}",
            "user": {"login": "someone"},
        }
    gh = app_client.installation_api(7)
    bodies = [c["body"] async for c in gh.getiter("/repos/octo/widgets/issues/1/comments")]
    assert len(bodies) == 75 and bodies[-1] == "c74"
    assert [c["query"].get("page") for c in github.calls("GET", "/comments$")] == [None, "2", "3"]


async def test_etag_cache_revalidates_with_if_none_match(app_client, github):
    gh = app_client.installation_api(7)
    url = "/repos/octo/widgets/contents/.github/cockpit.toml"
    first = await gh.getitem(url)
    second = await gh.getitem(url)
    assert first == second
    calls = github.calls("GET", r"/contents/")
    assert "If-None-Match" not in calls[0]["headers"]
    assert calls[1]["headers"]["If-None-Match"].startswith('"')


async def test_secondary_rate_limit_waits_retry_after_then_succeeds(app_client, github):
    github.fail_next(
        "GET",
        r"^/repos/octo/widgets$",
        403,
        headers={"Retry-After": "7"},
        body={"message": "You have exceeded a secondary rate limit"},
    )
    data = await app_client.installation_api(7).getitem("/repos/octo/widgets")
    assert data["full_name"] == "octo/widgets"
    assert app_client.sleeps == [7.0]


async def test_server_errors_back_off_then_give_up(app_client, github):
    github.fail_next("GET", r"^/repos/octo/widgets$", 502, times=10)
    with pytest.raises(gidgethub.GitHubBroken):
        await app_client.installation_api(7).getitem("/repos/octo/widgets")
    assert app_client.sleeps == [0.5, 1.0, 2.0]
    assert len(github.calls("GET", r"^/repos/octo/widgets$")) == 4


@pytest.mark.parametrize(
    ("status", "headers", "attempt", "expected"),
    [
        (403, {"retry-after": "30"}, 1, 30.0),
        (429, {"Retry-After": "2"}, 1, 2.0),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1010"}, 1, 11.0),
        (403, {}, 1, None),  # a plain permission error is not retried
        (429, {}, 2, 120.0),
        (500, {}, 1, 0.5),
        (503, {}, 3, 2.0),
        (503, {}, 4, None),  # attempts exhausted
        (404, {}, 1, None),
        (422, {}, 1, None),
    ],
)
def test_retry_delay(status, headers, attempt, expected):
    exc = gidgethub.HTTPException(http.HTTPStatus(status), headers=headers)
    assert retry_delay(exc, attempt, now=1000.0) == expected
