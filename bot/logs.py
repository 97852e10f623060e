"""Structured logs that carry delivery/repo/PR/job context and never carry secrets."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "log_context", default=None
)

# Token shapes that must never reach a log line even if nobody registered them:
# GitHub tokens (ghs_, ghp_, gho_, ghu_, ghr_, github_pat_), OpenAI/Anthropic keys,
# bearer/token authorisation headers and PEM blocks.
_TOKEN_PATTERNS = re.compile(
    r"(gh[psour]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|sk-[A-Za-z0-9_\-]{16,}"
    r"|(?i:(?:bearer|token|basic)\s+)[A-Za-z0-9._\-+/=]{16,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----)"
)
_known_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Remember a secret value so it is replaced in every log line, also as JSON writes it
    (a `"`, `\\`, newline or non-ASCII letter is escaped in the line we emit)."""
    if value and len(value) >= 6:
        _known_secrets.add(value)
        for ascii_only in (True, False):
            _known_secrets.add(json.dumps(value, ensure_ascii=ascii_only)[1:-1])


def redact(text: str) -> str:
    for secret in sorted(_known_secrets, key=len, reverse=True):  # longest form first
        if secret in text:
            text = text.replace(secret, "***")
    return _TOKEN_PATTERNS.sub("***", text)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach fields (delivery, repo, pr, job …) to every log line in this block."""
    token = _context.set(
        {**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}}
    )
    try:
        yield
    finally:
        _context.reset(token)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_context.get() or {})
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, default=str))


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    for noisy in ("httpx", "httpx2", "httpcore", "anthropic", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
