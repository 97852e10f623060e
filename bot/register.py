"""`cockpit register`: create the GitHub App by its manifest flow and write its credentials."""

from __future__ import annotations

import asyncio
import copy
import hmac
import json
import os
import re
import secrets
import sys
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlencode, urlsplit

import aiohttp
from aiohttp import web

from bot.auth.oauth import CALLBACK_PATH
from bot.config import DEFAULT_API_URL
from bot.texts import OPERATOR, render, say

GITHUB_WEB_URL = "https://github.com"
DEFAULT_PORT = 8725
DEFAULT_TIMEOUT = 900.0
MANIFEST = "app-manifest.json"
EXIT_FAILED = 1
EXIT_USAGE = 2
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$")
_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class RegisterError(Exception):
    """Ends `cockpit register` with the message `register.KIND` of templates/text/operator.toml."""

    def __init__(self, kind: str, exit_code: int = EXIT_FAILED, **context: Any) -> None:
        self.exit_code = exit_code
        super().__init__(say(OPERATOR, f"register.{kind}", **context))


@dataclass(frozen=True)
class Options:
    github_url: str = GITHUB_WEB_URL
    org: str | None = None
    public_url: str | None = None
    out: Path = Path("cockpit.env")
    port: int = DEFAULT_PORT
    timeout: float = DEFAULT_TIMEOUT
    open_browser: bool = True


@dataclass(frozen=True)
class Target:
    """Where the App is created: GitHub's web URL (github.com or a GHES host) and the owner."""

    web_url: str
    org: str | None = None

    @property
    def api_url(self) -> str:
        return api_url_for(self.web_url)

    @property
    def owner_path(self) -> str:
        return f"/organizations/{self.org}" if self.org else ""

    @property
    def form_url(self) -> str:
        return f"{self.web_url}{self.owner_path}/settings/apps/new"

    @property
    def apps_url(self) -> str:
        return f"{self.web_url}{self.owner_path}/settings/apps"


@dataclass(frozen=True)
class Registered:
    conversion: dict[str, Any]
    env_path: Path
    key_path: Path
    generated_secret: bool


def _site(raw: str, kind: str) -> SplitResult:
    parts = urlsplit(raw.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query or parts.fragment:
        raise RegisterError(kind, EXIT_USAGE, value=raw)
    return parts


def web_url_for(raw: str) -> str:
    """GitHub's web URL from what a user may type: the site, or by mistake its API URL."""
    parts = _site(raw, "bad_github_url")
    if parts.hostname == "api.github.com":
        return GITHUB_WEB_URL
    path = parts.path.rstrip("/").removesuffix("/api/v3")
    return f"{parts.scheme}://{parts.netloc}{path}"


def api_url_for(web_url: str) -> str:
    if urlsplit(web_url).hostname in ("github.com", "www.github.com"):
        return DEFAULT_API_URL
    return f"{web_url.rstrip('/')}/api/v3"


def webhook_url_for(public_url: str) -> str:
    _site(public_url, "bad_public_url")
    base = public_url.strip().rstrip("/")
    return base if base.endswith("/webhooks/github") else f"{base}/webhooks/github"


def check_org(org: str | None) -> str | None:
    if org is not None and not _LOGIN.match(org):
        raise RegisterError("bad_org", EXIT_USAGE, value=org)
    return org


def shipped_manifest() -> dict[str, Any]:
    return json.loads(resources.files("templates").joinpath(MANIFEST).read_text())


def public_base(public_url: str) -> str:
    """The server's base URL from what a user may type: the base, or its webhook URL."""
    return webhook_url_for(public_url).removesuffix("/webhooks/github")


def manifest_for(base: dict[str, Any], public_url: str | None, redirect_url: str) -> dict[str, Any]:
    """Without a public URL the webhook is created inactive (GitHub requires a URL for it).
    With one, "Sign in with GitHub" comes back to `{public URL}/auth/github/callback`."""
    manifest = copy.deepcopy(base)
    manifest["redirect_url"] = redirect_url
    hook = dict(manifest.get("hook_attributes") or {})
    if public_url:
        hook.update(url=webhook_url_for(public_url), active=True)
        manifest["callback_urls"] = [f"{public_base(public_url)}{CALLBACK_PATH}"]
    else:
        hook["active"] = False
    manifest["hook_attributes"] = hook
    return manifest


def key_path_for(env_path: Path) -> Path:
    return env_path.with_name(f"{env_path.stem}.private-key.pem")


def _name(conversion: dict[str, Any]) -> str:
    return conversion.get("name") or conversion["slug"]


def write_private(path: Path, text: str) -> None:
    """0600, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def write_credentials(
    conversion: dict[str, Any], env_path: Path, api_url: str, public_url: str | None = None
) -> Registered:
    """The key first, then the env file that points at it; nothing is overwritten."""
    env_path = env_path.absolute()
    key_path = key_path_for(env_path)
    secret = conversion.get("webhook_secret") or ""
    generated = not secret
    if generated:  # GitHub generates one with the webhook; never leave the server open
        secret = secrets.token_hex(32)
    env_text = render(
        "register/cockpit.env.j2",
        name=_name(conversion),
        html_url=conversion.get("html_url", ""),
        env_name=env_path.name,
        app_id=conversion["id"],
        slug=conversion["slug"],
        webhook_secret=secret,
        key_path=str(key_path),
        api_url=api_url if api_url != DEFAULT_API_URL else "",
        client_id=conversion.get("client_id") or "",
        client_secret=conversion.get("client_secret") or "",
        public_url=public_base(public_url) if public_url else "",
    )
    try:
        write_private(key_path, conversion["pem"])
        write_private(env_path, env_text)
    except OSError as exc:
        raise RegisterError(
            "write_failed",
            html_url=conversion.get("html_url", ""),
            path=exc.filename or env_path,
            reason=exc.strerror or exc.__class__.__name__,
        ) from None
    return Registered(conversion, env_path, key_path, generated)


def check_free(env_path: Path) -> None:
    """Before GitHub creates anything: the files can be written and overwrite nothing."""
    folder = env_path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise RegisterError("bad_out", EXIT_USAGE, value=env_path)
    for path in (env_path, key_path_for(env_path)):
        if path.exists() or path.is_symlink():
            raise RegisterError("exists", EXIT_USAGE, path=path)


async def exchange(http: aiohttp.ClientSession, target: Target, code: str) -> dict[str, Any]:
    """`POST /app-manifests/{code}/conversions`: the App's id, slug, pem and webhook secret."""
    url = f"{target.api_url}/app-manifests/{code}/conversions"
    try:
        async with http.post(url, headers=_HEADERS) as response:
            status = response.status
            try:
                answer = await response.json(content_type=None)
            except ValueError:
                answer = None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise RegisterError(
            "unreachable", api_url=target.api_url, reason=str(exc) or exc.__class__.__name__
        ) from None
    detail = answer.get("message", "") if isinstance(answer, dict) else ""
    context = {"status": status, "detail": detail, "apps_url": target.apps_url}
    if status in (404, 422):
        raise RegisterError("code_rejected", **context)
    if status != 201 or not isinstance(answer, dict) or not _complete(answer):
        raise RegisterError("github_error", **context)
    return answer


def _complete(answer: dict[str, Any]) -> bool:
    """The fields the env file needs, each fit for one `NAME=value` line."""
    needed = [answer.get(key) for key in ("id", "slug", "pem")]
    fields = ("id", "slug", "webhook_secret", "name", "html_url", "client_id", "client_secret")
    lines = [answer.get(key) for key in fields]
    return all(needed) and not any("\n" in str(v) or "\r" in str(v) for v in lines if v)


class ManifestFlow:
    """The two local pages: `/` posts the manifest to GitHub, `/callback` takes the code back."""

    def __init__(self, options: Options, target: Target, http: aiohttp.ClientSession) -> None:
        self.options = options
        self.target = target
        self.http = http
        self.state = secrets.token_urlsafe(24)
        self.port = 0
        self.done: asyncio.Future[Registered] = asyncio.get_running_loop().create_future()
        self._claimed = False

    @property
    def page_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._local_only])
        app.router.add_get("/", self._start)
        app.router.add_get("/callback", self._callback)
        return app

    @web.middleware
    async def _local_only(self, request: web.Request, handler: Any) -> web.StreamResponse:
        # Another site that rebinds its name to 127.0.0.1 must not read the state or post codes.
        if request.host not in (f"127.0.0.1:{self.port}", f"localhost:{self.port}"):
            return _result("misdirected", 421)
        return await handler(request)

    async def _start(self, request: web.Request) -> web.Response:
        redirect_url = f"http://127.0.0.1:{self.port}/callback"
        manifest = manifest_for(shipped_manifest(), self.options.public_url, redirect_url)
        hook = manifest["hook_attributes"]
        return _page(
            "register/start.html.j2",
            org=self.target.org,
            web_url=self.target.web_url,
            webhook_url=hook.get("url", ""),
            webhook_active=hook.get("active", True),
            permissions=sorted((manifest.get("default_permissions") or {}).items()),
            events=manifest.get("default_events") or [],
            form_action=f"{self.target.form_url}?{urlencode({'state': self.state})}",
            manifest=json.dumps(manifest),
        )

    async def _callback(self, request: web.Request) -> web.StreamResponse:
        if self._claimed:
            return _result("finished", 409)
        state = request.query.get("state", "")
        if not hmac.compare_digest(state.encode(), self.state.encode()):
            return _result("state_mismatch", 400)
        code = request.query.get("code", "")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,200}", code):
            return _result("no_code", 400)
        self._claimed = True  # one exchange per run: a code works once
        try:
            conversion = await exchange(self.http, self.target, code)
            registered = write_credentials(
                conversion, self.options.out, self.target.api_url, self.options.public_url
            )
        except RegisterError as exc:
            failed = _result("failed", message=str(exc))
            await _send(request, failed)
            self.done.set_exception(exc)
            return failed
        except Exception as exc:  # a bug: end the command now rather than at its timeout
            self.done.set_exception(exc)
            raise
        page = _result(
            "done",
            name=_name(conversion),
            html_url=conversion.get("html_url", ""),
            env_path=registered.env_path,
            key_path=registered.key_path,
        )
        await _send(request, page)
        self.done.set_result(registered)
        return page


async def _send(request: web.Request, response: web.Response) -> None:
    """Deliver the page before the command (and this server) ends."""
    await response.prepare(request)
    await response.write_eof()


def _result(kind: str, status: int = 200, **context: Any) -> web.Response:
    return _page("register/result.html.j2", status, kind=kind, **context)


def _page(template: str, status: int = 200, **context: Any) -> web.Response:
    return web.Response(
        text=render(template, **context),
        status=status,
        content_type="text/html",
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


async def register(
    options: Options,
    echo: Callable[[str], None] = print,
    complain: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
) -> int:
    try:
        target = Target(web_url_for(options.github_url), check_org(options.org))
        if options.public_url:
            webhook_url_for(options.public_url)
        check_free(options.out.absolute())
        registered = await _run_flow(options, target, echo)
    except RegisterError as exc:
        complain(str(exc))
        return exc.exit_code
    conversion = registered.conversion
    echo(
        say(
            OPERATOR,
            "register.next_steps",
            name=_name(conversion),
            app_id=conversion["id"],
            html_url=conversion.get("html_url", ""),
            env_path=_shown(registered.env_path),
            key_path=_shown(registered.key_path),
            settings_url=f"{target.apps_url}/{conversion['slug']}",
            generated_secret=registered.generated_secret,
            public_url=options.public_url,
            web_url=target.web_url,
        )
    )
    return 0


async def _run_flow(options: Options, target: Target, echo: Callable[[str], None]) -> Registered:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        flow = ManifestFlow(options, target, http)
        runner = web.AppRunner(flow.app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, "127.0.0.1", options.port)
            try:
                await site.start()
            except OSError as exc:
                raise RegisterError(
                    "port_in_use", EXIT_USAGE, port=options.port, reason=exc.strerror or exc
                ) from None
            flow.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            echo(
                say(
                    OPERATOR,
                    "register.open_page",
                    org=target.org,
                    web_url=target.web_url,
                    public_url=options.public_url,
                    page_url=flow.page_url,
                    wait=duration(options.timeout),
                )
            )
            display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
            if options.open_browser and (display or sys.platform in ("darwin", "win32")):
                await asyncio.to_thread(webbrowser.open, flow.page_url)
            try:
                return await asyncio.wait_for(asyncio.shield(flow.done), options.timeout)
            except TimeoutError:
                raise RegisterError(
                    "timed_out", wait=duration(options.timeout), apps_url=target.apps_url
                ) from None
        finally:
            await runner.cleanup()


def run(options: Options) -> int:
    try:
        return asyncio.run(register(options))
    except KeyboardInterrupt:
        print(say(OPERATOR, "register.interrupted"), file=sys.stderr)
        return 130


def duration(seconds: float) -> str:
    """A wait as people say it: `5 seconds`, `1 minute`, `2 minutes 30 seconds`."""
    whole = round(seconds)
    if seconds < 60:
        return say(
            OPERATOR, "register.seconds", value=f"{seconds:g}" if seconds < 1 else str(whole)
        )
    minutes, rest = divmod(whole, 60)
    return say(OPERATOR, "register.minutes", minutes=minutes, rest=rest)


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
