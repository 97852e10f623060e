"""Rendering what people and models read (templates/), and making model text safe to post."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jinja2

STATUS_MARKER = "<!-- pr-cockpit:status -->"
GITHUB_BODY_LIMIT = 65_536
_MENTION = re.compile(r"(?<!\w)@(?=[A-Za-z0-9][\w-]*)")
_FENCE = re.compile(r"^ {0,3}(```|~~~)", re.M)


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("templates", ""),
        autoescape=False,  # noqa: S701 - markdown, not HTML; model text goes through `safe_md`
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters["md"] = safe_md
    env.filters["cell"] = table_cell
    env.filters["usd"] = usd
    env.filters["fenced"] = fenced
    return env


def render(name: str, **context: Any) -> str:
    return _environment().get_template(name).render(**context).strip() + "\n"


def neutralise_mentions(text: str) -> str:
    """`@user` / `@org/team` would notify people: break the mention with a zero-width joiner."""
    return _MENTION.sub("@\u2060", text)


def safe_md(text: str | None) -> str:
    """Model or PR text made safe inside our comments: no mentions, no hidden HTML comments
    (which could forge our markers), no unbalanced code fence swallowing what follows."""
    if not text:
        return ""
    text = neutralise_mentions(str(text))
    text = text.replace("<!--", "&lt;!--").replace("-->", "--&gt;")
    if len(_FENCE.findall(text)) % 2:
        text += "\n```"
    return text


def fenced(code: str, info: str = "") -> str:
    """A code block whose fence is longer than any backtick run inside it, so the content
    can never close it (and what follows can never become live markdown)."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{code}\n{fence}"


def table_cell(text: str | None) -> str:
    """One markdown table cell: a single line, pipes escaped."""
    flat = " ".join(safe_md(text).split())
    return flat.replace("|", "\\|")[:300]


def usd(value: float | None) -> str:
    """A cost; unknown (a model without a rate, or a run cut short) is never shown as $0."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def fit(body: str, limit: int = GITHUB_BODY_LIMIT) -> str:
    """Keep a body under GitHub's size limit, saying so when it is cut."""
    if len(body) <= limit:
        return body
    note = "\n\n… (cut to fit GitHub's comment size limit; the full draft is in the check run)"
    return body[: limit - len(note) - 10] + note
