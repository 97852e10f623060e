"""Process configuration, read once from the environment (and `./cockpit.env`)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tomllib
import urllib.parse
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from bot.redaction import mask, url_passwords
from bot.texts import OPERATOR, say

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_CLAUDE_MODEL = "claude-sonnet-5-5"
DEFAULT_CODEX_MODEL = "gpt-5.3-codex"
PROVIDERS = ("claude", "codex", "chat")  # "the other provider": the first configured one
# What a provider needs set before it can run: any one of these variables.
MODEL_KEYS = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY",),
    "chat": ("COCKPIT_CHAT_BASE_URL",),
}
ENV_FILE = "cockpit.env"  # read from the current folder by every command (`--env-file` too)
DEFAULT_REVIEW_MAX_USD = None  # SPEC: unset = no cap per run (the daily budget still holds)
DEFAULT_DAILY_MAX_USD = 25.0
DEFAULT_DAILY_MAX_RUNS = 200
DEFAULT_MIN_FREE_MB = 1024
DEFAULT_SHUTDOWN_GRACE = 20.0
NO_LIMIT = ("none", "off")  # spelled out to switch a money limit off
MIN_METRICS_TOKEN = 16  # characters: not guessed (and long enough to be redacted anywhere)


class ConfigError(Exception):
    """A missing or malformed setting; the message names the variable. The problem is the
    `why` of templates/cli/config.txt.j2, told with `context`."""

    def __init__(self, variable: str, why: str, **context: object) -> None:
        self.variable = variable
        self.problem = say(OPERATOR, f"config.{why}", **context)
        said = say(OPERATOR, "config.error", variable=variable, problem=self.problem)
        super().__init__(said.strip())


class Secret:
    """A string that never shows itself in repr, str or logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class ChatSettings:
    """The `chat` provider: an OpenAI-compatible Chat Completions endpoint (COCKPIT_CHAT_*)."""

    base_url: str
    model: str
    api_key: Secret | None = field(default=None, repr=False)  # local servers need none
    context_tokens: int | None = None  # the model's context window: what is sent is bounded
    rates: tuple[float, float] | None = None  # USD per million input, output tokens


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    host: str = "0.0.0.0"  # noqa: S104 - a container listens on all interfaces
    port: int = 8080
    api_url: str = DEFAULT_API_URL
    app_id: str | None = None
    private_key: Secret | None = field(default=None, repr=False)
    webhook_secret: Secret | None = field(default=None, repr=False)
    app_slug: str | None = None
    provider: str = "claude"
    claude_model: str = DEFAULT_CLAUDE_MODEL
    codex_model: str = DEFAULT_CODEX_MODEL
    chat: ChatSettings | None = None  # the `chat` provider, when COCKPIT_CHAT_BASE_URL is set
    max_concurrent_reviews: int = 2
    review_max_usd: float | None = DEFAULT_REVIEW_MAX_USD
    daily_max_usd: float | None = DEFAULT_DAILY_MAX_USD
    daily_max_runs: int | None = DEFAULT_DAILY_MAX_RUNS
    min_free_mb: int = DEFAULT_MIN_FREE_MB
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    model_timeout: float | None = None  # per model request; None: each provider's own
    command_prefix: str = "/cockpit"
    database_url: Secret | None = field(default=None, repr=False)  # Postgres; None: SQLite
    worker_timeout: float = 20.0  # Postgres: a worker silent this long is dead
    migrate_on_start: bool = False  # Postgres: `serve` applies missing schema steps itself
    metrics_token: Secret | None = field(default=None, repr=False)  # None: /metrics is open

    @property
    def db_path(self) -> Path:
        return self.data_dir / "cockpit.sqlite3"

    def secrets(self) -> list[str]:
        """Every secret value these settings hold, for `bot.redaction` (the database URL's
        password too, wherever it appears)."""
        secrets = [self.private_key, self.webhook_secret, self.database_url, self.metrics_token]
        urls = [self.database_url.reveal()] if self.database_url is not None else []
        if self.chat is not None:
            secrets.append(self.chat.api_key)
            urls.append(self.chat.base_url)  # a gateway's credentials in the URL
        passwords = [part for url in urls for part in url_passwords(url)]
        return [s.reveal() for s in secrets if s is not None] + passwords


def settings_secrets(env: Mapping[str, str]) -> list[str]:
    """Every secret the settings in `env` hold (`Settings.secrets`: the App's key read from
    its file too), each setting read on its own: a bad value, or an App key a command never
    reads, hides none of the others."""
    parsers = _GENERAL | _GITHUB
    read = {}
    for name in ("private_key", "webhook_secret", "database_url", "metrics_token", "chat"):
        with contextlib.suppress(ConfigError):
            read[name] = parsers[name](env)
    return Settings(data_dir=Path(), **read).secrets()


def shown_url(url: str) -> str:
    """A URL fit to print: its user-info (if any) replaced by `***`."""
    return mask(url, [])


def _private_key(env: Mapping[str, str]) -> Secret:
    text = env.get("GITHUB_PRIVATE_KEY")
    variable = "GITHUB_PRIVATE_KEY"
    if not text:
        path = env.get("GITHUB_PRIVATE_KEY_PATH")
        variable = "GITHUB_PRIVATE_KEY_PATH"
        if not path:
            raise ConfigError("GITHUB_PRIVATE_KEY", "private_key_unset")
        try:
            text = Path(path).expanduser().read_text()
        except (OSError, UnicodeDecodeError) as exc:
            if isinstance(exc, UnicodeDecodeError):
                reason = say(OPERATOR, "config.reason", why="not_text")
            else:
                reason = in_words(exc)
            raise ConfigError(variable, "unreadable", path=repr(path), reason=reason) from None
    text = text.replace("\\n", "\n").strip() + "\n"
    try:
        key = serialization.load_pem_private_key(text.encode(), password=None)
    except (ValueError, TypeError):
        raise ConfigError(variable, "not_pem") from None
    if not isinstance(key, RSAPrivateKey):
        raise ConfigError(variable, "not_rsa")
    return Secret(text)


def _app_id(env: Mapping[str, str]) -> str:
    app_id = env.get("GITHUB_APP_ID", "").strip()
    if not app_id:
        raise ConfigError("GITHUB_APP_ID", "not_set")
    return app_id


# Webhook secrets written as placeholders in examples (deploy/kubernetes/secret.yaml ships
# `change-me`): a server started with one accepts deliveries anyone could sign.
PLACEHOLDER_SECRETS = frozenset(
    {"change-me", "changeme", "change_me", "replace-me", "secret", "your-secret", "…", "..."}
)


def _webhook_secret(env: Mapping[str, str]) -> Secret:
    secret = env.get("GITHUB_WEBHOOK_SECRET")
    if not secret:
        raise ConfigError("GITHUB_WEBHOOK_SECRET", "webhook_secret_unset")
    if secret.strip().casefold() in PLACEHOLDER_SECRETS:
        raise ConfigError("GITHUB_WEBHOOK_SECRET", "webhook_secret_placeholder")
    return Secret(secret)


def _int(env: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, "whole_number", raw=repr(raw)) from None
    if not low <= value <= high:
        raise ConfigError(name, "number_range", low=low, high=high, value=value)
    return value


def _limit(
    env: Mapping[str, str], name: str, default: float | None, *, whole: bool = False
) -> float | None:
    """A positive amount, or `none`/`off` for no limit; unset gives the default."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if raw.casefold() in NO_LIMIT:
        return None
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        raise ConfigError(name, "limit", whole=whole, raw=repr(raw)) from None
    if not value > 0 or value == float("inf"):
        raise ConfigError(name, "limit_positive")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(name, "seconds", raw=repr(raw)) from None
    if not 0 <= value <= 3600:
        raise ConfigError(name, "seconds_range", raw=raw)
    return value


def _directory(env: Mapping[str, str], name: str, default: str) -> Path:
    """A folder, made absolute here, once: a relative one (the default `./data`) means the
    folder the command was started from, whatever folder git or a worker runs in later."""
    raw = (env.get(name) or "").strip() or default
    try:
        return Path(raw).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop; `~user` with no such user
        raise ConfigError(name, "unresolvable", raw=repr(raw), reason=in_words(exc)) from None


def _api_url(env: Mapping[str, str]) -> str:
    url = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise ConfigError("GITHUB_API_URL", "not_url", url=repr(url))
    return url


def _base_url(env: Mapping[str, str], name: str) -> None:
    """The SDKs append their paths to a custom base URL: OpenAI's `/responses` to a root that
    ends in `/v1`, Anthropic's `/v1/messages` to the bare host. The usual slip fails at the
    first review with a 404; here it fails at start with the fix."""
    url = (env.get(name) or "").strip()
    if not url:
        return
    if url.partition("://")[0].lower() not in ("http", "https"):
        raise ConfigError(name, "not_url", url=repr(shown_url(url)))
    _readable(name, url)
    parts = urllib.parse.urlsplit(url)
    if not parts.netloc:
        raise ConfigError(name, "not_url", url=repr(shown_url(url)))
    segments = [s for s in parts.path.split("/") if s]
    if name == "OPENAI_BASE_URL" and "v1" not in segments:
        fixed = url.rstrip("/") + "/v1"
        raise ConfigError(name, "v1_missing", fixed=fixed)
    if name == "ANTHROPIC_BASE_URL" and segments[-1:] == ["v1"]:
        fixed = url.rstrip("/").removesuffix("/v1")
        raise ConfigError(name, "v1_extra", fixed=fixed)


def _readable(name: str, url: str) -> None:
    """`url` as the SDKs' HTTP client reads it (a `/` in a password ends the host there, and
    what follows the `:` is no port), refused naming `name` only: the URL may hold a
    password, and the client's own words quote part of it."""
    import httpx2  # the anthropic and openai SDKs' client; imported only when a URL is set

    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL):
        raise ConfigError(name, "url_unreadable") from None


def missing_model_key(provider: str, env: Mapping[str, str] | None = None) -> ConfigError | None:
    """Which variable to set before `provider` can run here (None: it is set)."""
    env = os.environ if env is None else env
    names = MODEL_KEYS.get(provider, ())
    if not names or any((env.get(name) or "").strip() for name in names):
        return None
    return ConfigError(names[0], "model_key", provider=provider)


def _provider(env: Mapping[str, str]) -> str:
    provider = env.get("COCKPIT_PROVIDER") or "claude"
    if provider not in PROVIDERS:
        raise ConfigError("COCKPIT_PROVIDER", "provider", choices=PROVIDERS)
    return provider


def _chat(env: Mapping[str, str]) -> ChatSettings | None:
    """COCKPIT_CHAT_*: all unset is no `chat` provider; a base URL needs a model and the other
    way round; COCKPIT_PROVIDER=chat needs both."""
    base_url = (env.get("COCKPIT_CHAT_BASE_URL") or "").strip()
    model = (env.get("COCKPIT_CHAT_MODEL") or "").strip()
    if not base_url:
        if model or (env.get("COCKPIT_PROVIDER") or "") == "chat":
            raise ConfigError("COCKPIT_CHAT_BASE_URL", "chat_base_url_unset")
        return None
    if not base_url.startswith(("https://", "http://")):
        # The value may hold credentials (user:password@host): name the variable only.
        raise ConfigError("COCKPIT_CHAT_BASE_URL", "chat_not_url")
    _readable("COCKPIT_CHAT_BASE_URL", base_url)
    if not model:
        raise ConfigError("COCKPIT_CHAT_MODEL", "chat_model_unset")
    key = (env.get("COCKPIT_CHAT_API_KEY") or "").strip()
    context = _int(env, "COCKPIT_CHAT_CONTEXT_TOKENS", 0, low=1024, high=100_000_000) or None
    return ChatSettings(base_url, model, Secret(key) if key else None, context, _rates(env))


def _rates(env: Mapping[str, str]) -> tuple[float, float] | None:
    raw = (env.get("COCKPIT_CHAT_RATES") or "").strip()
    if not raw:
        return None
    parts = [p.strip() for p in raw.split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or not all(0 <= v < float("inf") for v in values):
        raise ConfigError("COCKPIT_CHAT_RATES", "chat_rates", raw=repr(raw))
    return values[0], values[1]


def _prefix(env: Mapping[str, str]) -> str:
    prefix = (env.get("COCKPIT_COMMAND_PREFIX") or "/cockpit").strip()
    if not prefix or any(c.isspace() for c in prefix):
        raise ConfigError("COCKPIT_COMMAND_PREFIX", "prefix")
    return prefix


def _database_url(env: Mapping[str, str]) -> Secret | None:
    url = (env.get("COCKPIT_DATABASE_URL") or "").strip()
    if not url:
        return None
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        # The value may hold a password: name the variable and the scheme only.
        raise ConfigError("COCKPIT_DATABASE_URL", "database_url", scheme=scheme)
    return Secret(url)


def _metrics_token(env: Mapping[str, str]) -> Secret | None:
    token = (env.get("COCKPIT_METRICS_TOKEN") or "").strip()
    if not token:
        return None
    if len(token) < MIN_METRICS_TOKEN or not token.isascii() or not token.isprintable():
        # A short token is guessed; it is a secret all the same: name the variable only.
        raise ConfigError("COCKPIT_METRICS_TOKEN", "metrics_token", least=MIN_METRICS_TOKEN)
    return Secret(token)


_GENERAL = {
    "data_dir": lambda env: _directory(env, "COCKPIT_DATA_DIR", "./data"),
    "host": lambda env: env.get("COCKPIT_HOST") or "0.0.0.0",  # noqa: S104
    "port": lambda env: _int(env, "COCKPIT_PORT", 8080, low=0, high=65535),
    "api_url": _api_url,
    "app_slug": lambda env: env.get("GITHUB_APP_SLUG") or None,
    "provider": _provider,
    "claude_model": lambda env: env.get("COCKPIT_CLAUDE_MODEL") or DEFAULT_CLAUDE_MODEL,
    "codex_model": lambda env: env.get("COCKPIT_CODEX_MODEL") or DEFAULT_CODEX_MODEL,
    "chat": _chat,
    "max_concurrent_reviews": lambda env: _int(
        env, "COCKPIT_MAX_CONCURRENT_REVIEWS", 2, low=1, high=64
    ),
    "review_max_usd": lambda env: _limit(env, "COCKPIT_REVIEW_MAX_USD", DEFAULT_REVIEW_MAX_USD),
    "daily_max_usd": lambda env: _limit(env, "COCKPIT_DAILY_MAX_USD", DEFAULT_DAILY_MAX_USD),
    "daily_max_runs": lambda env: _limit(
        env, "COCKPIT_DAILY_MAX_RUNS", DEFAULT_DAILY_MAX_RUNS, whole=True
    ),
    "min_free_mb": lambda env: _int(
        env, "COCKPIT_MIN_FREE_MB", DEFAULT_MIN_FREE_MB, low=0, high=10**9
    ),
    "shutdown_grace": lambda env: _seconds(
        env, "COCKPIT_SHUTDOWN_GRACE_SECONDS", DEFAULT_SHUTDOWN_GRACE
    ),
    "model_timeout": lambda env: _seconds(env, "COCKPIT_MODEL_TIMEOUT_SECONDS", 0) or None,
    "command_prefix": _prefix,
    "database_url": _database_url,
    "worker_timeout": lambda env: float(_int(env, "COCKPIT_WORKER_TIMEOUT", 20, low=2, high=3600)),
    "migrate_on_start": lambda env: bool(_int(env, "COCKPIT_MIGRATE_ON_START", 0, low=0, high=1)),
    "metrics_token": _metrics_token,
}
_GITHUB = {"app_id": _app_id, "private_key": _private_key, "webhook_secret": _webhook_secret}
# The App's credentials each `serve --role` reads: `web` verifies and stores deliveries (the
# webhook secret), a `worker` calls GitHub as the App (its id and key), `all` does both.
ROLE_GITHUB = {
    "all": tuple(_GITHUB),
    "web": ("webhook_secret",),
    "worker": ("app_id", "private_key"),
}


def _parsers(github: bool, role: str) -> dict:
    if not github:
        return _GENERAL
    return _GENERAL | {name: _GITHUB[name] for name in ROLE_GITHUB[role]}


# Values no setting holds (the SDKs read them) but a slip in which fails fast all the same.
_CHECKED = (
    lambda env: _base_url(env, "OPENAI_BASE_URL"),
    lambda env: _base_url(env, "ANTHROPIC_BASE_URL"),
)


def load_settings(
    env: Mapping[str, str] | None = None, *, github: bool = True, role: str = "all"
) -> Settings:
    """Read settings; raise ConfigError on the first bad value.

    `github=False` skips the App credentials (for commands that never talk to GitHub);
    `role` reads only those a `serve --role` process uses (`ROLE_GITHUB`).
    """
    env = os.environ if env is None else env
    for check in _CHECKED:
        check(env)
    parsers = _parsers(github, role)
    return Settings(**{name: parse(env) for name, parse in parsers.items()})


def check_settings(
    env: Mapping[str, str] | None = None, *, github: bool = True, role: str = "all"
) -> list[ConfigError]:
    """Every problem with the environment, not just the first (for `cockpit check-config`)."""
    env = os.environ if env is None else env
    problems: list[ConfigError] = []
    parsers = _parsers(github, role)
    for parse in (*_CHECKED, *parsers.values()):
        try:
            parse(env)
        except ConfigError as exc:
            problems.append(exc)
    return problems


def read_env_file(path: Path) -> dict[str, str]:
    """`KEY=value` lines as `cockpit register` writes them (and `docker run --env-file`
    reads them), with what people add by hand: comments, `export`, quoted values (a PEM in
    double quotes may span lines). Read by python-dotenv's parser, without `${VAR}`
    expansion: a secret with a `$` in it stays as written. A line it cannot read is a
    ConfigError naming the file and the line (never its text: it may hold a secret)."""
    from dotenv.parser import parse_stream

    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(str(path), "env_file_not_text", line=line) from None
    values = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error or (binding.key is not None and binding.value is None):  # a bare KEY
            said = binding.original.string
            line = binding.original.line + said[: len(said) - len(said.lstrip())].count("\n")
            raise ConfigError(str(path), "env_file_syntax", line=line)
        if binding.key is not None and binding.value is not None:
            values[binding.key] = binding.value
    return values


_env_file_read: Path | None = None  # what `load_env_file` read (one file per process)


def load_env_file(
    path: Path | None, environ: MutableMapping[str, str] | None = None
) -> Path | None:
    """Fill the environment from `path` (default: `./cockpit.env` when it exists), before
    anything reads it (aiohttp reads SSL_CERT_FILE as it is imported). A variable the
    process environment already has wins. Returns the file read, if any."""
    environ = os.environ if environ is None else environ
    if path is None:
        path = Path(ENV_FILE)
        if not path.is_file():
            return None
    try:
        values = read_env_file(path)
    except FileNotFoundError:
        raise ConfigError("--env-file", "env_file_missing", path=path) from None
    except OSError as exc:
        raise ConfigError(str(path), "env_file_unreadable", reason=in_words(exc)) from None
    for key, value in values.items():
        environ.setdefault(key, value)
    global _env_file_read
    _env_file_read = path
    return path


def env_file_named() -> str:
    """The env file a fix tells the user to set a variable in: the one read, else the
    default one."""
    if _env_file_read is None or _env_file_read == Path(ENV_FILE):
        return f"./{ENV_FILE}"
    return str(_env_file_read)


def in_words(exc: BaseException) -> str:
    """What went wrong as a person says it, never Python's name for it: the system's words
    for the first error with an errno among its causes ("Connection refused"), else the
    error's own text."""
    error: BaseException | None = exc
    for _ in range(20):  # a chain of causes is short; a cycle is not followed forever
        if error is None:
            break
        if isinstance(error, socket.gaierror) and error.strerror:
            return error.strerror  # its errno is the resolver's, not the system's
        if isinstance(error, OSError) and error.errno and error.errno > 0:
            return os.strerror(error.errno)
        if isinstance(error, TimeoutError):
            return say(OPERATOR, "config.reason", why="timeout")
        error = _cause(error)
    return " ".join(str(exc).split()) or say(OPERATOR, "config.reason", why="failed")


def _cause(error: BaseException) -> BaseException | None:
    """What `error` came from: its cause or context, the error it wraps (httpcore passes
    it as the argument), or a group's first."""
    if error.__cause__ is not None:
        return error.__cause__
    if error.__context__ is not None and not error.__suppress_context__:
        return error.__context__
    if error.args and isinstance(error.args[0], BaseException):
        return error.args[0]
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return error.exceptions[0]
    return None


@dataclass(frozen=True)
class Variable:
    """One row of the environment table (`cockpit help environment`, the README's)."""

    names: tuple[str, ...]
    meaning: str
    default: str


def environment() -> list[Variable]:
    """Every environment variable the bot reads, from `templates/environment.toml`."""
    data = tomllib.loads(resources.files("templates").joinpath("environment.toml").read_text())
    return [
        Variable(tuple(row["names"]), row["meaning"], row["default"]) for row in data["variable"]
    ]
