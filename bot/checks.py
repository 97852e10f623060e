"""What `cockpit check-config` and `cockpit serve` check before they start: each check is one
line, and a problem says its cause and its fix.

Offline: the settings' syntax and what each configured provider needs set. Live: git on PATH,
the data directory writable, the database reachable (and its schema version), each configured
provider's key and endpoint (one probe per provider: `MODEL_PROBES`), the GitHub App's auth.
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

from bot.config import (
    MODEL_KEYS,
    PROVIDERS,
    ConfigError,
    Settings,
    check_settings,
    missing_model_key,
)
from bot.texts import catalogue

EXIT_CONFIG, EXIT_RUNTIME = 2, 1
PG_WAIT = 5.0  # seconds a start-up waits for Postgres before it says it cannot reach it
PROBE_WAIT = 15.0  # seconds for a model endpoint or GitHub to answer a check


def say(kind: str, **context: object) -> str:
    return catalogue("cli/messages.txt.j2", kind, **context)


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
        return f"{mark} {self.name}: {self.text}{fix}"


def ok(name: str, text: str) -> Check:
    return Check(name, text)


def problem(name: str, text: str, fix: str = "", code: int = EXIT_CONFIG) -> Check:
    return Check(name, text, fix, problem=True, code=code)


def exit_code(checks: list[Check]) -> int:
    """0 when nothing is wrong; 2 when any problem is a setting to change; else 1."""
    codes = {c.code for c in checks if c.problem}
    return EXIT_CONFIG if EXIT_CONFIG in codes else max(codes, default=0)


def _redact(text: str, settings: Settings | None) -> str:
    for secret in sorted(settings.secrets() if settings else [], key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


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
            text = say("key_missing", variable=missing.variable, provider=provider)
            found.append(problem(provider, text, say("key_fix", variable=missing.variable)))
        else:
            text = say("other_key_missing", variables=MODEL_KEYS[provider], provider=provider)
            found.append(Check(provider, text, warning=True))
    return found


# -- live: this machine ------------------------------------------------------------------


def git_check() -> Check:
    if shutil.which("git") is None:
        return problem("git", say("no_git"), say("no_git_fix"))
    try:
        done = subprocess.run(
            ["git", "--version"], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return problem("git", say("git_broken", reason=exc.__class__.__name__), say("no_git_fix"))
    return ok("git", done.stdout.strip())


def data_dir_check(data_dir: Path) -> Check:
    """Writable where it is, or creatable under its nearest existing parent."""
    path = data_dir.absolute()
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    name = "data directory"
    if not existing.is_dir():
        return problem(name, say("data_not_folder", path=existing), say("data_fix"))
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".cockpit-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return problem(
            name, say("data_unwritable", path=existing, reason=exc.strerror), say("data_fix")
        )
    return ok(name, say("data_ok", path=path, created=path != existing))


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
    if exc.errno == errno.EADDRINUSE:
        return problem(
            "listen address",
            say("port_in_use", host=host, port=port),
            say("port_fix"),
            code=EXIT_RUNTIME,
        )
    reason = exc.strerror or exc.__class__.__name__
    return problem(
        "listen address",
        say("cannot_listen", host=host, port=port, reason=reason),
        say("port_fix"),
    )


async def database_check(settings: Settings) -> Check:
    """SQLite: where the file is (`serve` applies its schema itself). Postgres: a connection
    within PG_WAIT seconds, then the schema's version against this release's."""
    from bot.backend import reach

    name, found = "database", await reach(settings, PG_WAIT)
    shown = found.label
    if not found.shared:
        return ok(name, say("sqlite", path=settings.db_path.absolute(), exists=found.exists))
    if found.timed_out:
        return problem(
            name, say("pg_timeout", url=shown, wait=PG_WAIT), say("pg_fix"), EXIT_RUNTIME
        )
    if found.error is not None:
        reason = _redact(found.error, settings)
        return problem(
            name,
            say("pg_failed", url=shown, reason=reason[:300]),
            say("pg_auth_fix" if found.refused else "pg_fix"),
            EXIT_CONFIG if found.refused else EXIT_RUNTIME,
        )
    if found.behind is not None:
        if settings.migrate_on_start:  # `serve` applies the missing steps itself
            return ok(name, say("pg_migrates", url=shown, version=found.version))
        return problem(name, say("pg_behind", url=shown, reason=found.behind))
    return ok(name, say("pg_ok", url=shown, version=found.version))


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
            say("key_refused", where=where), say("key_fix", variable=key_variable)
        ) from None
    except sdk.NotFoundError:
        raise ProbeFailed(
            say("model_unknown", model=model, where=where),
            say("model_fix", variable=model_variable),
        ) from None
    except sdk.APIStatusError as exc:
        raise ProbeFailed(
            say("endpoint_status", where=where, status=exc.status_code),
            say("endpoint_fix", variable=url_variable),
            EXIT_RUNTIME,
        ) from None
    except sdk.APIConnectionError:
        raise ProbeFailed(
            say("unreachable", where=where),
            say("endpoint_fix", variable=url_variable),
            EXIT_RUNTIME,
        ) from None
    finally:
        await client.close()
    return say("model_ok", model=model, where=where)


async def _probe_chat(settings: Settings) -> str:
    """The chat server lists COCKPIT_CHAT_MODEL (bot.agents.providers.probe); its base URL is
    never printed: it may hold a password."""
    from bot.agents.providers import probe

    problems = await probe(settings, "chat")
    if problems:
        raise ProbeFailed(problems[0], "")
    assert settings.chat is not None
    return say("model_ok", model=settings.chat.model, where="COCKPIT_CHAT_BASE_URL")


MODEL_PROBES: dict[str, ModelProbe] = {
    "claude": functools.partial(_probe_sdk, provider="claude"),
    "codex": functools.partial(_probe_sdk, provider="codex"),
    "chat": _probe_chat,
}


async def model_check(settings: Settings, provider: str) -> Check:
    probe = MODEL_PROBES.get(provider)
    if probe is None:
        return Check(provider, say("no_probe"), warning=True)
    try:
        async with asyncio.timeout(PROBE_WAIT + 5):
            return ok(provider, await probe(settings))
    except ProbeFailed as exc:
        return problem(provider, exc.text, exc.fix, exc.code)
    except TimeoutError:
        return problem(provider, say("probe_timeout", wait=PROBE_WAIT), "", EXIT_RUNTIME)


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
        text = say("app_refused", where=where, status=status)
        if status in (401, 403, 404):  # the App's id, key or API URL is wrong
            return problem(name, text, say("app_auth_fix"))
        return problem(name, text, say("github_fix"), EXIT_RUNTIME)
    except aiohttp.ClientConnectorCertificateError:
        return problem(name, say("github_untrusted", where=where), say("ca_fix"))
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        return problem(
            name,
            say("github_unreachable", where=where, reason=exc.__class__.__name__),
            say("github_fix"),
            EXIT_RUNTIME,
        )
    slug = app.get("slug") if isinstance(app, dict) else None
    if settings.app_slug and slug and settings.app_slug != slug:
        return problem(
            name, say("slug_differs", given=settings.app_slug, slug=slug), say("slug_fix")
        )
    return ok(name, say("app_ok", slug=slug, app_id=settings.app_id, where=where))


# -- together ---------------------------------------------------------------------------------


async def check_everything(env: Mapping[str, str], *, offline: bool) -> list[Check]:
    """Every check `cockpit check-config` runs, in the order it prints them."""
    from bot.config import load_settings

    found = settings_checks(env)
    try:
        settings = load_settings(env, github=False)
    except ConfigError:
        return found  # the general settings themselves are broken: nothing more to check
    found += model_key_checks(settings, env)
    if offline:
        return found
    found += [git_check(), data_dir_check(settings.data_dir)]
    # The default reviewer first, then every other provider whose key is set.
    providers = [settings.provider, *(p for p in PROVIDERS if p != settings.provider)]
    live: list[Awaitable[Check]] = [database_check(settings)]
    live += [model_check(settings, p) for p in providers if not missing_model_key(p, env)]
    # Without the App's settings (listed above) GitHub cannot be asked.
    with contextlib.suppress(ConfigError):
        live.append(github_check(load_settings(env)))
    found += await asyncio.gather(*live)
    return found
