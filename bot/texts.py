"""Rendering what people, operators and models read (templates/), and making model text inert."""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Callable, Iterable
from enum import StrEnum
from functools import cache
from typing import Any

import jinja2

from bot.redaction import redact

log = logging.getLogger(__name__)

STATUS_MARKER = "<!-- pr-cockpit:status -->"
GITHUB_BODY_LIMIT = 65_536
WJ = "\u2060"

# `@name` (also after a non-ASCII letter, as GitHub reads it), emails and `user@sha` refs.
_AT = re.compile(r"@(?=[A-Za-z0-9])")
# Where a word joiner goes: after such an `@`; inside raw HTML (tags, comments,
# `<https://…>` autolinks) and character references (`&#64;`); in images (`![`) and
# reference or footnote definitions (`]:`).
_BREAK = re.compile(
    r"(?<=@)(?=[A-Za-z0-9])|(?<=<)(?=[A-Za-z/!?])|(?<=&)(?=[#A-Za-z])|(?<=!)(?=\[)|(?<=\])(?=:)"
)
_INLINE_LINK = re.compile(r"\]\(")
# `owner/repo#12` points at another repository's issue (and notifies it); `owner/repo@sha`
# is broken by the `@` rule.
_CROSS_REF = re.compile(r"(?<=[A-Za-z0-9_.-]/)([A-Za-z0-9_.-]+)(?=#[0-9])")
# Bare URLs GitHub turns into links (`scheme://…`, `www.…`), up to where autolinks stop.
_URL = re.compile(r"(?i)(?:[a-z][a-z0-9+.-]*://|www\.)[^\s<]*")
_SCHEME = re.compile(r"(?i)(?<=:)(?=//)")
_WWW = re.compile(r"(?i)(?<=www)(?=\.)")
# Fences: an opener at the text's own margin is tracked (and closed at the end when left
# open); anything fence-like nested in a container (list, quote, indent) is broken.
_OPENER = re.compile(r"(`{3,}|~{3,})(.*)")
_NESTED_FENCE = re.compile(r"^([ \t>*+\-0-9.)]*?)(?=`{3}|~{3})")


# Our prompts' delimiters (templates/prompts/): text from a PR or a repository placed
# between them can neither open nor close one.
_DELIMITER = re.compile(
    r"<(?=\s*/?\s*(?:team_rules|rules|pr_title|pr_description|pr_diff|finding_ledger)\b)", re.I
)

_strict = False


def strict_templates(strict: bool = True) -> None:
    """Tests turn this on: a value nobody gave fails at once. In production it renders empty
    and is logged, so a blank in a comment or a prompt never costs a review."""
    global _strict
    _strict = strict


@cache
def _environment(strict: bool) -> jinja2.Environment:
    undefined = (
        jinja2.StrictUndefined
        if strict
        else jinja2.make_logging_undefined(log, base=jinja2.ChainableUndefined)
    )
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("templates", ""),
        # Markdown and text are not escaped (model text goes through `safe_md`); pages are.
        autoescape=jinja2.select_autoescape(["html.j2"], default_for_string=False),
        undefined=undefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    env.filters.update(
        md=_linking(safe_md),
        md_line=_linking(safe_line),
        cell=_linking(table_cell),
        usd=usd,
        refs=refs,
        fenced=fenced,
        prompt_data=prompt_data,
    )
    env.filters["shell"] = lambda value: shlex.quote(str(value))
    return env


def _linking(make_safe: Callable[..., str]) -> Callable[..., str]:

    @jinja2.pass_context
    def apply(context: jinja2.runtime.Context, text: str | None) -> str:
        return make_safe(text, repo_url=context.get("repo_url"))

    return apply


def render(name: str, /, **context: Any) -> str:
    """A whole document; `repo_url` (the repository on GitHub) is where model text may link."""
    context.setdefault("repo_url", None)
    return _environment(_strict).get_template(name).render(**context).strip() + "\n"


class Audience(StrEnum):
    PEOPLE = "people"  # on GitHub: PR comments, replies, the status comment's lines
    OPERATOR = "operator"  # at the terminal and in logs: what is printed is redacted
    MODEL = "model"  # tool results, repair turns


PEOPLE, OPERATOR, MODEL = Audience.PEOPLE, Audience.OPERATOR, Audience.MODEL


@cache
def _table(to: Audience) -> dict[str, Any]:
    """An audience's messages (templates/text/AUDIENCE.toml): a key is an entry, a table a
    section (`demo.failed`) whose `_macros` are defined for each of its entries."""
    import tomllib
    from importlib import resources

    return tomllib.loads(resources.files("templates").joinpath(f"text/{to}.toml").read_text())


@cache
def _message(to: Audience, key: str, strict: bool) -> jinja2.Template:
    section, _, kind = key.rpartition(".")
    entries = _table(to)[section] if section else _table(to)
    return _environment(strict).from_string(entries.get("_macros", "") + entries[kind])


def say(to: Audience, key: str, /, **values: Any) -> str:
    """The message `key` for an audience, as written: only the lines around it are trimmed,
    never a value's own spaces (a path that begins with one is shown as it is)."""
    values.setdefault("repo_url", None)
    text = _message(to, key, _strict).render(**values).strip("\n")
    return redact(text) if to is OPERATOR else text


def repo_url_of(pull_html_url: str | None) -> str | None:
    """`https://github.com/o/r/pull/7` → `https://github.com/o/r`."""
    match = re.fullmatch(r"(https?://[^/\s]+/[^/\s]+/[^/\s]+)/pull/\d+", pull_html_url or "")
    return match.group(1) if match else None


def same_repository(url: str, repo_url: str | None) -> bool:
    """Whether a link stays inside the repository's pages on GitHub (no `..`, in any
    spelling a browser would still resolve, can leave it)."""
    if not repo_url:
        return False
    base, folded = repo_url.rstrip("/").casefold(), url.casefold()
    if folded != base and not folded.startswith((base + "/", base + "#", base + "?")):
        return False
    rest = folded[len(base) :]
    return not any(bad in rest for bad in ("..", "%2e", "\\", "%5c", WJ))


def neutralise_mentions(text: str) -> str:
    """`@user`, `@org/team`, emails and `user@sha` stay text: a word joiner after the `@`."""
    return _AT.sub("@" + WJ, text)


def _links(text: str, repo_url: str | None) -> str:
    """Bare URLs first (a same-repository one keeps its own scheme, nothing after it), then
    inline links by their destination as it now reads."""

    def breaks(found: str) -> str:
        return _WWW.sub(WJ, _SCHEME.sub(WJ, found))

    def url(match: re.Match) -> str:
        found = match.group(0)
        if found[:4].casefold() != "www." and same_repository(found, repo_url):
            start = found.index("://") + 3
            return found[:start] + breaks(found[start:])
        return breaks(found)

    def inline(match: re.Match) -> str:
        destination = match.string[match.end() :].split(None, 1)
        if destination and same_repository(destination[0].rstrip(")"), repo_url):
            return match.group(0)
        return "]" + WJ + "("

    return _INLINE_LINK.sub(inline, _URL.sub(url, text))


def _fences(lines: list[str]) -> tuple[list[str], str]:
    """Track fences opened at the margin (CommonMark's rules) and break nested ones; return
    the lines and the fence that closes one left open ("" when none is)."""
    out, open_fence = [], ""
    for line in lines:
        if open_fence:
            stripped = line.lstrip(" ")
            rest = stripped.lstrip(open_fence[0])
            if (
                len(line) - len(stripped) <= 3
                and len(stripped) - len(rest) >= len(open_fence)
                and not rest.strip(" \t")
            ):
                open_fence = ""
            out.append(line)
            continue
        opener = _OPENER.match(line)
        if opener and not (opener.group(1)[0] == "`" and "`" in opener.group(2)):
            open_fence = opener.group(1)
            out.append(line)
            continue
        out.append(_NESTED_FENCE.sub(lambda m: m.group(1) + WJ, line, count=1))
    return out, open_fence


def safe_md(text: str | None, *, repo_url: str | None = None) -> str:
    """Model or PR text made inert inside our comments (see the module docstring). The text
    is placed at the start of a line; what follows it is never inside its code fence."""
    if not text:
        return ""
    text = str(text).replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "\ufffd")
    lines, open_fence = _fences(text.split("\n"))
    text = _BREAK.sub(WJ, _links("\n".join(lines), repo_url))
    text = _CROSS_REF.sub(lambda m: m.group(1) + WJ, text)
    return text + ("\n" + open_fence if open_fence else "")


def safe_line(text: str | None, *, repo_url: str | None = None) -> str:
    """One line of inert text, for inside a sentence (errors, titles, progress)."""
    return " ".join(safe_md(text, repo_url=repo_url).split())


def fenced(code: str, info: str = "") -> str:
    """A code block whose fence is longer than any backtick run inside it, so the content
    can never close it (and what follows can never become live markdown)."""
    code = code.replace("\r\n", "\n").replace("\r", "\n")  # as markdown will read it
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{code}\n{fence}"


def prompt_data(text: str | None) -> str:
    """Text for a prompt, between our delimiters (`<team_rules>`, `<pr_description>` …):
    anything in it that reads as one of them loses its `<` (`&lt;team_rules>`), so it can
    neither close the section it is in nor open another."""
    return _DELIMITER.sub("&lt;", str(text or ""))


def table_cell(text: str | None, *, repo_url: str | None = None) -> str:
    return safe_line(text, repo_url=repo_url).replace("|", "\\|")[:300]


def refs(ordinals: Iterable[int]) -> str:
    return ", ".join(f"F{n}" for n in ordinals) or "none"


def usd(value: float | None) -> str:
    """A cost; unknown (a model without a rate, or a run cut short) is never shown as $0."""
    if value is None:
        return "unknown"
    return f"${value:.4f}" if value < 1 else f"${value:.2f}"


def fit(body: str, limit: int = GITHUB_BODY_LIMIT) -> str:
    if len(body) <= limit:
        return body
    note = "\n\n" + say(PEOPLE, "cut_to_fit")
    return body[: limit - len(note) - 10] + note
