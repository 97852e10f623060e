"""`cockpit register`: GitHub's App manifest flow against the GitHub stand-in, in a browser.

Most tests play the browser with an HTTP client (load the page, post its form to the stand-in's
new-App form, click "Create GitHub App"); one drives Debian's `chromium` headless over the
DevTools protocol through the real command, as a person would.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import aiohttp
import pytest

from bot.config import check_settings, load_settings
from bot.register import (
    EXIT_USAGE,
    Options,
    RegisterError,
    Target,
    api_url_for,
    check_org,
    key_path_for,
    manifest_for,
    register,
    shipped_manifest,
    web_url_for,
    webhook_url_for,
)
from bot.standin.github import GitHubStandin
from tests.conftest import wait_for
from tests.tls import private_ca

ROOT = Path(__file__).resolve().parent.parent
COCKPIT = [sys.executable, "-m", "bot"]
PUBLIC_URL = "https://cockpit.example.test"

# -- pure parts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "web", "api"),
    [
        ("https://github.com", "https://github.com", "https://api.github.com"),
        ("https://github.com/", "https://github.com", "https://api.github.com"),
        ("https://api.github.com", "https://github.com", "https://api.github.com"),
        ("https://ghe.example.com", "https://ghe.example.com", "https://ghe.example.com/api/v3"),
        (
            "https://ghe.example.com/api/v3/",
            "https://ghe.example.com",
            "https://ghe.example.com/api/v3",
        ),
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000", "http://127.0.0.1:9000/api/v3"),
    ],
)
def test_api_url_follows_github_and_enterprise_server(typed: str, web: str, api: str) -> None:
    assert web_url_for(typed) == web
    assert api_url_for(web_url_for(typed)) == api


@pytest.mark.parametrize(
    ("web", "org", "form"),
    [
        ("https://github.com", None, "https://github.com/settings/apps/new"),
        ("https://github.com", "acme", "https://github.com/organizations/acme/settings/apps/new"),
        (
            "https://ghe.example.com",
            "a-b",
            "https://ghe.example.com/organizations/a-b/settings/apps/new",
        ),
    ],
)
def test_new_app_form_for_a_user_or_an_organisation(web: str, org: str | None, form: str) -> None:
    assert Target(web, org).form_url == form


@pytest.mark.parametrize(
    ("public", "hook"),
    [
        ("https://cockpit.example.com", "https://cockpit.example.com/webhooks/github"),
        ("https://cockpit.example.com/", "https://cockpit.example.com/webhooks/github"),
        ("https://x.example.com/bot", "https://x.example.com/bot/webhooks/github"),
        ("https://x.example.com/webhooks/github", "https://x.example.com/webhooks/github"),
    ],
)
def test_webhook_url_comes_from_the_public_url(public: str, hook: str) -> None:
    assert webhook_url_for(public) == hook


@pytest.mark.parametrize(
    ("call", "option"),
    [
        (lambda: web_url_for("github.com"), "--github-url"),
        (lambda: web_url_for("ftp://github.com"), "--github-url"),
        (lambda: web_url_for("https://github.com/?x=1"), "--github-url"),
        (lambda: webhook_url_for("cockpit.example.com"), "--public-url"),
        (lambda: check_org("acme/../../evil"), "--org"),
        (lambda: check_org("-acme"), "--org"),
        (lambda: check_org("a" * 40), "--org"),
    ],
)
def test_bad_options_are_refused_naming_the_option(call, option: str) -> None:
    with pytest.raises(RegisterError) as caught:
        call()
    assert caught.value.exit_code == EXIT_USAGE
    assert str(caught.value).startswith(f"cockpit register: {option} ")


def test_manifest_keeps_the_shipped_permissions_and_points_at_us() -> None:
    base = shipped_manifest()
    manifest = manifest_for(base, PUBLIC_URL, "http://127.0.0.1:8725/callback")
    assert manifest["hook_attributes"] == {
        "url": f"{PUBLIC_URL}/webhooks/github",
        "active": True,
    }
    assert manifest["redirect_url"] == "http://127.0.0.1:8725/callback"
    # "Sign in with GitHub" comes back to the server's callback.
    assert manifest["callback_urls"] == [f"{PUBLIC_URL}/auth/github/callback"]
    assert manifest_for(base, f"{PUBLIC_URL}/webhooks/github", "x")["callback_urls"] == [
        f"{PUBLIC_URL}/auth/github/callback"
    ]
    assert manifest["default_permissions"] == {
        "contents": "read",
        "metadata": "read",
        "pull_requests": "write",
        "issues": "write",
        "checks": "write",
    }
    assert base["redirect_url"] != manifest["redirect_url"]  # the shipped one is untouched


def test_without_a_public_url_the_webhook_is_created_inactive() -> None:
    manifest = manifest_for(shipped_manifest(), None, "http://127.0.0.1:1/callback")
    assert manifest["hook_attributes"]["active"] is False
    assert manifest["hook_attributes"]["url"].startswith("https://")


def test_packaged_manifest_is_the_repository_one() -> None:
    assert shipped_manifest() == json.loads((ROOT / "app-manifest.json").read_text())


def test_key_is_written_beside_the_env_file() -> None:
    assert key_path_for(Path("/srv/cockpit.env")) == Path("/srv/cockpit.private-key.pem")
    assert key_path_for(Path("prod.env")) == Path("prod.private-key.pem")


# -- the flow, with an HTTP client as the browser ---------------------------------------------


@pytest.fixture
async def standin():
    """The stand-in as a GitHub Enterprise Server: `--github-url` names its host, the web
    form is at the root, the API (the code exchange) only under /api/v3."""
    github = GitHubStandin()
    await github.start(enterprise=True)
    yield github
    await github.stop()


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((values.get("action", ""), {}))
        elif tag == "input" and self.forms and values.get("name"):
            self.forms[-1][1][values["name"]] = values.get("value", "")


def first_form(page: str, base: str) -> tuple[str, dict[str, str]]:
    parser = _Forms()
    parser.feed(page)
    action, fields = parser.forms[0]
    return urljoin(base, action), fields


async def click_through(http: aiohttp.ClientSession, page_url: str) -> str:
    """What the browser and the person do: load our page, post its form to GitHub, click
    "Create GitHub App". Returns where GitHub sends the browser back (not followed yet)."""
    async with http.get(page_url) as response:
        assert response.status == 200
        action, fields = first_form(await response.text(), page_url)
    async with http.post(action, data=fields) as response:
        assert response.status == 200, await response.text()
        create, fields = first_form(await response.text(), action)
    async with http.post(create, data=fields, allow_redirects=False) as response:
        assert response.status == 302
        return response.headers["Location"]


@dataclass
class Registration:
    task: asyncio.Task
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    page_url: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.out + self.err)


async def start(options: Options) -> Registration:
    out: list[str] = []
    err: list[str] = []
    run = Registration(asyncio.create_task(register(options, out.append, err.append)), out, err)
    await wait_for(lambda: "http://127.0.0.1:" in run.text or run.task.done())
    found = re.search(r"http://127\.0\.0\.1:\d+/", run.text)
    run.page_url = found.group(0) if found else ""
    return run


def options_for(github: GitHubStandin, tmp_path: Path, **changes) -> Options:
    values = {
        "github_url": github.url,
        "public_url": PUBLIC_URL,
        "out": tmp_path / "cockpit.env",
        "port": 0,
        "timeout": 30.0,
        "open_browser": False,
    } | changes
    return Options(**values)


def env_of(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def assert_private(path: Path) -> None:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is not mode 0600"


def assert_credentials(github: GitHubStandin, env_path: Path) -> dict[str, str]:
    [app] = github.created_apps
    env = env_of(env_path)
    key_path = env_path.with_name("cockpit.private-key.pem")
    assert env["GITHUB_APP_ID"] == str(app["id"])
    assert env["GITHUB_APP_SLUG"] == app["slug"]
    assert env["GITHUB_WEBHOOK_SECRET"] == app["webhook_secret"]
    assert env["GITHUB_PRIVATE_KEY_PATH"] == str(key_path)
    assert env["GITHUB_API_URL"] == f"{github.url}/api/v3"  # not github.com: GHES's API path
    assert key_path.read_text() == app["pem"]
    # "Sign in with GitHub": the App's OAuth client.
    assert env["GITHUB_CLIENT_ID"] == app["client_id"]
    assert env["GITHUB_CLIENT_SECRET"] == app["client_secret"]
    assert_private(env_path)
    assert_private(key_path)
    assert check_settings(env) == []  # `cockpit serve` accepts exactly this environment
    assert load_settings(env).app_id == str(app["id"])
    return env


@pytest.mark.parametrize("org", [None, "acme"])
async def test_manifest_flow_writes_credentials_only_the_user_can_read(
    standin: GitHubStandin, tmp_path: Path, org: str | None
) -> None:
    run = await start(options_for(standin, tmp_path, org=org))
    async with aiohttp.ClientSession() as http:
        back = await click_through(http, run.page_url)
        assert back.startswith(f"{run.page_url}callback?")
        async with http.get(back) as response:
            assert response.status == 200
            assert "PR Cockpit is registered" in await response.text()
    assert await run.task == 0
    assert_credentials(standin, tmp_path / "cockpit.env")
    [posted] = standin.manifests
    assert posted["org"] == org
    assert posted["manifest"]["hook_attributes"]["url"] == f"{PUBLIC_URL}/webhooks/github"
    assert posted["manifest"]["default_events"] == shipped_manifest()["default_events"]
    [app] = standin.created_apps
    assert app["owner"]["type"] == ("Organization" if org else "User")
    assert f"{app['html_url']}/installations/new" in run.text
    assert f"--env-file {tmp_path / 'cockpit.env'}" in run.text
    assert app["pem"] not in run.text and app["webhook_secret"] not in run.text


async def test_reused_code_ends_with_a_clear_message(standin: GitHubStandin, tmp_path) -> None:
    run = await start(options_for(standin, tmp_path))
    async with aiohttp.ClientSession() as http:
        back = await click_through(http, run.page_url)
        code = parse_qs(urlsplit(back).query)["code"][0]
        async with http.post(f"{standin.api_url}/app-manifests/{code}/conversions") as response:
            assert response.status == 201  # someone else used it first
        async with http.get(back) as response:
            assert response.status == 200
            assert "did not finish" in await response.text()
    assert await run.task == 1
    assert "expired or was already used" in "\n".join(run.err)
    assert "Traceback" not in run.text
    assert not (tmp_path / "cockpit.env").exists()
    assert not (tmp_path / "cockpit.private-key.pem").exists()


async def test_expired_code_ends_with_a_clear_message(standin: GitHubStandin, tmp_path) -> None:
    standin.manifest_code_ttl = -1.0  # every code is already past its hour
    run = await start(options_for(standin, tmp_path))
    async with aiohttp.ClientSession() as http:
        response = await http.get(await click_through(http, run.page_url))
        assert response.status == 200
    assert await run.task == 1
    assert "HTTP 404" in run.text and "expired or was already used" in run.text
    assert not (tmp_path / "cockpit.env").exists()


async def test_refusal_of_the_exchange_shows_githubs_message(standin: GitHubStandin, tmp_path):
    standin.fail_next("POST", r"/app-manifests/", 422, body={"message": "Validation Failed"})
    run = await start(options_for(standin, tmp_path))
    async with aiohttp.ClientSession() as http:
        await http.get(await click_through(http, run.page_url))
    assert await run.task == 1
    assert "HTTP 422: Validation Failed" in run.text


async def test_an_answer_with_another_state_is_refused(standin: GitHubStandin, tmp_path) -> None:
    run = await start(options_for(standin, tmp_path))
    async with aiohttp.ClientSession() as http:
        back = await click_through(http, run.page_url)
        forged = re.sub(r"state=[^&]+", "state=forged", back)
        async with http.get(forged) as response:
            assert response.status == 400
        async with http.get(back.split("&state=")[0]) as response:  # no state at all
            assert response.status == 400
        assert standin.calls("POST", r"/app-manifests/") == []
        async with http.get(back) as response:  # the real answer still completes
            assert response.status == 200
    assert await run.task == 0


async def test_only_this_machine_names_reach_the_page(standin: GitHubStandin, tmp_path) -> None:
    run = await start(options_for(standin, tmp_path, timeout=5.0))
    async with aiohttp.ClientSession() as http:
        port = urlsplit(run.page_url).port
        async with http.get(run.page_url, headers={"Host": f"rebound.example:{port}"}) as response:
            assert response.status == 421
    run.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run.task


async def test_a_closed_browser_times_out_with_a_clear_message(standin, tmp_path) -> None:
    run = await start(options_for(standin, tmp_path, timeout=0.2))
    assert await run.task == 1
    assert "no answer from GitHub's page" in run.text and "browser closed" in run.text
    assert not (tmp_path / "cockpit.env").exists()


async def test_a_port_in_use_is_a_clear_message(standin: GitHubStandin, tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        err: list[str] = []
        code = await register(options_for(standin, tmp_path, port=port), print, err.append)
    assert code == EXIT_USAGE
    assert f"127.0.0.1:{port}" in err[0] and "--port" in err[0]


async def test_existing_credentials_are_never_overwritten(standin, tmp_path) -> None:
    (tmp_path / "cockpit.private-key.pem").write_text("someone's key")
    err: list[str] = []
    code = await register(options_for(standin, tmp_path), print, err.append)
    assert code == EXIT_USAGE
    assert "already exists" in err[0]
    assert standin.manifests == []


async def test_an_unwritable_out_folder_is_refused_before_github(standin, tmp_path) -> None:
    options = options_for(standin, tmp_path, out=tmp_path / "missing" / "cockpit.env")
    err: list[str] = []
    assert await register(options, print, err.append) == EXIT_USAGE
    assert "--out" in err[0] and "cannot write there" in err[0]
    assert standin.manifests == []


async def test_unreachable_github_is_a_clear_message(standin: GitHubStandin, tmp_path) -> None:
    run = await start(options_for(standin, tmp_path))
    async with aiohttp.ClientSession() as http:
        back = await click_through(http, run.page_url)
        await standin.stop()  # GitHub goes away before the exchange
        async with http.get(back):
            pass
    assert await run.task == 1
    assert "cannot reach" in run.text and "/api/v3" in run.text


# -- the whole flow in a real browser ---------------------------------------------------------


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("chromium is required in CI (apt-get install chromium); .ci/run installs it")
    pytest.skip("chromium is not installed (apt-get install chromium)")


class Chromium:
    """Headless chromium, driven over the DevTools protocol; `trusted_spki` is a server key
    (base64 SHA-256 of its SubjectPublicKeyInfo) whose certificate it accepts unverified."""

    def __init__(self, profile: Path, trusted_spki: str | None = None) -> None:
        self.profile = profile
        self.trusted_spki = trusted_spki
        self.proc: subprocess.Popen | None = None
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.ids = 0

    async def open(self, url: str) -> None:
        self.proc = subprocess.Popen(
            [
                chromium_path(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-port=0",
                *(
                    [f"--ignore-certificate-errors-spki-list={self.trusted_spki}"]
                    if self.trusted_spki
                    else []
                ),
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = self.profile / "DevToolsActivePort"
        await wait_for(lambda: port_file.exists() and port_file.read_text().count("\n") >= 1, 30)
        port = port_file.read_text().splitlines()[0]
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as response:
            pages = [t for t in await response.json() if t["type"] == "page"]
        self.ws = await self.http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)

    async def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page; None while a page is loading."""
        assert self.ws is not None
        self.ids += 1
        await self.ws.send_json(
            {
                "id": self.ids,
                "method": "Runtime.evaluate",
                "params": {"expression": expression, "returnByValue": True},
            }
        )
        while True:
            answer = await self.ws.receive_json(timeout=30)
            if answer.get("id") == self.ids:
                return ((answer.get("result") or {}).get("result") or {}).get("value")

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Browsed:
    """What `cockpit register` did, driven by a person in chromium."""

    returncode: int
    out: str
    err: str
    form_url: str  # where our page sent the browser: GitHub's new-App form


async def register_in_a_browser(
    standin: GitHubStandin,
    work: Path,
    profile: Path,
    options: list[str],
    *,
    env: dict[str, str] | None = None,
    trusted_spki: str | None = None,
) -> Browsed:
    """Run `cockpit register --github-url <stand-in>` from `work`; open its page in headless
    chromium, which posts the manifest to GitHub; click "Create GitHub App"; wait for the
    page that says it is done and for the command to end."""
    chromium_path()
    port = free_port()
    page = f"http://127.0.0.1:{port}/"
    local = ["--port", str(port), "--no-browser", "--timeout", "60"]
    command = subprocess.Popen(
        [*COCKPIT, "register", "--github-url", standin.url, *options, *local],
        cwd=work,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    browser = Chromium(profile, trusted_spki)
    try:

        async def page_served() -> bool:
            try:
                async with aiohttp.ClientSession() as http, http.get(page) as response:
                    return response.status == 200
            except aiohttp.ClientError:
                assert command.poll() is None, command.communicate()
                return False

        await wait_for(page_served, 30)
        await browser.open(page)

        async def on_githubs_form() -> bool:  # our page posted the manifest by itself
            return await browser.evaluate("!!document.getElementById('create')") is True

        await wait_for(on_githubs_form, 30)
        form_url = await browser.evaluate("location.href")
        await browser.evaluate("document.getElementById('create').click()")

        async def back_home() -> bool:
            text = await browser.evaluate("document.body ? document.body.innerText : ''")
            return "PR Cockpit is registered" in (text or "")

        await wait_for(back_home, 30)
        out, err = await asyncio.to_thread(command.communicate, timeout=30)
    finally:
        await browser.close()
        if command.poll() is None:
            command.kill()
            command.wait(10)
    return Browsed(command.returncode, out, err, form_url)


async def test_cockpit_register_in_a_real_browser(standin: GitHubStandin, tmp_path) -> None:
    work = tmp_path / "ops"
    work.mkdir()
    done = await register_in_a_browser(
        standin, work, tmp_path / "profile", ["--public-url", PUBLIC_URL]
    )
    assert done.returncode == 0, done.err
    assert done.form_url == f"{standin.url}/settings/apps/new?state={standin.manifests[0]['state']}"
    env = assert_credentials(standin, work / "cockpit.env")
    out, err = done.out, done.err
    assert "Traceback" not in out + err
    assert f"{standin.created_apps[0]['html_url']}/installations/new" in out
    assert "--env-file cockpit.env" in out
    assert 'GITHUB_PRIVATE_KEY="$(cat cockpit.private-key.pem)"' in out
    assert env["GITHUB_WEBHOOK_SECRET"] not in out + err
    assert "smee.io" not in out  # it has a public address
    assert env["COCKPIT_PUBLIC_URL"] == PUBLIC_URL
    assert standin.created_apps[0]["callback_urls"] == [f"{PUBLIC_URL}/auth/github/callback"]
    assert env["GITHUB_CLIENT_SECRET"] not in out + err


async def test_cockpit_register_on_enterprise_server_with_a_private_ca(tmp_path) -> None:
    """GHES over HTTPS with a certificate from a private CA, an organisation's App, no public
    URL yet (a laptop): the browser trusts the certificate, the command trusts SSL_CERT_FILE."""
    ca = private_ca(tmp_path / "ca")
    ghes = GitHubStandin()
    await ghes.start(enterprise=True, ssl_context=ca.server_context())
    try:
        assert ghes.url.startswith("https://127.0.0.1:")
        work = tmp_path / "ops"
        work.mkdir()
        done = await register_in_a_browser(
            ghes,
            work,
            tmp_path / "profile",
            ["--org", "acme"],
            env={"SSL_CERT_FILE": str(ca.ca_file)},
            trusted_spki=ca.server_spki_sha256(),
        )
    finally:
        await ghes.stop()
    assert done.returncode == 0, done.err
    [posted] = ghes.manifests
    assert (
        done.form_url == f"{ghes.url}/organizations/acme/settings/apps/new?state={posted['state']}"
    )
    assert posted["org"] == "acme" and posted["manifest"]["hook_attributes"]["active"] is False
    [exchange] = ghes.calls("POST", r"/app-manifests/")
    assert exchange["url_path"].startswith("/api/v3/app-manifests/")
    env = assert_credentials(ghes, work / "cockpit.env")
    assert env["GITHUB_API_URL"] == f"{ghes.url}/api/v3"
    assert ghes.created_apps[0]["owner"] == {"login": "acme", "type": "Organization"}
    assert f"{ghes.url}/organizations/acme/settings/apps/" in done.out
    assert "https://smee.io/new" in done.out and "--target http://127.0.0.1:8080" in done.out
    assert "Traceback" not in done.out + done.err


def test_cockpit_register_port_in_use_prints_a_message_not_a_traceback(tmp_path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = subprocess.run(
            [*COCKPIT, "register", "--port", str(busy.getsockname()[1]), "--no-browser"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == EXIT_USAGE
    assert "cannot listen on 127.0.0.1" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
