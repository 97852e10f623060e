"""What `cockpit check-config` and `cockpit serve` check before they start, one line each."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config import (
    MODEL_KEYS,
    PROVIDERS,
    ConfigError,
    Settings,
    check_settings,
    env_file_named,
    in_words,
    missing_model_key,
)
from bot.records.schema import SCHEMA_VERSION
from bot.redaction import redact
from bot.texts import OPERATOR, say

if TYPE_CHECKING:
    from bot.backend import Reach

EXIT_CONFIG, EXIT_RUNTIME = 2, 1
PG_WAIT = 5.0  # seconds a start-up waits for Postgres before it says it cannot reach it
PROBE_WAIT = 15.0  # seconds for a model endpoint or GitHub to answer a check


@dataclass(frozen=True)
class Check:
    """One thing checked: a line saying what was found, or the problem and its fix."""

    name: str
    text: str
    fix: str = ""
    problem: bool = False
    code: int = EXIT_CONFIG  # a problem's exit code: 2 a setting to change, 1 at run time
    warning: bool = False  # worth saying, not a reason to stop

    def line(self) -> str:
        mark = "✗" if self.problem else "!" if self.warning else "✓"
        fix = f" → {self.fix}" if self.fix else ""
        return redact(f"{mark} {self.name}: {self.text}{fix}")


def ok(name: str, key: str, **values: object) -> Check:
    return Check(name, say(OPERATOR, key, **values))


def problem(name: str, key: str, fix: str = "", code: int = EXIT_CONFIG, **values: object) -> Check:
    """A setting to change (exit 2), unless `code` says it only does not answer; `key` and
    `fix` are the operator's messages, each said with `values`."""
    said = say(OPERATOR, fix, **values) if fix else ""
    return Check(name, say(OPERATOR, key, **values), said, problem=True, code=code)


def unanswered(name: str, key: str, fix: str = "", **values: object) -> Check:
    """Something that only does not answer (exit 1): nothing in the settings to change."""
    return problem(name, key, fix, EXIT_RUNTIME, **values)


def exit_code(checks: list[Check]) -> int:
    """0 when nothing is wrong; 2 when any problem is a setting to change; else 1."""
    codes = {c.code for c in checks if c.problem}
    return EXIT_CONFIG if EXIT_CONFIG in codes else max(codes, default=0)


def model_key_checks(settings: Settings, env: Mapping[str, str]) -> list[Check]:
    """The default provider's key is required; another provider's is optional (it serves
    `codex-review` and a cross-vendor verify pass). `chat` is opt-in: unset, it is not
    mentioned unless it is the default."""
    found = []
    for provider in PROVIDERS:
        missing = missing_model_key(provider, env)
        if missing is None or (provider == "chat" and provider != settings.provider):
            continue
        if provider == settings.provider:
            values = {"variable": missing.variable, "env_file": env_file_named()}
            found.append(problem(provider, "key_missing", "key_fix", provider=provider, **values))
        else:
            text = say(
                OPERATOR, "other_key_missing", variables=MODEL_KEYS[provider], provider=provider
            )
            found.append(Check(provider, text, warning=True))
    return found


# -- live: this machine ------------------------------------------------------------------


def git_check() -> Check:
    if shutil.which("git") is None:
        return problem("git", "no_git", "no_git_fix")
    try:
        done = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return problem("git", "git_broken", "no_git_fix", reason=in_words(exc))
    return Check("git", done.stdout.strip())


def data_dir_check(data_dir: Path) -> Check:
    """Writable where it is, or creatable under its nearest existing parent."""
    path = existing = data_dir.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    name = "data directory"
    if not existing.is_dir():
        return problem(name, "data_not_folder", "data_fix", path=existing)
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".cockpit-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        key = "data_unwritable" if existing == path else "data_uncreatable"
        return problem(name, key, "data_fix", path=path, parent=existing, reason=in_words(exc))
    return ok(name, "data_ok", path=path, created=path != existing)


def port_check(host: str, port: int) -> Check:
    """Whether `cockpit serve` can listen there (a port another program holds fails fast)."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        for family, kind, proto, _, address in infos:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(address)
    except OSError as exc:
        return listen_problem(host, port, exc)
    return Check("listen address", f"{host}:{port} is free")


def listen_problem(host: str, port: int, exc: OSError) -> Check:
    """The port another program holds (it may go away: exit 1), or an address or port this
    machine cannot listen on, with the setting to change."""
    name, values = "listen address", {"host": host, "port": port, "reason": in_words(exc)}
    if exc.errno == errno.EADDRINUSE:
        return unanswered(name, "port_in_use", "port_fix", **values)
    if isinstance(exc, socket.gaierror):
        return problem(name, "host_unknown", "host_fix", **values)
    fix = "host_fix" if exc.errno == errno.EADDRNOTAVAIL else "port_fix"
    return problem(name, "cannot_listen", fix, **values)


async def database_check(settings: Settings, purpose: str = "serve") -> Check:
    from bot.backend import reach

    return database_verdict(settings, await reach(settings, PG_WAIT), purpose)


def database_verdict(settings: Settings, found: Reach, purpose: str = "serve") -> Check:
    """What `found` means for `purpose`: `serve` (and `check-config`, which checks serve's
    set-up) needs a database it can use, its schema current or one it applies at start
    (SQLite always, Postgres with COCKPIT_MIGRATE_ON_START=1); `migrate` one it can reach;
    `read` (a reporting command) one whose schema is current, for it changes nothing."""
    name, label = "database", found.label
    if found.timed_out:
        return unanswered(name, "pg_timeout", "pg_fix", url=label, wait=PG_WAIT)
    if found.error is not None and not found.shared:
        key = "sqlite_not_database" if found.not_database else "sqlite_failed"
        values = {"path": settings.db_path, "reason": found.error}
        if found.refused:
            return problem(name, key, "sqlite_fix", **values)
        return unanswered(name, key, **values)
    if found.error is not None:
        values = {"url": label, "reason": found.error[:300]}
        if found.refused:
            return problem(name, "pg_failed", "pg_auth_fix", **values)
        return unanswered(name, "pg_failed", "pg_fix", **values)
    applies = purpose == "migrate" or (
        purpose == "serve" and (settings.migrate_on_start or not found.shared)
    )
    if found.behind is not None and not applies:
        return problem(name, "behind", label=label, reason=found.behind)
    if not found.shared:
        version = found.version if found.exists else None
        return ok(name, "sqlite", label=label, version=version, current=SCHEMA_VERSION)
    key = "pg_ok" if found.behind is None else "pg_migrates"
    return ok(name, key, url=label, version=found.version)


# -- live: the model providers and GitHub ---------------------------------------------------

# What the providers served by an SDK read: the key, the model, the endpoint.
_SDK_VARIABLES = {
    "claude": ("ANTHROPIC_API_KEY", "COCKPIT_CLAUDE_MODEL", "ANTHROPIC_BASE_URL"),
    "codex": ("OPENAI_API_KEY", "COCKPIT_CODEX_MODEL", "OPENAI_BASE_URL"),
}


async def model_check(settings: Settings, provider: str) -> Check:
    """The provider's endpoint asked about the configured model with the configured key (no
    tokens spent)."""
    try:
        async with asyncio.timeout(PROBE_WAIT + 5):
            if provider == "chat":
                return await _chat_check(settings)
            return await _sdk_check(settings, provider)
    except TimeoutError:
        return unanswered(provider, "probe_timeout", wait=PROBE_WAIT)


async def _sdk_check(settings: Settings, provider: str) -> Check:
    """`claude` through the anthropic SDK, `codex` through the openai SDK (the two raise the
    same errors by the same names)."""
    key, model_variable, url_variable = _SDK_VARIABLES[provider]
    if provider == "claude":
        import anthropic as sdk

        client = sdk.AsyncAnthropic(max_retries=0, timeout=PROBE_WAIT)
    else:
        import openai as sdk

        client = sdk.AsyncOpenAI(max_retries=0, timeout=PROBE_WAIT)
    said = {"model": settings.model(provider), "where": str(client.base_url).rstrip("/")}
    try:
        await client.models.retrieve(said["model"])
    except sdk.AuthenticationError:
        env_file = env_file_named()
        return problem(provider, "key_refused", "key_fix", variable=key, env_file=env_file, **said)
    except sdk.NotFoundError:
        return problem(provider, "model_unknown", "model_fix", variable=model_variable, **said)
    except sdk.APIStatusError as exc:
        return unanswered(
            provider,
            "endpoint_status",
            "endpoint_fix",
            variable=url_variable,
            status=exc.status_code,
            **said,
        )
    except sdk.APIConnectionError:
        return unanswered(provider, "unreachable", "endpoint_fix", variable=url_variable, **said)
    finally:
        await client.close()
    return ok(provider, "model_ok", **said)


async def _chat_check(settings: Settings) -> Check:
    """The chat server lists COCKPIT_CHAT_MODEL (bot.agents.providers.probe); its base URL is
    never printed: it may hold a password."""
    from bot.agents.providers import Unanswered, probe

    if problems := await probe(settings, "chat"):
        code = EXIT_RUNTIME if isinstance(problems[0], Unanswered) else EXIT_CONFIG
        return Check("chat", problems[0], problem=True, code=code)
    return ok("chat", "model_ok", model=settings.model("chat"), where="COCKPIT_CHAT_BASE_URL")


async def github_check(settings: Settings) -> Check:
    """`GET /app` with the App's JWT: the id, the key and the API URL belong together."""
    import aiohttp
    import gidgethub

    from bot.github import GitHubApp

    name, where = "GitHub App", settings.api_url
    try:
        async with (
            asyncio.timeout(PROBE_WAIT),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_WAIT)) as http,
        ):
            app = await GitHubApp(settings, http).app_api().getitem("/app")
    except gidgethub.HTTPException as exc:
        status = int(exc.status_code)
        if status in (401, 403, 404):  # the App's id, key or API URL is wrong
            return problem(name, "app_refused", "app_auth_fix", where=where, status=status)
        return unanswered(name, "app_refused", "github_fix", where=where, status=status)
    except aiohttp.ClientConnectorCertificateError:
        return problem(name, "github_untrusted", "ca_fix", where=where)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return unanswered(
            name, "github_unreachable", "github_fix", where=where, reason=in_words(exc)
        )
    slug = app.get("slug") if isinstance(app, dict) else None
    if settings.app_slug and slug and settings.app_slug != slug:
        return problem(name, "slug_differs", "slug_fix", given=settings.app_slug, slug=slug)
    return ok(name, "app_ok", slug=slug, app_id=settings.app_id, where=where)


async def sign_in_check(settings: Settings) -> Check:
    """ "Sign in with GitHub" (only when GITHUB_CLIENT_ID or GITHUB_CLIENT_SECRET is set): the
    settings it needs, then GitHub accepting the App's OAuth client."""
    import aiohttp

    from bot.auth import missing_settings, oauth

    name, where = "sign-in", settings.github_web_url
    if missing := missing_settings(settings):
        return problem(name, "sign_in_unset", "sign_in_unset_fix", missing=missing)
    try:
        async with (
            asyncio.timeout(PROBE_WAIT),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_WAIT)) as http,
        ):
            accepted = await oauth.client_accepted(http, settings)
    except (oauth.Unreachable, TimeoutError) as exc:
        return unanswered(name, "github_unreachable", "github_fix", where=where, reason=str(exc))
    if not accepted:
        return problem(name, "client_refused", "client_fix", where=where)
    callback = oauth.callback_url(settings)
    return ok(name, "sign_in_ok", client_id=settings.client_id, where=where, callback=callback)


# -- together ---------------------------------------------------------------------------------


async def preflight(
    env: Mapping[str, str],
    role: str = "all",
    listen: tuple[str | None, int | None] | None = None,
    *,
    offline: bool = False,
) -> list[Check]:
    """Every check before a `role` process starts, in the order they print: `serve` gives
    where it will `listen` (that address is checked, and the rest within seconds);
    `check-config` gives none and asks each model endpoint and GitHub as well. `listen`:
    the `--host` and `--port` given (None: the settings')."""
    from bot.backend import check_role
    from bot.config import load_settings

    found = [Check(e.variable, e.problem, problem=True) for e in check_settings(env, role=role)]
    try:
        settings = load_settings(env, github=False)
    except ConfigError:
        return found  # the general settings are broken: nothing more to check
    try:
        check_role(settings, role)
    except ConfigError as exc:
        found.append(Check(exc.variable, exc.problem, problem=True))
    if role != "web":  # a web process runs no model
        found += model_key_checks(settings, env)
    if offline:
        return found
    found += [git_check(), data_dir_check(settings.data_dir)]
    if listen is not None:
        host, port = listen
        found.append(port_check(host or settings.host, settings.port if port is None else port))
    live: list[Awaitable[Check]] = []
    if listen is None or not found[-2].problem:  # serve: no database where no data directory
        live.append(database_check(settings))
    if listen is None:
        # The default reviewer first, then every other provider whose key is set.
        providers = [settings.provider, *(p for p in PROVIDERS if p != settings.provider)]
        live += [model_check(settings, p) for p in providers if not missing_model_key(p, env)]
        # Without the App's settings (listed above) GitHub cannot be asked.
        with contextlib.suppress(ConfigError):
            live.append(github_check(load_settings(env)))
        if settings.client_id or settings.client_secret:
            live.append(sign_in_check(settings))
    return found + list(await asyncio.gather(*live))
