""" "Sign in with GitHub" through a real `cockpit serve`: the link a command replies with, the
GitHub stand-in's authorize page and token endpoint, the callback storing the token sealed and
enqueueing the link's job in one transaction; hostile inputs (a forged, reused or expired
state, another user completing a link, a callback from another browser); sign-out; the
`github_app_authorization` revocation; the token in no log line, page, request body or
database file in plain text. Both backends; GitHub Enterprise Server under /api/v3."""

from __future__ import annotations

import json
import sqlite3
import stat
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import orjson
import pytest

from bot.auth import seal, sign_in_link
from bot.auth.state import CONTEXT as STATE_CONTEXT
from bot.config import load_settings
from bot.standin.github import GitHubStandin
from bot.standin.openapi import OpenAPIValidator
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.backends

ROOT = Path(__file__).resolve().parent.parent
SECRET_KEY = "k" * 16 + "0123456789abcdef0123"
# A job every server has, harmless with a PR it does not know: what a link carries here.
THEN = {"job": "refresh_status", "args": {"pull_id": 987654}, "key": "sign-in-test"}


class Forms(HTMLParser):
    """The forms of a page: action, method and their fields."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        if tag == "form":
            self.forms.append({"action": found.get("action"), "fields": {}})
        elif tag == "input" and self.forms and found.get("name"):
            self.forms[-1]["fields"][found["name"]] = found.get("value") or ""


def forms_of(page: str) -> list[dict]:
    parser = Forms()
    parser.feed(page)
    return parser.forms


class Cockpit:
    """A `cockpit serve` with sign-in set up against the stand-in, and its database."""

    def __init__(self, github: GitHubStandin, tmp: Path, database_url: str | None, **env):
        self.github = github
        self.data_dir = tmp / "data"
        self.database_url = database_url
        self.env = {
            "GITHUB_APP_ID": github.app_id,
            "GITHUB_PRIVATE_KEY": github.private_key_pem,
            "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GITHUB_API_URL": github.api_url,
            "GITHUB_CLIENT_ID": github.oauth.client_id,
            "GITHUB_CLIENT_SECRET": github.oauth.client_secret,
            "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
            **({"COCKPIT_DATABASE_URL": database_url} if database_url else {}),
            **env,
        }
        self.server = ServerProcess(self.env, self.data_dir, tmp / "server.log")
        self.server.env["COCKPIT_PUBLIC_URL"] = self.server.url
        self.env["COCKPIT_PUBLIC_URL"] = self.server.url
        github.oauth.callback_urls = [f"{self.server.url}/auth/github/callback"]

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def settings(self):
        return load_settings({**self.env, "COCKPIT_DATA_DIR": str(self.data_dir)}, github=False)

    def link(self, login: str, then: dict | None = None) -> str:
        return sign_in_link(self.settings, self.github.oauth.user_id(login), then or THEN)

    def log(self) -> str:
        return self.server.log_path.read_text()

    async def rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        if self.database_url is None:
            with sqlite3.connect(self.data_dir / "cockpit.sqlite3") as conn:
                return conn.execute(sql, args).fetchall()
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.database_url) as conn:
            cursor = await conn.execute(sql.replace("?", "%s"), args)
            return await cursor.fetchall()

    async def token_rows(self) -> list[tuple]:
        return await self.rows("SELECT user_id, login, sealed FROM user_tokens ORDER BY user_id")

    async def jobs_of(self, kind: str) -> list[dict]:
        if self.database_url is None:
            found = await self.rows("SELECT key, payload FROM jobs WHERE kind = ?", (kind,))
            return [{"key": key, "payload": json.loads(payload)} for key, payload in found]
        found = await self.rows("SELECT args FROM procrastinate_jobs")
        return [
            {"key": args["key"], "payload": args["payload"]}
            for (args,) in found
            if args["kind"] == kind
        ]


@pytest.fixture
async def cockpit(github, tmp_path, database_url):
    extra = {"COCKPIT_SECRET_KEY": SECRET_KEY} if database_url else {}
    running = Cockpit(github, tmp_path, database_url, **extra)
    await running.server.start()
    yield running
    running.server.terminate()


def browser() -> aiohttp.ClientSession:
    """A browser's cookies (on an IP address host too) and no automatic redirects."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def follow(http: aiohttp.ClientSession, url: str) -> tuple[int, str, str]:
    """GET `url` and follow redirects by hand (each hop a browser's GET); the person clicks
    "Authorize" on GitHub's page when it asks. Returns the last status, page and URL."""
    method, data = "GET", None
    for _ in range(10):
        async with http.request(method, url, data=data, allow_redirects=False) as response:
            page = await response.text()
            if response.status in (301, 302, 303):
                url, method, data = urljoin(url, response.headers["Location"]), "GET", None
                continue
            forms = forms_of(page)
            if response.status == 200 and "/login/oauth/authorize" in url and forms:
                [form] = forms
                url, method, data = urljoin(url, form["action"]), "POST", form["fields"]
                continue
            return response.status, page, url
    raise AssertionError("too many redirects")


def access_tokens(github: GitHubStandin, login: str) -> list[str]:
    tokens = [t for t, grant in github.oauth.access.items() if grant.login == login]
    return tokens + [t for t, grant in github.oauth.refresh.items() if grant.login == login]


def assert_secret_nowhere(cockpit: Cockpit, secrets: list[str], pages: list[str]) -> None:
    """Not in a log line, a page, a body sent to GitHub, nor the SQLite file in plain text."""
    assert secrets
    log = cockpit.log()
    bodies = [
        json.dumps(r["body"])
        for r in cockpit.github.requests
        if r["path"] != "/login/oauth/access_token"  # where a refresh token must go
    ]
    stored = b""
    if cockpit.database_url is None:
        for path in cockpit.data_dir.glob("cockpit.sqlite3*"):
            stored += path.read_bytes()
    for secret in secrets:
        assert secret not in log
        assert all(secret not in page for page in pages)
        assert all(secret not in body for body in bodies)
        assert secret.encode() not in stored


async def test_a_vet_link_signs_in_stores_the_token_sealed_and_enqueues_its_job(
    cockpit: Cockpit, github: GitHubStandin, database_url
):
    if database_url is None:
        # One node without COCKPIT_SECRET_KEY: the server generates its key, mode 0600.
        login = f"{cockpit.url}/auth/github/login"
        async with browser() as http, http.get(login, allow_redirects=False) as response:
            assert response.status == 302
        key_file = cockpit.data_dir / "secret.key"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    then = {**THEN, "back": f"{github.web_url}/acme/widgets/pull/3"}
    link = cockpit.link("alice", then)
    github.web_user = "alice"
    async with browser() as http:
        async with http.get(link, allow_redirects=False) as response:
            assert response.status == 302
            authorize = urlsplit(response.headers["Location"])
            assert response.headers["Referrer-Policy"] == "no-referrer"
        assert f"{authorize.scheme}://{authorize.netloc}" == github.url
        assert authorize.path == "/login/oauth/authorize"
        query = parse_qs(authorize.query)
        assert query["client_id"] == [github.oauth.client_id]
        assert query["redirect_uri"] == [f"{cockpit.url}/auth/github/callback"]
        status, page, at = await follow(http, link)
    assert status == 200, page
    assert at.startswith(f"{cockpit.url}/auth/github/callback?")
    assert "Signed in as @alice" in page and "going ahead" in page
    assert f'href="{github.web_url}/acme/widgets/pull/3"' in page
    [(user_id, login, sealed)] = await cockpit.token_rows()
    assert (user_id, login) == (github.oauth.user_id("alice"), "alice")
    assert github.oauth.exchanges == 1
    jobs = await cockpit.jobs_of("refresh_status")
    assert jobs == [{"key": "sign-in-test", "payload": {"pull_id": 987654}}]
    secrets = access_tokens(github, "alice")
    assert len(secrets) == 2
    assert all(secret.encode() not in bytes(sealed) for secret in secrets)
    [me] = github.calls("GET", r"^/user$")
    assert me["headers"]["Authorization"] == f"Bearer {secrets[0]}"
    assert "signed in" in cockpit.log()
    assert_secret_nowhere(cockpit, [*secrets, github.oauth.client_secret], [page])

    # The same callback again (the link, the code): the state works once.
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 400 and "already used" in page
    assert github.oauth.exchanges == 1
    assert len(await cockpit.jobs_of("refresh_status")) == 1


async def test_a_link_completed_by_another_user_does_nothing(cockpit: Cockpit, github):
    link = cockpit.link("alice")
    github.web_user = "bob"
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 403
    assert "for another GitHub user" in page and "@bob" in page and "Nothing was done" in page
    assert await cockpit.token_rows() == []
    assert await cockpit.jobs_of("refresh_status") == []


async def test_forged_expired_and_foreign_states_are_refused(cockpit: Cockpit, github):
    settings = cockpit.settings
    key = seal.derived(settings, seal.STATE)
    expired = seal.seal_text(
        key,
        orjson.dumps({"n": "n1", "e": time.time() - 1, "u": None, "t": THEN}),
        STATE_CONTEXT,
    )
    other_key = seal.seal_text(
        b"x" * 32,
        orjson.dumps({"n": "n2", "e": time.time() + 600, "u": None, "t": THEN}),
        STATE_CONTEXT,
    )
    async with browser() as http:
        for state, words in [
            ("garbage", "not valid"),
            (other_key, "not valid"),
            (expired, "has expired"),
        ]:
            for path in ("login", "callback"):
                url = f"{cockpit.url}/auth/github/{path}?state={state}&code=abc"
                async with http.get(url, allow_redirects=False) as response:
                    page = await response.text()
                    assert response.status == 400, (path, state)
                    assert words in page
        # A real state whose sign-in this browser did not start (no cookie): refused.
        link = cockpit.link("alice")
        state = parse_qs(urlsplit(link).query)["state"][0]
        url = f"{cockpit.url}/auth/github/callback?state={state}&code=abc"
        async with http.get(url) as response:
            assert response.status == 400 and "another browser" in await response.text()
    assert github.oauth.exchanges == 0
    assert await cockpit.token_rows() == []
    assert await cockpit.jobs_of("refresh_status") == []


async def test_sign_out_revocation_and_the_signout_command_delete_the_token(
    cockpit: Cockpit, github
):
    github.web_user = "alice"
    async with browser() as http:
        status, page, _ = await follow(http, f"{cockpit.url}/auth/github/login")
        assert status == 200 and "Signed in as @alice" in page
        assert len(await cockpit.token_rows()) == 1
        [form] = forms_of(page)
        assert form["action"] == "/auth/logout"
        # Without the page's CSRF token (another site posting): refused.
        async with http.post(f"{cockpit.url}/auth/logout", data={"csrf": "x"}) as response:
            assert response.status == 403
        assert len(await cockpit.token_rows()) == 1
        async with http.post(f"{cockpit.url}/auth/logout", data=form["fields"]) as response:
            assert response.status == 200 and "Signed out" in await response.text()
    assert await cockpit.token_rows() == []

    # Signed in again, then the person revokes the App in their GitHub settings.
    async with browser() as http:
        status, page, _ = await follow(http, f"{cockpit.url}/auth/github/login")
    assert status == 200 and len(await cockpit.token_rows()) == 1
    revoked = github.oauth.revoke("alice")
    data = deliveries.payload("github_app_authorization.revoked")  # GitHub's published shape
    assert revoked["action"] == data["action"] and set(revoked["sender"]) <= set(data["sender"])
    data["sender"].update(login="alice", id=github.oauth.user_id("alice"))
    body = json.dumps(data).encode()
    headers = deliveries.headers("github_app_authorization", body, WEBHOOK_SECRET)
    webhook = f"{cockpit.url}/webhooks/github"
    async with aiohttp.ClientSession() as http, http.post(webhook, data=body, headers=headers) as r:
        assert r.status == 202

    async def deleted() -> bool:
        return await cockpit.token_rows() == []

    await wait_for(deleted, 30)


async def test_sign_in_not_set_up_says_what_to_set(github, tmp_path, database_url):
    running = Cockpit(github, tmp_path, database_url)
    for name in ("GITHUB_CLIENT_ID", "GITHUB_CLIENT_SECRET", "COCKPIT_PUBLIC_URL"):
        running.server.env.pop(name)
    running.server.env["COCKPIT_SECRET_KEY"] = SECRET_KEY
    await running.server.start()
    try:
        login = f"{running.url}/auth/github/login"
        async with browser() as http, http.get(login) as response:
            page = await response.text()
    finally:
        running.server.terminate()
    assert response.status == 503
    for name in ("GITHUB_CLIENT_ID", "GITHUB_CLIENT_SECRET", "COCKPIT_PUBLIC_URL"):
        assert name in page


# -- in a real browser -------------------------------------------------------------------------


@pytest.mark.sqlite_only
async def test_sign_in_from_a_link_in_headless_chromium(cockpit: Cockpit, github, tmp_path):
    """A person opens the bot's link, clicks "Authorize" on GitHub's page, lands on the
    server's page signed in; then signs out from that page."""
    from tests.test_register import Chromium, chromium_path

    chromium_path()
    github.web_user = "alice"
    then = {**THEN, "back": f"{github.web_url}/acme/widgets/pull/3"}
    link = cockpit.link("alice", then)
    browser = Chromium(tmp_path / "profile")
    pages = []
    try:
        await browser.open(link)

        async def on_githubs_page() -> bool:
            return await browser.evaluate("!!document.getElementById('authorize')") is True

        await wait_for(on_githubs_page, 30)
        await browser.evaluate("document.getElementById('authorize').click()")

        async def page_says(words: str) -> bool:
            text = await browser.evaluate("document.body ? document.body.innerText : ''")
            if words in (text or ""):
                pages.append(await browser.evaluate("document.documentElement.outerHTML"))
                return True
            return False

        await wait_for(lambda: page_says("Signed in as @alice"), 30)
        assert await browser.evaluate("location.origin") == cockpit.url
        assert await browser.evaluate("location.pathname") == "/auth/github/callback"
        [(user_id, login, _)] = await cockpit.token_rows()
        assert (user_id, login) == (github.oauth.user_id("alice"), "alice")
        assert await cockpit.jobs_of("refresh_status") == [
            {"key": "sign-in-test", "payload": {"pull_id": 987654}}
        ]
        await browser.evaluate("document.getElementById('signout').click()")
        await wait_for(lambda: page_says("Signed out"), 30)
    finally:
        await browser.close()
    assert await cockpit.token_rows() == []
    assert_secret_nowhere(
        cockpit, [github.oauth.client_secret, *access_tokens(github, "alice")], pages
    )


# -- GitHub Enterprise Server ------------------------------------------------------------------


@pytest.mark.sqlite_only
async def test_sign_in_on_enterprise_server_uses_the_web_host_and_api_v3(tmp_path):
    """GITHUB_API_URL=https://HOST/api/v3: the authorize page and the token endpoint are on
    the web host (GITHUB_WEB_URL defaults to it), `GET /user` under /api/v3."""
    ghes = GitHubStandin(
        validator=OpenAPIValidator.from_file(deliveries.OPENAPI),
        graphql_schema=deliveries.GRAPHQL_SCHEMA,
    )
    await ghes.start(enterprise=True)
    cockpit = Cockpit(ghes, tmp_path, None)
    assert "GITHUB_WEB_URL" not in cockpit.env
    assert cockpit.settings.github_web_url == ghes.url
    await cockpit.server.start()
    try:
        ghes.web_user = "alice"
        async with browser() as http:
            status, page, _ = await follow(http, cockpit.link("alice"))
    finally:
        cockpit.server.terminate()
        await ghes.stop()
    assert status == 200 and "Signed in as @alice" in page
    assert [(r["method"], r["url_path"]) for r in ghes.requests] == [
        ("POST", "/login/oauth/access_token"),
        ("GET", "/api/v3/user"),
    ]
    assert ghes.violations == []
    [(user_id, login, _)] = await cockpit.token_rows()
    assert (user_id, login) == (ghes.oauth.user_id("alice"), "alice")


async def test_the_signout_command_deletes_the_commenters_token(cockpit: Cockpit, github):
    github.web_user = "alice"
    async with browser() as http:
        status, _, _ = await follow(http, f"{cockpit.url}/auth/github/login")
    assert status == 200 and len(await cockpit.token_rows()) == 1
    clone_url = f"{github.url}/acme/widgets.git"
    repo = github.add_repo("acme", "widgets", clone_url=clone_url, permissions={"alice": "write"})
    pull = github.add_pull(repo, 3, head_sha="a" * 40, base_sha="b" * 40, diff="")
    body = json.dumps(github.pull_request_comment(pull, "/cockpit signout", by="alice")).encode()
    headers = deliveries.headers("issue_comment", body, WEBHOOK_SECRET)
    webhook = f"{cockpit.url}/webhooks/github"
    async with aiohttp.ClientSession() as http, http.post(webhook, data=body, headers=headers) as r:
        assert r.status == 202

    def replied() -> bool:
        return any("Signed out" in c["body"] for c in github.issue_comments.values())

    await wait_for(replied, 30)
    assert await cockpit.token_rows() == []


# -- cockpit check-config ------------------------------------------------------------------------


@pytest.mark.sqlite_only
async def test_check_config_asks_github_whether_it_accepts_the_oauth_client(github, tmp_path):
    from tests.test_check_config import app_env
    from tests.test_check_config import cockpit as run

    env = {
        **app_env(github, tmp_path),
        "GITHUB_CLIENT_ID": github.oauth.client_id,
        "GITHUB_CLIENT_SECRET": github.oauth.client_secret,
        "COCKPIT_PUBLIC_URL": "https://cockpit.example.test",
    }
    _, out, err = await run("check-config", env=env, cwd=tmp_path)
    assert (
        f"✓ sign-in: the App's OAuth client {github.oauth.client_id} is accepted at {github.url};"
        " people come back to https://cockpit.example.test/auth/github/callback"
    ) in out.splitlines(), out + err
    wrong = {**env, "GITHUB_CLIENT_SECRET": "0" * 40}
    code, out, err = await run("check-config", env=wrong, cwd=tmp_path)
    assert code == 2
    assert (
        f"✗ sign-in: {github.url} does not accept GITHUB_CLIENT_ID with GITHUB_CLIENT_SECRET"
        " → copy the Client ID from the App's settings on GitHub and generate a new client"
        " secret there"
    ) in out.splitlines(), out + err
    assert "0" * 40 not in out + err and github.oauth.client_secret not in out + err
    unset = {k: v for k, v in env.items() if k != "COCKPIT_PUBLIC_URL"}
    _, out, _ = await run("check-config", env=unset, cwd=tmp_path)
    assert '✗ sign-in: "Sign in with GitHub" also needs COCKPIT_PUBLIC_URL' in out
    _, out, _ = await run("check-config", env=app_env(github, tmp_path), cwd=tmp_path)
    assert "sign-in" not in out  # not set up: nothing to check
