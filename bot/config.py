"""Process configuration, read once from the environment (and `./cockpit.env`)."""

from __future__ import annotations

import io
import os
import re
import socket
import tomllib
import typing
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import MISSING, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from msgspec import Meta

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
NO_LIMIT = ("none", "off")  # spelled out to switch a money limit off
MIN_METRICS_TOKEN = 16  # characters: not guessed (and long enough to be redacted anywhere)
MIN_SECRET_KEY = 32  # characters of COCKPIT_SECRET_KEY (e.g. `openssl rand -hex 32`)


class ConfigError(Exception):
    """A missing or malformed setting; the message names the variable."""

    def __init__(self, variable: str, why: str, **context: object) -> None:
        self.variable = variable
        self.problem = say(OPERATOR, f"config.{why}", **context)
        said = say(OPERATOR, "config.error", variable=variable, problem=self.problem)
        super().__init__(said.strip())


@dataclass(frozen=True)
class Secret:
    """A string that never shows itself in repr, str or logs."""

    value: str = field(repr=False)

    def reveal(self) -> str:
        return self.value


def shown_url(url: str) -> str:
    return mask(url, [])  # its user-info (if any) replaced by `***`


def _private_key(env: Mapping[str, str], variable: str) -> Secret:
    text = env.get(variable)
    if not text:
        path = env.get("GITHUB_PRIVATE_KEY_PATH")
        if not path:
            raise ConfigError(variable, "private_key_unset")
        variable = "GITHUB_PRIVATE_KEY_PATH"
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


def _app_id(env: Mapping[str, str], variable: str) -> str:
    if not (app_id := env.get(variable, "").strip()):
        raise ConfigError(variable, "not_set")
    return app_id


# Webhook secrets written as placeholders in examples (deploy/kubernetes/secret.yaml ships
# `change-me`): a server started with one accepts deliveries anyone could sign.
PLACEHOLDER_SECRETS = frozenset(
    {"change-me", "changeme", "change_me", "replace-me", "secret", "your-secret", "…", "..."}
)


def _webhook_secret(env: Mapping[str, str], variable: str) -> Secret:
    if not (secret := env.get(variable)):
        raise ConfigError(variable, "webhook_secret_unset")
    if secret.strip().casefold() in PLACEHOLDER_SECRETS:
        raise ConfigError(variable, "webhook_secret_placeholder")
    return Secret(secret)


def _directory(env: Mapping[str, str], variable: str) -> Path:
    """A folder, made absolute here, once: a relative one (the default `./data`) means the
    folder the command was started from, whatever folder git or a worker runs in later."""
    raw = (env.get(variable) or "").strip() or "./data"
    try:
        return Path(raw).expanduser().resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop; `~user` with no such user
        raise ConfigError(variable, "unresolvable", raw=repr(raw), reason=in_words(exc)) from None


def _api_url(env: Mapping[str, str], variable: str) -> str:
    url = (env.get(variable) or DEFAULT_API_URL).rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise ConfigError(variable, "not_url", url=repr(url))
    return url


def _base_url(env: Mapping[str, str], variable: str) -> None:
    """The SDKs append their paths to a custom base URL: OpenAI's `/responses` to a root that
    ends in `/v1`, Anthropic's `/v1/messages` to the bare host. The usual slip fails at the
    first review with a 404; here it fails at start with the fix."""
    if not (url := (env.get(variable) or "").strip()):
        return
    if url.partition("://")[0].lower() not in ("http", "https"):
        raise ConfigError(variable, "not_url", url=repr(shown_url(url)))
    _readable(variable, url)
    parts = urllib.parse.urlsplit(url)
    if not parts.netloc:
        raise ConfigError(variable, "not_url", url=repr(shown_url(url)))
    segments = [s for s in parts.path.split("/") if s]
    if variable == "OPENAI_BASE_URL" and "v1" not in segments:
        raise ConfigError(variable, "v1_missing", fixed=url.rstrip("/") + "/v1")
    if variable == "ANTHROPIC_BASE_URL" and segments[-1:] == ["v1"]:
        raise ConfigError(variable, "v1_extra", fixed=url.rstrip("/").removesuffix("/v1"))


def _readable(variable: str, url: str) -> None:
    """`url` as the SDKs' HTTP client reads it (a `/` in a password ends the host there, and
    what follows the `:` is no port), refused naming the variable only: the URL may hold a
    password, and the client's own words quote part of it."""
    import httpx2  # the anthropic and openai SDKs' client; imported only when a URL is set

    try:
        urllib.parse.urlsplit(url).port  # noqa: B018 - raises on a port that is not a number
        httpx2.URL(url)
    except (ValueError, httpx2.InvalidURL):
        raise ConfigError(variable, "url_unreadable") from None


def missing_model_key(provider: str, env: Mapping[str, str] | None = None) -> ConfigError | None:
    env = os.environ if env is None else env
    names = MODEL_KEYS.get(provider, ())
    if not names or any((env.get(name) or "").strip() for name in names):
        return None
    return ConfigError(names[0], "model_key", provider=provider)


def _provider(env: Mapping[str, str], variable: str) -> str:
    if (provider := env.get(variable) or "claude") not in PROVIDERS:
        raise ConfigError(variable, "provider", choices=PROVIDERS)
    return provider


def _chat(env: Mapping[str, str], variable: str) -> ChatSettings | None:
    """All unset is no `chat` provider; a base URL needs a model and the other way round;
    COCKPIT_PROVIDER=chat needs both."""
    base_url = (env.get(variable) or "").strip()
    if not base_url:
        if env.get("COCKPIT_CHAT_MODEL") or (env.get("COCKPIT_PROVIDER") or "") == "chat":
            raise ConfigError(variable, "chat_base_url_unset")
        return None
    if not base_url.startswith(("https://", "http://")):
        # The value may hold credentials (user:password@host): name the variable only.
        raise ConfigError(variable, "chat_not_url")
    _readable(variable, base_url)
    if not (env.get("COCKPIT_CHAT_MODEL") or "").strip():
        raise ConfigError("COCKPIT_CHAT_MODEL", "chat_model_unset")
    values, problems = _read(env, ChatSettings)
    if problems:
        raise problems[0]
    return ChatSettings(**values)


def _rates(env: Mapping[str, str], variable: str) -> tuple[float, float] | None:
    if not (raw := (env.get(variable) or "").strip()):
        return None
    rate = Annotated[float, Meta(ge=0, le=1e15)]
    try:
        return msgspec.convert([r.strip() for r in raw.split(",")], tuple[rate, rate], strict=False)
    except msgspec.ValidationError:
        raise ConfigError(variable, "chat_rates", raw=repr(raw)) from None


def _prefix(env: Mapping[str, str], variable: str) -> str:
    prefix = (env.get(variable) or "/cockpit").strip()
    if not prefix or any(c.isspace() for c in prefix):
        raise ConfigError(variable, "prefix")
    return prefix


def _database_url(env: Mapping[str, str], variable: str) -> Secret | None:
    if not (url := (env.get(variable) or "").strip()):
        return None
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in ("postgresql", "postgres"):
        # The value may hold a password: name the variable and the scheme only.
        raise ConfigError(variable, "database_url", scheme=scheme)
    return Secret(url)


def _secret(env: Mapping[str, str], variable: str) -> Secret | None:
    return Secret(raw) if (raw := (env.get(variable) or "").strip()) else None


def _web_url(env: Mapping[str, str], variable: str) -> str:
    """GitHub's web host (its OAuth pages); "" unset (`Settings.github_web_url` then says it
    from GITHUB_API_URL)."""
    if not (raw := (env.get(variable) or "").strip()):
        return ""
    if not raw.startswith(("https://", "http://")) or not urllib.parse.urlsplit(raw).netloc:
        raise ConfigError(variable, "not_url", url=repr(shown_url(raw)))
    return raw.rstrip("/")


def web_url_from_api(api_url: str) -> str:
    """api.github.com → github.com; `https://HOST/api/v3` → `https://HOST`; any other URL →
    its own origin."""
    parts = urllib.parse.urlsplit(api_url)
    if parts.hostname == "api.github.com":
        return "https://github.com"
    path = parts.path.rstrip("/")
    if path.endswith("/api/v3"):
        return f"{parts.scheme}://{parts.netloc}{path.removesuffix('/api/v3')}"
    return f"{parts.scheme}://{parts.netloc}"


def _public_url(env: Mapping[str, str], variable: str) -> str | None:
    if not (raw := (env.get(variable) or "").strip()):
        return None
    parts = urllib.parse.urlsplit(raw)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.query:
        raise ConfigError(variable, "not_url", url=repr(shown_url(raw)))
    return raw.rstrip("/")


def _logins(env: Mapping[str, str], variable: str) -> frozenset[str]:
    """GitHub logins, separated by commas or spaces, compared without case."""
    raw = (env.get(variable) or "").replace(",", " ").split()
    for login in raw:
        if not _LOGIN.fullmatch(login):
            raise ConfigError(variable, "not_login", login=repr(login[:40]))
    return frozenset(login.casefold() for login in raw)


_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")


def _secret_key(env: Mapping[str, str], variable: str) -> Secret | None:
    if not (key := (env.get(variable) or "").strip()):
        return None
    if len(key) < MIN_SECRET_KEY or not key.isascii() or not key.isprintable():
        raise ConfigError(variable, "secret_key", least=MIN_SECRET_KEY)
    return Secret(key)


def _metrics_token(env: Mapping[str, str], variable: str) -> Secret | None:
    if not (token := (env.get(variable) or "").strip()):
        return None
    if len(token) < MIN_METRICS_TOKEN or not token.isascii() or not token.isprintable():
        # A short token is guessed; it is a secret all the same: name the variable only.
        raise ConfigError(variable, "metrics_token", least=MIN_METRICS_TOKEN)
    return Secret(token)


def from_env(variable: str, default: Any = MISSING, read: Reader | None = None) -> Any:
    """A setting's field: the variable it is read from, and how where its declared type
    (bounds included) does not say all."""
    return field(default=default, metadata={"env": variable, "read": read})


Reader = Callable[[Mapping[str, str], str], Any]  # (the environment, the variable) -> value
Whole = Annotated[int, Meta(ge=1)]
Limit = Annotated[float, Meta(gt=0, le=1e15)] | None  # `none`/`off`: no limit
Seconds = Annotated[float, Meta(ge=0, le=3600)]
WholeSeconds = Annotated[int, Meta(ge=2, le=3600)]
Port = Annotated[int, Meta(ge=0, le=65535)]
Workers = Annotated[int, Meta(ge=1, le=64)]
Megabytes = Annotated[int, Meta(ge=0, le=10**9)]
OneOrZero = Annotated[int, Meta(ge=0, le=1)]
ContextTokens = Annotated[int, Meta(ge=1024, le=100_000_000)]


@dataclass(frozen=True)
class ChatSettings:
    """The `chat` provider: an OpenAI-compatible Chat Completions endpoint."""

    base_url: str = from_env("COCKPIT_CHAT_BASE_URL")
    model: str = from_env("COCKPIT_CHAT_MODEL")
    api_key: Secret | None = from_env("COCKPIT_CHAT_API_KEY", None, _secret)
    # The model's context window: what is sent is bounded.
    context_tokens: ContextTokens | None = from_env("COCKPIT_CHAT_CONTEXT_TOKENS", None)
    rates: tuple[float, float] | None = from_env("COCKPIT_CHAT_RATES", None, _rates)


@dataclass(frozen=True)
class Settings:
    """Every setting, read from the variable its field names; `templates/environment.toml`
    says what each means."""

    data_dir: Path = from_env("COCKPIT_DATA_DIR", read=_directory)
    # A container listens on all interfaces.
    host: str = from_env("COCKPIT_HOST", "0.0.0.0")  # noqa: S104
    port: Port = from_env("COCKPIT_PORT", 8080)
    api_url: str = from_env("GITHUB_API_URL", DEFAULT_API_URL, _api_url)
    app_id: str | None = from_env("GITHUB_APP_ID", None, _app_id)
    private_key: Secret | None = from_env("GITHUB_PRIVATE_KEY", None, _private_key)
    webhook_secret: Secret | None = from_env("GITHUB_WEBHOOK_SECRET", None, _webhook_secret)
    app_slug: str | None = from_env("GITHUB_APP_SLUG", None)
    provider: str = from_env("COCKPIT_PROVIDER", "claude", _provider)
    claude_model: str = from_env("COCKPIT_CLAUDE_MODEL", DEFAULT_CLAUDE_MODEL)
    codex_model: str = from_env("COCKPIT_CODEX_MODEL", DEFAULT_CODEX_MODEL)
    chat: ChatSettings | None = from_env("COCKPIT_CHAT_BASE_URL", None, _chat)
    max_concurrent_reviews: Workers = from_env("COCKPIT_MAX_CONCURRENT_REVIEWS", 2)
    # SPEC: unset is no cap per run (the daily budget still holds).
    review_max_usd: Limit = from_env("COCKPIT_REVIEW_MAX_USD", None)
    daily_max_usd: Limit = from_env("COCKPIT_DAILY_MAX_USD", 25)
    daily_max_runs: Whole | None = from_env("COCKPIT_DAILY_MAX_RUNS", 200)
    min_free_mb: Megabytes = from_env("COCKPIT_MIN_FREE_MB", 1024)
    shutdown_grace: Seconds = from_env("COCKPIT_SHUTDOWN_GRACE_SECONDS", 20)
    # Per model request; 0 or unset: each provider's own.
    model_timeout: Seconds | None = from_env("COCKPIT_MODEL_TIMEOUT_SECONDS", None)
    command_prefix: str = from_env("COCKPIT_COMMAND_PREFIX", "/cockpit", _prefix)
    # Postgres; None: SQLite
    database_url: Secret | None = from_env("COCKPIT_DATABASE_URL", None, _database_url)
    # Postgres: a worker silent this long is dead; `serve` applies missing schema steps itself.
    worker_timeout: WholeSeconds = from_env("COCKPIT_WORKER_TIMEOUT", 20)
    migrate_on_start: OneOrZero = from_env("COCKPIT_MIGRATE_ON_START", 0)
    metrics_token: Secret | None = from_env("COCKPIT_METRICS_TOKEN", None, _metrics_token)
    # "Sign in with GitHub" (bot/auth/): the App's OAuth client, GitHub's web host, this
    # server's public URL, and the key that encrypts user tokens and signs sign-in state.
    client_id: str | None = from_env("GITHUB_CLIENT_ID", None)
    client_secret: Secret | None = from_env("GITHUB_CLIENT_SECRET", None, _secret)
    web_url: str = from_env("GITHUB_WEB_URL", "", _web_url)
    public_url: str | None = from_env("COCKPIT_PUBLIC_URL", None, _public_url)
    secret_key: Secret | None = from_env("COCKPIT_SECRET_KEY", None, _secret_key)
    # The cockpit page (bot/web/): GitHub logins who see every repository.
    operators: frozenset[str] = from_env("COCKPIT_OPERATORS", frozenset(), _logins)

    @property
    def db_path(self) -> Path:
        return self.data_dir / "cockpit.sqlite3"

    @property
    def github_web_url(self) -> str:
        """GITHUB_WEB_URL, or what GITHUB_API_URL says it is."""
        return self.web_url or web_url_from_api(self.api_url)

    def model(self, provider: str) -> str:
        """The model `provider` reviews with ("" for `chat` when it is not set up)."""
        if provider == "chat":
            return self.chat.model if self.chat else ""
        return self.claude_model if provider == "claude" else self.codex_model

    def secrets(self) -> list[str]:
        """Every secret value these settings hold, for `bot.redaction` (the database URL's
        password too, wherever it appears)."""
        secrets = [self.private_key, self.webhook_secret, self.database_url, self.metrics_token]
        secrets += [self.client_secret, self.secret_key]
        urls = [self.database_url.reveal()] if self.database_url is not None else []
        if self.chat is not None:
            secrets.append(self.chat.api_key)
            urls.append(self.chat.base_url)  # a gateway's credentials in the URL
        passwords = [part for url in urls for part in url_passwords(url)]
        return [s.reveal() for s in secrets if s is not None] + passwords


# The App's credentials each `serve --role` reads: `web` verifies and stores deliveries (the
# webhook secret), a `worker` calls GitHub as the App (its id and key), `all` does both.
ROLE_GITHUB = {
    "all": ("app_id", "private_key", "webhook_secret"),
    "web": ("webhook_secret",),
    "worker": ("app_id", "private_key"),
}
SECRETS = (
    "private_key",
    "webhook_secret",
    "database_url",
    "metrics_token",
    "chat",
    "client_secret",
    "secret_key",
)


def _read(
    env: Mapping[str, str], shape: type, names: Iterable[str] | None = None
) -> tuple[dict[str, Any], list[ConfigError]]:
    """The settings of `shape` among `names` (default: all), each read on its own, and a
    ConfigError for each one that is wrong."""
    hints = typing.get_type_hints(shape, include_extras=True)
    values, problems = {}, []
    for f in fields(shape):
        if names is not None and f.name not in names:
            continue
        variable, read = f.metadata["env"], f.metadata["read"]
        raw = (env.get(variable) or "").strip()
        try:
            if read is not None:
                values[f.name] = read(env, variable)
            elif raw:
                values[f.name] = _typed(variable, raw, hints[f.name])
        except ConfigError as exc:
            problems.append(exc)
    return values, problems


def _typed(variable: str, raw: str, shape: Any) -> Any:
    """`raw` as its declared type says ("8080" is 8080; `none` or `off` no limit where None
    is allowed), or ConfigError saying what it takes."""
    optional = type(None) in typing.get_args(shape)
    if optional and raw.casefold() in NO_LIMIT:
        return None
    try:
        value = msgspec.convert(raw, shape, strict=False)
    except msgspec.ValidationError:
        pass
    else:
        return None if optional and value == 0 else value  # 0 seconds: each provider's own
    number = msgspec.inspect.type_info(shape)
    while not isinstance(number, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        number = getattr(number, "type", None) or number.types[0]
    whole, values = isinstance(number, msgspec.inspect.IntType), {"optional": optional}
    try:
        value = msgspec.convert(raw, int if whole else float, strict=False)
    except msgspec.ValidationError:
        raise ConfigError(variable, "number", whole=whole, raw=repr(raw), **values) from None
    bounds = {k: getattr(number, k) for k in ("ge", "gt", "le") if getattr(number, k) is not None}
    raise ConfigError(variable, "number_range", whole=whole, value=value, **bounds, **values)


def settings_secrets(env: Mapping[str, str]) -> list[str]:
    """Every secret the settings in `env` hold (`Settings.secrets`: the App's key read from
    its file too), each setting read on its own: a bad value, or an App key a command never
    reads, hides none of the others."""
    values = {}
    for name in SECRETS:
        values |= _read(env, Settings, (name,))[0]
    return Settings(data_dir=Path(), **values).secrets()


def load_settings(
    env: Mapping[str, str] | None = None, *, github: bool = True, role: str = "all"
) -> Settings:
    """The settings, or the first ConfigError. `github=False` skips the App credentials (for
    commands that never talk to GitHub); `role` reads only those its process uses."""
    values, problems = _settings(env, github, role)
    if problems:
        raise problems[0]
    return Settings(**values)


def check_settings(
    env: Mapping[str, str] | None = None, *, github: bool = True, role: str = "all"
) -> list[ConfigError]:
    return _settings(env, github, role)[1]


def _settings(
    env: Mapping[str, str] | None, github: bool, role: str
) -> tuple[dict[str, Any], list[ConfigError]]:
    env = os.environ if env is None else env
    problems = []
    # Values no setting holds (the SDKs read them) but a slip in which fails fast all the same.
    for variable in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        try:
            _base_url(env, variable)
        except ConfigError as exc:
            problems.append(exc)
    app = ROLE_GITHUB[role] if github else ()
    names = [f.name for f in fields(Settings) if f.name in app or f.name not in ROLE_GITHUB["all"]]
    values, found = _read(env, Settings, names)
    if role != "all" and values.get("client_id") and values.get("secret_key") is None:
        # A generated key lives in one process's data directory: each role would have its own.
        found.append(ConfigError("COCKPIT_SECRET_KEY", "secret_key_unset", role=role))
    return values, problems + found


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
    """The env file a fix says to set a variable in: the one read, else the default one."""
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
    """One row of `cockpit help environment` and the README's table."""

    names: tuple[str, ...]
    meaning: str
    default: str


def environment() -> list[Variable]:
    """`templates/environment.toml`'s rows; a row that says no default shows the declared ones."""
    declared = {f.metadata["env"]: f.default for f in fields(Settings) if f.default is not None}
    data = tomllib.loads(resources.files("templates").joinpath("environment.toml").read_text())
    rows = []
    for row in data["variable"]:
        names = tuple(row["names"])
        default = row.get("default") or ", ".join(f"`{declared[name]}`" for name in names)
        rows.append(Variable(names, row["meaning"], default))
    return rows
