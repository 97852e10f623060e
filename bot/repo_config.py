"""Per-repository rules from `.github/cockpit.toml` on the default branch (never the PR's)."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import re
import sys
import tomllib
from enum import StrEnum
from typing import Annotated, Any

import gidgethub
import msgspec
import msgspec.inspect as mi
import pathspec
from msgspec import Meta

from bot import inputs
from bot.config import PROVIDERS
from bot.github import PERMISSIONS
from bot.records.vocab import Severity
from bot.texts import PEOPLE, say

CONFIG_PATH = ".github/cockpit.toml"
SECTION = "review"  # every key may also sit in a `[review]` table
MAX_TEXT = 20_000  # characters of one `instructions` text
SCHEMA_KEY = "$schema"  # an editor's schema association (Taplo); the bot ignores it
# Choices as enums: a Literal's choices are sorted, an enum's keep their order.
Provider = StrEnum("Provider", [(p, p) for p in PROVIDERS])
Permission = StrEnum("Permission", [(p, p) for p in PERMISSIONS[PERMISSIONS.index("write") :]])
OutsidePrs = StrEnum("OutsidePrs", [(p, p) for p in ("review", "on-command")])
VerifyPublish = StrEnum("VerifyPublish", [(p, p) for p in ("not_refuted", "confirmed")])
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
Glob = Annotated[str, Meta(min_length=1)]


def key(meaning: str, unset: str = "", **bounds: Any) -> Meta:
    return Meta(description=meaning, extra={"unset": unset} if unset else {}, **bounds)


class PathRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`[[review.paths]]`: instructions for the files one gitignore-style glob matches."""

    glob: Glob
    instructions: Text

    def matches(self, path: str) -> bool:
        return _matches((self.glob,), path)


class Source(msgspec.Struct, frozen=True):
    """Where the file was read: the default branch's `.github/cockpit.toml`, at a blob sha."""

    path: str = CONFIG_PATH
    blob_sha: str | None = None


class Keys(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The keys of the file."""

    auto_review: Annotated[
        bool, key("review on opened, reopened, ready_for_review and synchronize")
    ] = True
    review_drafts: Annotated[bool, key("also review draft PRs")] = False
    provider: Annotated[
        Provider | None, key("who reviews", unset="the server's `COCKPIT_PROVIDER`")
    ] = None
    verify: Annotated[
        bool, key("a small read-only session per finding checks it before it is shown")
    ] = False
    verify_provider: Annotated[
        Provider | None,
        key("who verifies", unset="the other provider when its key is set, else the reviewer's"),
    ] = None
    verify_publish: Annotated[
        VerifyPublish,
        key(
            "when the verify pass ran, what a plain `approve` publishes: `not_refuted` (every "
            "finding the verify pass did not refute) or `confirmed` (only those it confirmed "
            "with a reproduction); the others stay one `approve F2` away"
        ),
    ] = VerifyPublish("not_refuted")
    ignore: Annotated[
        tuple[str, ...], key("files never reviewed (gitignore-style globs; `!` re-includes)")
    ] = ()
    max_files: Annotated[
        int, key("files reviewed per PR (source first, then tests, then docs)", ge=1)
    ] = 60
    max_diff_bytes: Annotated[int, key("diff bytes reviewed per PR", ge=1)] = 400_000
    approve_permission: Annotated[
        Permission,
        key(
            "who may publish a draft, drop its findings or send it back for a revision "
            "(`approve`, `drop`, `send-back`)"
        ),
    ] = Permission("write")
    outside_prs: Annotated[
        OutsidePrs,
        key(
            "PRs whose author lacks write access: reviewed automatically (3 a day per author), "
            "or only on `/cockpit review`"
        ),
    ] = OutsidePrs("review")
    instructions: Annotated[
        Text,
        key(
            "the team's review rules for every file, given to the reviewer with `REVIEW.md` and "
            "the review section of `AGENTS.md` (all read from the default branch)",
            unset="none",
        ),
    ] = ""
    paths: Annotated[
        tuple[PathRule, ...],
        key(
            "`[[review.paths]]` tables: `glob` (gitignore-style) and `instructions` for the "
            "files it matches (given only when the PR changes such files, naming them)"
        ),
    ] = ()
    min_severity: Annotated[
        Severity,
        key(
            'findings below it are folded: listed in the status comment\'s "minor" section and '
            "left out of the pending review unless listed at `approve`. The default folds nits: "
            "style remarks are the noise people complain about most, and folded they stay one "
            "click away"
        ),
    ] = Severity.MINOR
    max_findings: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        key(
            "inline comments per pending review, the most severe first; the rest are "
            "summarised in its body. Ten by default: past that a review is skimmed, not read, "
            "and the critical ones drown"
        ),
    ] = 10
    min_confidence: Annotated[
        int,
        key(
            "findings the reviewer drafted with a lower confidence (0-100) are folded like "
            "those below `min_severity`. 50 by default: below it the reviewer is told it has a "
            "suspicion it could not confirm, a guess a human should not have to read first; "
            "folded it stays one click away. 0 folds none",
            ge=0,
            le=100,
        ),
    ] = 50
    passes: Annotated[
        int,
        key(
            "independent reviews of each PR, each reading the files in a different order; with "
            "2 or more a finding stays when two passes raise it, or when one does and a verify "
            "session confirms it (run for those even with `verify` off). Each pass costs about "
            "a review, shown per pass in the status comment. 1 by default: one review",
            ge=1,
            le=5,
        ),
    ] = 1


KEYS = {f.name: f for f in msgspec.structs.fields(Keys)}


def default_of(name: str) -> Any:
    return KEYS[name].default


def unset_of(name: str) -> str:
    info = mi.type_info(KEYS[name].type)
    return info.extra.get("unset", "") if isinstance(info, mi.Metadata) and info.extra else ""


class RepoConfig(Keys, frozen=True, kw_only=True):
    """The keys as read, and what reading found: the file's problems (each shown on the status
    comment), the keys it set, where it was read (None: there is no file). A bad or unknown
    key is a problem and keeps its default; the rest of the file applies."""

    problems: tuple[str, ...] = ()
    unusable: bool = False  # nothing in the file applied
    set_keys: frozenset[str] = frozenset()
    source: Source | None = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RepoConfig) and all(
            getattr(self, name) == getattr(other, name) for name in KEYS
        )

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in KEYS))

    @property
    def error(self) -> str | None:
        """What the status comment says about the file, or None when all of it applied."""
        if not self.problems:
            return None
        return say(PEOPLE, "config_error", path=CONFIG_PATH, **msgspec.structs.asdict(self))

    def ignores(self, path: str) -> bool:
        return bool(self.ignore) and _matches(self.ignore, path)

    def to_payload(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # a job carries the config its handler read

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> RepoConfig:
        """The inverse of `to_payload`; a payload from an older version keeps what it can."""
        names = {f.name for f in msgspec.structs.fields(cls)}
        return msgspec.convert({k: v for k, v in data.items() if k in names}, cls)


@functools.lru_cache(maxsize=256)
def _spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


def _matches(globs: tuple[str, ...], path: str) -> bool:
    # pathspec's regexes read `.` and `$` as Python does (no newline; before a last newline), git's
    # wildmatch takes a newline as any other character: a path never holds NUL, so it stands in
    return _spec(globs).match_file(path.replace("\n", "\0"))


def glob_problem(glob: Any, *, negation: bool = True) -> str | None:
    """Why `glob` is not a usable gitignore-style pattern, or None."""
    if not isinstance(glob, str) or not glob.strip():
        return say(PEOPLE, "glob_problem", why="empty")
    if glob.startswith("#"):
        return say(PEOPLE, "glob_problem", why="comment")
    if glob.startswith("!") and not negation:
        return say(PEOPLE, "glob_problem", why="negated")
    try:
        [pattern] = pathspec.GitIgnoreSpec.from_lines([glob]).patterns
    except (ValueError, re.error):  # pathspec's own, and a bracket its regex cannot hold
        return say(PEOPLE, "glob_problem", why="pattern")
    if pattern.include is None:
        return say(PEOPLE, "glob_problem", why="nothing")
    return None


# -- checking one key ---------------------------------------------------------------------------


def _refused(name: str, value: Any) -> str | None:
    """Why `name` does not accept `value` (it completes "`key` …"), or None."""
    if name == "ignore" and isinstance(value, list):
        for n, glob in enumerate(value, 1):
            if problem := glob_problem(glob):
                return _said("entry", n=n, shown=_shown(glob), problem=problem)
    if name == "paths":
        return _paths_refused(value)
    found = inputs.problems(value, KEYS[name].type)
    if not found:
        return None
    problem = found[0]
    if problem.allowed:
        return _said("choice", choices=problem.allowed)
    if problem.why == "range":  # a key with both ends says both (`passes = 9`: at most 5)
        return _said("minimum", minimum=problem.limits.get("ge"), maximum=problem.limits.get("le"))
    if problem.why == "length":
        return _said("long", limit=MAX_TEXT)
    expected = problem.expected.split(" or ")[0]  # "integer or null": an integer
    return _said("globs" if expected == "array" else expected)


def _paths_refused(value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return _said("paths")
    for n, table in enumerate(value, 1):
        if extra := sorted(set(table) - {"glob", "instructions"}):
            return _said("table_keys", n=n, extra=extra)
        if "glob" not in table or "instructions" not in table:
            return _said("table_needs", n=n)
        if problem := glob_problem(table["glob"], negation=False):
            return _said("table_glob", n=n, shown=_shown(table["glob"]), problem=problem)
        if inputs.problems(table["instructions"], Text):
            return _said("instructions", n=n, limit=MAX_TEXT)
    return None


def _said(why: str, **context: Any) -> str:
    return say(PEOPLE, "config_refused", why=why, **context)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


# -- the file ----------------------------------------------------------------------------------


def parse_repo_config(text: str, source: Source | None = None) -> RepoConfig:
    """Parse the file: good keys apply, each bad or unknown one is a problem (and keeps its
    default); a file that is not TOML gives the defaults and says why."""
    source = source or Source()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        problem = say(PEOPLE, "config_problem", why="toml", error=exc)
        return RepoConfig(problems=(problem,), unusable=True, source=source)
    return from_data(data, source)


def from_data(data: dict[str, Any], source: Source | None = None) -> RepoConfig:
    problems: list[str] = []
    entries: list[tuple[str, str, Any]] = []  # (where it was written, key, value)
    for name, value in data.items():
        if name == SECTION and isinstance(value, dict):
            entries += [(f"{SECTION}.{k}", k, v) for k, v in value.items()]
        elif name != SCHEMA_KEY:
            entries.append((name, name, value))
    values: dict[str, Any] = {}
    for written, name, value in entries:
        if name not in KEYS:
            problems.append(say(PEOPLE, "config_problem", why="unknown", key=written))
            continue
        if name in values:
            problems.append(say(PEOPLE, "config_problem", why="twice", key=name))
        values.pop(name, None)
        if refused := _refused(name, value):
            problems.append(
                say(PEOPLE, "config_problem", why="refused", key=written, refused=refused)
            )
        else:
            values[name] = inputs.decode(value, KEYS[name].type)
    return RepoConfig(**values, problems=tuple(problems), set_keys=frozenset(values), source=source)


async def fetch_repo_config(gh: Any, owner: str, repo: str) -> RepoConfig:
    """Read the config from the default branch (no `ref`), with the client's ETag cache."""
    try:
        item = await gh.getitem(
            "/repos/{owner}/{repo}/contents/{+path}",
            {"owner": owner, "repo": repo, "path": CONFIG_PATH},
        )
    except gidgethub.HTTPException as exc:
        if int(exc.status_code) == 404:
            return RepoConfig()
        raise
    if not isinstance(item, dict) or item.get("type") != "file":
        problem = say(PEOPLE, "config_problem", why="not_file")
        return RepoConfig(problems=(problem,), unusable=True, source=Source())
    source = Source(blob_sha=item.get("sha") if isinstance(item.get("sha"), str) else None)
    try:
        text = base64.b64decode(item.get("content", "")).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        problem = say(PEOPLE, "config_problem", why="not_utf8")
        return RepoConfig(problems=(problem,), unusable=True, source=source)
    return parse_repo_config(text, source)


# -- derived forms: `/cockpit config`, the reference table, the JSON Schema ---------------------


def toml_value(value: Any) -> str:
    """A value as it would be written in the file."""
    if isinstance(value, PathRule):
        return f"{{glob = {toml_value(value.glob)}, instructions = …}}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


class Setting(msgspec.Struct, frozen=True):
    """One key as `/cockpit config` shows it."""

    key: str
    value: str  # as it would be written in the file; "" when unset
    from_file: bool
    unset: str


def effective(config: RepoConfig) -> list[Setting]:
    """Every key's value and whether the file set it (else it is the default)."""
    shown = []
    for name in KEYS:
        value = getattr(config, name)
        text = "" if value is None or value == "" else toml_value(value)
        if len(text) > 120:
            text = text[:119] + "…"
        shown.append(Setting(name, text, name in config.set_keys, unset_of(name)))
    return shown


def reference_table() -> str:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for row in inputs.reference_rows(Keys):
        kind = row.type.replace(" or null", "").replace("|", "\\|")
        unset = unset_of(row.name)
        default = f"unset: {unset}" if unset else f"`{row.default}`"
        rows.append(f"| `{row.name}` | {kind} | {default} | {row.meaning} |")
    return "\n".join(rows)


def json_schema() -> dict[str, Any]:
    """For editors (Taplo / Even Better TOML)."""
    schema = inputs.json_schema(Keys)
    properties = schema.pop("properties")
    del schema["required"]
    schema["description"] = (
        "Read from the default branch. Every key is optional and may also sit in a [review] "
        "table. Unknown keys and bad values are reported on the PR's status comment and keep "
        "their default; the rest applies."
    )
    section = {"type": "object", "description": "the same keys, in a [review] table"}
    schema["properties"] = {
        SCHEMA_KEY: {"type": "string", "description": "this schema, for editors"},
        **properties,
        SECTION: {**section, "properties": properties, "additionalProperties": False},
    }
    title = "PR Cockpit repository configuration (.github/cockpit.toml)"
    return {"$schema": "http://json-schema.org/draft-07/schema#", **schema, "title": title}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what not in ("schema", "table"):
        sys.exit("usage: python -m bot.repo_config schema|table")
    # The JSON Schema (templates/cockpit.schema.json) or the README's table: tests hold both.
    sys.stdout.write(schema_text() if what == "schema" else reference_table() + "\n")
