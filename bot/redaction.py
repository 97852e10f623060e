"""`redact`: every secret this process knows, and any URL's user-info, masked before a text
is logged, shown on GitHub or printed."""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from collections.abc import Iterable, Mapping

MASK = "***"
SHORTEST = 8  # shorter values (`test`, `none`, `ollama`: local servers' dummy keys) hide nothing
ANYWHERE = 12  # a shorter secret is masked only as a whole word (`gw-erv-7` leaves `server`)

# The environment's secrets, known by their names' endings: those this release reads (the
# SDKs read the model keys themselves) and those a later one adds alike. And the URLs, whose
# user-info may hold a password.
_SECRET_NAME = re.compile(r"(?:COCKPIT|GITHUB|ANTHROPIC|OPENAI)_\w*(?:KEY|SECRET|TOKEN|PASSWORD)")
_URL_NAME = re.compile(r"(?:COCKPIT|GITHUB|ANTHROPIC|OPENAI)_\w*URL")

# Token shapes masked even when nobody registered them: GitHub tokens (ghs_, ghp_, gho_, ghu_,
# ghr_, github_pat_), OpenAI/Anthropic keys, bearer/token/basic authorisation values and PEM
# blocks; each starts where a word starts (`task-management` holds no `sk-` key).
_SHAPES = (
    r"(?<![A-Za-z0-9_])(?:gh[psour]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|sk-[A-Za-z0-9_\-]{16,}|(?i:(?:bearer|token|basic)\s+)[A-Za-z0-9._\-+/=]{16,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
)
# `scheme://user:password@host` (or `scheme://token@host`): everything up to the last `@`
# before the URL ends (whitespace, a quote, `<>`), for a password may hold `/`, `?` or `#`
# (`postgresql://cockpit:q8/Zx@db`) or `@`. That needs the `user:` in front; `host:port/path@x`
# (a port, then a path holding an `@`) is a URL without user-info. A token without a password
# ends at the authority's end, as the host does (`https://github.com/o/r/@x` holds none).
_USER_INFO = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]*://)"
    r"(?:[^\s/?#@:\[\]\"'<>\\]*:(?!\d{1,5}(?:[/?#]|$))[^\s\"'<>\\]*"
    r"|[^\s/?#\"'<>\\]+)@"
)


# What this process knows to mask: a new set at each change, never changed in place (a
# thread's log line may be reading it).
_secrets: frozenset[str] = frozenset()


def mask(text: str, secrets: Iterable[str]) -> str:
    return _masked(text, _pattern(frozenset(s for s in secrets if _maskable(s))))


def redact(text: str) -> str:
    return _masked(text, _pattern(_secrets))


def register(value: str | None) -> None:
    """Also as JSON writes it (escaped in a log line)."""
    global _secrets
    if value and _maskable(value):
        _secrets |= {value} | {json.dumps(value, ensure_ascii=a)[1:-1] for a in (True, False)}


def register_all(values: Iterable[str]) -> None:
    for value in values:
        register(value)


def environment_secrets(env: Mapping[str, str]) -> list[str]:
    """Each variable named as a key, secret, token or password, and each URL's password."""
    found = [v.strip() for name, v in env.items() if _SECRET_NAME.fullmatch(name) and v.strip()]
    urls = [url for name, url in env.items() if _URL_NAME.fullmatch(name)]
    return found + [part for url in urls for part in url_passwords(url)]


def url_passwords(url: str) -> list[str]:
    """The user-info of `url` and its password, as written and percent-decoded; not a user
    name alone: that is often a word (`postgresql://cockpit@db/…`)."""
    scheme, found, rest = url.strip().partition("://")
    user_info = rest.rpartition("@")[0]
    user, colon, password = user_info.partition(":")
    if not (found and scheme and colon and password) or set(user) & set("/?#"):
        return []
    forms = {user_info, password}
    return sorted(forms | {urllib.parse.unquote(form) for form in forms})


def _masked(text: str, pattern: re.Pattern[str]) -> str:
    # Until nothing is left: a mask next to what is left may complete a secret holding `*`.
    while True:
        masked = _USER_INFO.sub(rf"\1{MASK}@", pattern.sub(MASK, text))
        if masked == text:
            return text
        text = masked


def _maskable(value: str) -> bool:
    return len(value) >= SHORTEST and value.strip("*") != ""


@functools.lru_cache(maxsize=64)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str]:
    """One alternation, longest secret first (so a secret holding another goes as a whole)."""
    alternatives = [_alternative(s) for s in sorted(secrets, key=lambda s: (-len(s), s))]
    return re.compile("|".join([*alternatives, _SHAPES]))


def _alternative(secret: str) -> str:
    escaped = re.escape(secret)
    if len(secret) >= ANYWHERE:
        return escaped
    before = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return f"{before}{escaped}{after}"
