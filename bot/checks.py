"""What `cockpit check-config` and `cockpit serve` check before they start: each check is one
line, and a problem says its cause and its fix.

Offline: the settings' syntax and what each configured provider needs set. Live: git on PATH,
the data directory writable, the database reachable (and its schema version), each configured
provider's key and endpoint (one probe per provider: `MODEL_PROBES`), the GitHub App's auth.

How serious a finding is, one rule for every command that checks (`serve`, `check-config`,
`migrate`, `stats`): a problem (✗) stops what needs it, with exit code 2 when a setting must
change (a value, a key, a file in the way) and 1 when something only does not answer
(Postgres, GitHub, a model endpoint, a port another program holds); a warning (!) is worth
saying and stops nothing. When there are both, a setting to change decides (2).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Mapping
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


def ok(name: str, text: str) -> Check:
    return Check(name, text)


def problem(name: str, text: str, fix: str = "", code: int = EXIT_CONFIG) -> Check:
    """A setting to change (exit 2), unless `code` says it only does not answer."""
    return Check(name, text, fix, problem=True, code=code)


def unanswered(name: str, text: str, fix: str = "") -> Check:
    """Something that only does not answer (exit 1): nothing in the settings to change."""
    return problem(name, text, fix, EXIT_RUNTIME)


def warning(name: str, text: str) -> Check:
    return Check(name, text, warning=True)


def exit_code(checks: list[Check]) -> int:
    """The rule above: 0 when nothing is wrong; 2 when any problem is a setting to change;
    else 1."""
    codes = {c.code for c in checks if c.problem}
    return EXIT_CONFIG if EXIT_CONFIG in codes else max(codes, default=0)


# -- offline -------------------------------------------------------------------------------


def settings_checks(
    env: Mapping[str, str], *, github: bool = True, role: str = "all"
) -> list[Check]:
    return [
        problem(exc.variable, exc.problem) for exc in check_settings(env, github=github, role=role)
    ]


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
            text = say(OPERATOR, "key_missing", variable=missing.variable, provider=provider)
            fix = say(OPERATOR, "key_fix", variable=missing.variable, env_file=env_file_named())
            found.append(problem(provider, text, fix))
        else:
            text = say(
                OPERATOR, "other_key_missing", variables=MODEL_KEYS[provider], provider=provider
            )
            found.append(warning(provider, text))
    return found


# -- live: this machine ------------------------------------------------------------------


def git_check() -> Check:
    if shutil.which("git") is None:
        return problem("git", say(OPERATOR, "no_git"), say(OPERATOR, "no_git_fix"))
    try:
        done = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return problem(
            "git", say(OPERATOR, "git_broken", reason=in_words(exc)), say(OPERATOR, "no_git_fix")
        )
    return ok("git", done.stdout.strip())


def data_dir_check(data_dir: Path) -> Check:
    """Writable where it is, or creatable under its nearest existing parent."""
    path = data_dir.absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    name = "data directory"
    if not existing.is_dir():
        return problem(
            name, say(OPERATOR, "data_not_folder", path=existing), say(OPERATOR, "data_fix")
        )
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".cockpit-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = in_words(exc)
        if existing == path:
            text = say(OPERATOR, "data_unwritable", path=path, reason=reason)
        else:
            text = say(OPERATOR, "data_uncreatable", path=path, parent=existing, reason=reason)
        return problem(name, text, say(OPERATOR, "data_fix"))
    return ok(name, say(OPERATOR, "data_ok", path=path, created=path != existing))


def port_check(host: str, port: int) -> Check:
    """Whether `cockpit serve` can listen there (a port another program holds fails fast)."""
    name = "listen address"
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
    return ok(name, f"{host}:{port} is free")


def listen_problem(host: str, port: int, exc: OSError) -> Check:
    """The port another program holds (it may go away: exit 1), or an address or port this
    machine cannot listen on, with the setting to change."""
    name, reason = "listen address", in_words(exc)
    if exc.errno == errno.EADDRINUSE:
        return unanswered(
            name, say(OPERATOR, "port_in_use", host=host, port=port), say(OPERATOR, "port_fix")
        )
    if isinstance(exc, socket.gaierror):
        return problem(
            name, say(OPERATOR, "host_unknown", host=host, reason=reason), say(OPERATOR, "host_fix")
        )
    text = say(OPERATOR, "cannot_listen", host=host, port=port, reason=reason)
    return problem(
        name, text, say(OPERATOR, "host_fix" if exc.errno == errno.EADDRNOTAVAIL else "port_fix")
    )


async def database_check(settings: Settings, purpose: str = "serve") -> Check:
    """The configured database tried within PG_WAIT seconds (see `database_verdict`)."""
    from bot.backend import reach

    return database_verdict(settings, await reach(settings, PG_WAIT), purpose)


def database_verdict(settings: Settings, found: Reach, purpose: str = "serve") -> Check:
    """What `found` means for `purpose`: `serve` (and `check-config`, which checks serve's
    set-up) needs a database it can use, its schema current or one it applies at start
    (SQLite always, Postgres with COCKPIT_MIGRATE_ON_START=1); `migrate` one it can reach;
    `read` (a reporting command) one whose schema is current, for it changes nothing."""
    name, label = "database", found.label
    if found.timed_out:
        return unanswered(
            name, say(OPERATOR, "pg_timeout", url=label, wait=PG_WAIT), say(OPERATOR, "pg_fix")
        )
    if found.error is not None and not found.shared:
        path = settings.db_path
        kind = "sqlite_not_database" if found.not_database else "sqlite_failed"
        text = say(OPERATOR, kind, path=path, reason=found.error)
        return (
            problem(name, text, say(OPERATOR, "sqlite_fix"))
            if found.refused
            else unanswered(name, text)
        )
    if found.error is not None:
        reason = found.error
        text = say(OPERATOR, "pg_failed", url=label, reason=reason[:300])
        if found.refused:
            return problem(name, text, say(OPERATOR, "pg_auth_fix"))
        return unanswered(name, text, say(OPERATOR, "pg_fix"))
    applies = purpose == "migrate" or (
        purpose == "serve" and (settings.migrate_on_start or not found.shared)
    )
    if found.behind is not None and not applies:
        return problem(name, say(OPERATOR, "behind", label=label, reason=found.behind))
    if not found.shared:
        version = found.version if found.exists else None
        return ok(
            name, say(OPERATOR, "sqlite", label=label, version=version, current=SCHEMA_VERSION)
        )
    if found.behind is not None:
        return ok(name, say(OPERATOR, "pg_migrates", url=label, version=found.version))
    return ok(name, say(OPERATOR, "pg_ok", url=label, version=found.version))


# -- live: the model providers ----------------------------------------------------------


class ProbeFailed(Exception):
    """A provider's endpoint did not accept the key or the model: the cause and the fix."""

    def __init__(self, text: str, fix: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(text)
        self.text, self.fix, self.code = text, fix, code


# A provider's live check: ask its endpoint about the configured model with the configured
# key (no tokens spent); return what answered, or raise ProbeFailed.
ModelProbe = Callable[[Settings], Awaitable[str]]


# What the providers served by an SDK read: the key, the model, the endpoint.
_SDK_VARIABLES = {
    "claude": ("ANTHROPIC_API_KEY", "COCKPIT_CLAUDE_MODEL", "ANTHROPIC_BASE_URL"),
    "codex": ("OPENAI_API_KEY", "COCKPIT_CODEX_MODEL", "OPENAI_BASE_URL"),
}


async def _probe_sdk(settings: Settings, provider: str) -> str:
    """`claude` through the anthropic SDK, `codex` through the openai SDK (the two raise the
    same errors by the same names)."""
    key_variable, model_variable, url_variable = _SDK_VARIABLES[provider]
    if provider == "claude":
        import anthropic as sdk

        model, client = settings.claude_model, sdk.AsyncAnthropic(max_retries=0, timeout=PROBE_WAIT)
    else:
        import openai as sdk

        model, client = settings.codex_model, sdk.AsyncOpenAI(max_retries=0, timeout=PROBE_WAIT)
    where = str(client.base_url).rstrip("/")
    try:
        await client.models.retrieve(model)
    except sdk.AuthenticationError:
        raise ProbeFailed(
            say(OPERATOR, "key_refused", where=where),
            say(OPERATOR, "key_fix", variable=key_variable, env_file=env_file_named()),
        ) from None
    except sdk.NotFoundError:
        raise ProbeFailed(
            say(OPERATOR, "model_unknown", model=model, where=where),
            say(OPERATOR, "model_fix", variable=model_variable),
        ) from None
    except sdk.APIStatusError as exc:
        raise ProbeFailed(
            say(OPERATOR, "endpoint_status", where=where, status=exc.status_code),
            say(OPERATOR, "endpoint_fix", variable=url_variable),
            EXIT_RUNTIME,
        ) from None
    except sdk.APIConnectionError:
        raise ProbeFailed(
            say(OPERATOR, "unreachable", where=where),
            say(OPERATOR, "endpoint_fix", variable=url_variable),
            EXIT_RUNTIME,
        ) from None
    finally:
        await client.close()
    return say(OPERATOR, "model_ok", model=model, where=where)


async def _probe_chat(settings: Settings) -> str:
    """The chat server lists COCKPIT_CHAT_MODEL (bot.agents.providers.probe); its base URL is
    never printed: it may hold a password."""
    from bot.agents.providers import Unanswered, probe

    problems = await probe(settings, "chat")
    if problems:
        code = EXIT_RUNTIME if isinstance(problems[0], Unanswered) else EXIT_CONFIG
        raise ProbeFailed(problems[0], "", code)
    assert settings.chat is not None
    return say(OPERATOR, "model_ok", model=settings.chat.model, where="COCKPIT_CHAT_BASE_URL")


MODEL_PROBES: dict[str, ModelProbe] = {
    "claude": functools.partial(_probe_sdk, provider="claude"),
    "codex": functools.partial(_probe_sdk, provider="codex"),
    "chat": _probe_chat,
}


async def model_check(settings: Settings, provider: str) -> Check:
    probe = MODEL_PROBES.get(provider)
    if probe is None:
        return warning(provider, say(OPERATOR, "no_probe"))
    try:
        async with asyncio.timeout(PROBE_WAIT + 5):
            return ok(provider, await probe(settings))
    except ProbeFailed as exc:
        return problem(provider, exc.text, exc.fix, exc.code)
    except TimeoutError:
        return unanswered(provider, say(OPERATOR, "probe_timeout", wait=PROBE_WAIT))


# -- live: GitHub ---------------------------------------------------------------------------


async def github_check(settings: Settings) -> Check:
    """`GET /app` with the App's JWT: the id, the key and the API URL belong together."""
    import aiohttp
    import gidgethub

    from bot.github import GitHubApp

    name = "GitHub App"
    where = settings.api_url
    try:
        async with (
            asyncio.timeout(PROBE_WAIT),
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_WAIT)) as http,
        ):
            app = await GitHubApp(settings, http).app_api().getitem("/app")
    except gidgethub.HTTPException as exc:
        status = int(exc.status_code)
        text = say(OPERATOR, "app_refused", where=where, status=status)
        if status in (401, 403, 404):  # the App's id, key or API URL is wrong
            return problem(name, text, say(OPERATOR, "app_auth_fix"))
        return unanswered(name, text, say(OPERATOR, "github_fix"))
    except aiohttp.ClientConnectorCertificateError:
        return problem(
            name, say(OPERATOR, "github_untrusted", where=where), say(OPERATOR, "ca_fix")
        )
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        text = say(OPERATOR, "github_unreachable", where=where, reason=in_words(exc))
        return unanswered(name, text, say(OPERATOR, "github_fix"))
    slug = app.get("slug") if isinstance(app, dict) else None
    if settings.app_slug and slug and settings.app_slug != slug:
        return problem(
            name,
            say(OPERATOR, "slug_differs", given=settings.app_slug, slug=slug),
            say(OPERATOR, "slug_fix"),
        )
    return ok(name, say(OPERATOR, "app_ok", slug=slug, app_id=settings.app_id, where=where))


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

    found = settings_checks(env, role=role)
    try:
        settings = load_settings(env, github=False)
    except ConfigError:
        return found  # the general settings are broken: nothing more to check
    try:
        check_role(settings, role)
    except ConfigError as exc:
        found.append(problem(exc.variable, exc.problem))
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
    return found + list(await asyncio.gather(*live))
