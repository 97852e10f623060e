"""Per-repository rules from `.github/cockpit.toml` on the default branch (never the PR's).

`RepoConfig`'s fields are the one table of keys: each carries its type, default and meaning
(`key(...)`), and parsing, the JSON Schema shipped for editors (`templates/cockpit.schema.json`),
the README's reference table and `/cockpit config` are all derived from them. A key that is
unknown or has a bad value is reported and left at its default; the rest of the file applies.

    python -m bot.repo_config schema   # the JSON Schema (tests hold the shipped file to it)
    python -m bot.repo_config table    # the README's reference table (tests hold it too)
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import sys
import tomllib
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

import gidgethub
import pathspec

from bot.config import PROVIDERS
from bot.github import PERMISSIONS
from bot.records.vocab import Severity
from bot.texts import PEOPLE, say

CONFIG_PATH = ".github/cockpit.toml"
COMMAND_LEVELS = PERMISSIONS[PERMISSIONS.index("write") :]  # who may run commands or approve
OUTSIDE_PRS = ("review", "on-command")  # PRs whose author lacks write access
SECTION = "review"  # every key may also sit in a `[review]` table
MAX_TEXT = 20_000  # characters of one `instructions` text
SCHEMA_KEY = "$schema"  # an editor's schema association (Taplo); the bot ignores it

# What kind of value a key takes (`Rule.kind`).
BOOLEAN, INTEGER, CHOICE = "boolean", "integer", "choice"
GLOBS, TEXT, PATHS = "globs", "text", "paths"


@dataclass(frozen=True)
class Rule:
    """What one key accepts and means: the single source of every derived form."""

    kind: str  # BOOLEAN | INTEGER | CHOICE | GLOBS | TEXT | PATHS
    meaning: str
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    unset: str = ""  # what a default of None means


def key(default: Any, kind: str, meaning: str, **rule: Any) -> Any:
    """A RepoConfig field that is a key of the file."""
    return field(default=default, metadata={"rule": Rule(kind, meaning, **rule)})


@dataclass(frozen=True)
class PathRule:
    """`[[review.paths]]`: instructions for the files one gitignore-style glob matches."""

    glob: str
    instructions: str

    def matches(self, path: str) -> bool:
        return _spec((self.glob,)).match_file(path)


@dataclass(frozen=True)
class Source:
    """Where the file was read: the default branch's `.github/cockpit.toml`, at a blob sha."""

    path: str = CONFIG_PATH
    blob_sha: str | None = None


@dataclass(frozen=True)
class RepoConfig:
    auto_review: bool = key(
        True, BOOLEAN, "review on opened, reopened, ready_for_review and synchronize"
    )
    review_drafts: bool = key(False, BOOLEAN, "also review draft PRs")
    provider: str | None = key(
        None,
        CHOICE,
        "who reviews",
        choices=PROVIDERS,
        unset="the server's `COCKPIT_PROVIDER`",
    )
    verify: bool = key(
        False, BOOLEAN, "a second read-only run tries to refute each finding before it is shown"
    )
    verify_provider: str | None = key(
        None,
        CHOICE,
        "who verifies",
        choices=PROVIDERS,
        unset="the other provider when its key is set, else the reviewer's",
    )
    ignore: tuple[str, ...] = key(
        (),
        GLOBS,
        "files never reviewed (gitignore-style globs; `!` re-includes)",
    )
    max_files: int = key(
        60, INTEGER, "files reviewed per PR (source first, then tests, then docs)", minimum=1
    )
    max_diff_bytes: int = key(400_000, INTEGER, "diff bytes reviewed per PR", minimum=1)
    approve_permission: str = key(
        "write",
        CHOICE,
        "who may publish a draft, drop its findings or send it back for a revision (`approve`,"
        " `drop`, `send-back`)",
        choices=COMMAND_LEVELS,
    )
    outside_prs: str = key(
        "review",
        CHOICE,
        "PRs whose author lacks write access: reviewed automatically (3 a day per author), "
        "or only on `/cockpit review`",
        choices=OUTSIDE_PRS,
    )
    instructions: str = key(
        "",
        TEXT,
        "the team's review rules for every file, given to the reviewer with `REVIEW.md` and "
        "the review section of `AGENTS.md` (all read from the default branch)",
        unset="none",
    )
    paths: tuple[PathRule, ...] = key(
        (),
        PATHS,
        "`[[review.paths]]` tables: `glob` (gitignore-style) and `instructions` for the files "
        "it matches (given only when the PR changes such files, naming them)",
    )
    min_severity: str = key(
        Severity.MINOR,
        CHOICE,
        'findings below it are folded: listed in the status comment\'s "minor" section and '
        "left out of the pending review unless listed at `approve`. The default folds nits: "
        "style remarks are the noise people complain about most, and folded they stay one "
        "click away",
        choices=tuple(Severity),
    )
    max_findings: int | None = key(
        10,
        INTEGER,
        "inline comments per pending review, the most severe first; the rest are summarised "
        "in its body. Ten by default: past that a review is skimmed, not read, and the "
        "critical ones drown",
        minimum=1,
    )
    # What was read, not keys: the file's problems (each shown on the status comment), the
    # keys it set, and where it was read (None: there is no file).
    problems: tuple[str, ...] = field(default=(), compare=False)
    unusable: bool = field(default=False, compare=False)  # nothing in the file applied
    set_keys: frozenset[str] = field(default=frozenset(), compare=False)
    source: Source | None = field(default=None, compare=False)

    @property
    def error(self) -> str | None:
        """What the status comment says about the file, or None when all of it applied."""
        if not self.problems:
            return None
        problems, unusable = self.problems, self.unusable
        return say(PEOPLE, "config_error", path=CONFIG_PATH, problems=problems, unusable=unusable)

    def ignores(self, path: str) -> bool:
        """Whether the `ignore` globs leave `path` (relative to the repository) out."""
        return bool(self.ignore) and _spec(self.ignore).match_file(path)

    def to_payload(self) -> dict[str, Any]:
        """As plain JSON, so a job can carry the config its handler already read."""
        data: dict[str, Any] = {name: _plain(getattr(self, name)) for name in KEYS}
        data.update(
            problems=list(self.problems),
            unusable=self.unusable,
            set_keys=sorted(self.set_keys),
            source=None if self.source is None else _plain(self.source),
        )
        return data

    @classmethod
    def from_payload(cls, data: dict[str, Any]) -> RepoConfig:
        """The inverse of `to_payload`; a payload from an older version keeps what it can."""
        values: dict[str, Any] = {}
        for name, rule in KEYS.items():
            if name in data:
                value = data[name]
                if rule.kind == GLOBS:
                    value = tuple(value)
                elif rule.kind == PATHS:
                    value = tuple(PathRule(**item) for item in value)
                values[name] = value
        source = data.get("source")
        return cls(
            **values,
            problems=tuple(data.get("problems", ())),
            unusable=bool(data.get("unusable", False)),
            set_keys=frozenset(data.get("set_keys", ())),
            source=Source(**source) if isinstance(source, dict) else None,
        )


_FIELDS: dict[str, Field] = {f.name: f for f in fields(RepoConfig)}
KEYS: dict[str, Rule] = {n: f.metadata["rule"] for n, f in _FIELDS.items() if "rule" in f.metadata}


def default_of(name: str) -> Any:
    default = _FIELDS[name].default
    assert default is not MISSING
    return default


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, PathRule | Source):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return value


@functools.lru_cache(maxsize=256)
def _spec(globs: tuple[str, ...]) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(globs)


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
    except ValueError:  # pathspec's pattern errors are ValueErrors
        return say(PEOPLE, "glob_problem", why="pattern")
    if pattern.include is None:
        return say(PEOPLE, "glob_problem", why="nothing")
    return None


# -- checking one key ---------------------------------------------------------------------------


class Refused(Exception):
    """A value a key does not accept; the message (`config_refused` `why`) completes "`key` …"."""

    def __init__(self, why: str, **context: Any) -> None:
        super().__init__(say(PEOPLE, "config_refused", why=why, **context))


def _check(name: str, rule: Rule, value: Any) -> Any:
    """The value as RepoConfig holds it, or Refused."""
    if rule.kind == BOOLEAN:
        if not isinstance(value, bool):
            raise Refused("boolean")
        return value
    if rule.kind == INTEGER:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Refused("integer")
        if rule.minimum is not None and value < rule.minimum:
            raise Refused("minimum", minimum=rule.minimum)
        return value
    if rule.kind == CHOICE:
        if value not in rule.choices:
            raise Refused("choice", choices=rule.choices)
        return value
    if rule.kind == TEXT:
        if not isinstance(value, str):
            raise Refused("string")
        if len(value) > MAX_TEXT:
            raise Refused("long", limit=MAX_TEXT)
        return value
    if rule.kind == GLOBS:
        if not isinstance(value, list):
            raise Refused("globs")
        for n, glob in enumerate(value):
            problem = glob_problem(glob)
            if problem:
                raise Refused("entry", n=n + 1, shown=_shown(glob), problem=problem)
        return tuple(value)
    if rule.kind == PATHS:
        return _check_paths(value)
    raise AssertionError(f"unknown kind {rule.kind} of `{name}`")


def _check_paths(value: Any) -> tuple[PathRule, ...]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Refused("paths")
    found = []
    for n, table in enumerate(value, 1):
        extra = sorted(set(table) - {"glob", "instructions"})
        if extra:
            raise Refused("table_keys", n=n, extra=extra)
        if "glob" not in table or "instructions" not in table:
            raise Refused("table_needs", n=n)
        problem = glob_problem(table["glob"], negation=False)
        if problem:
            raise Refused("table_glob", n=n, shown=_shown(table["glob"]), problem=problem)
        if not isinstance(table["instructions"], str) or len(table["instructions"]) > MAX_TEXT:
            raise Refused("instructions", n=n, limit=MAX_TEXT)
        found.append(PathRule(table["glob"], table["instructions"]))
    return tuple(found)


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
    """The config from the file's parsed TOML."""
    problems: list[str] = []
    entries: list[tuple[str, str, Any]] = []  # (where it was written, key, value)
    for name, value in data.items():
        if name == SECTION and isinstance(value, dict):
            entries += [(f"{SECTION}.{k}", k, v) for k, v in value.items()]
        elif name != SCHEMA_KEY:
            entries.append((name, name, value))
    values: dict[str, Any] = {}
    for written, name, value in entries:
        rule = KEYS.get(name)
        if rule is None:
            problems.append(say(PEOPLE, "config_problem", why="unknown", key=written))
            continue
        if name in values:
            problems.append(say(PEOPLE, "config_problem", why="twice", key=name))
        try:
            values[name] = _check(name, rule, value)
        except Refused as why:
            values.pop(name, None)
            problems.append(say(PEOPLE, "config_problem", why="refused", key=written, refused=why))
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


# -- derived forms: what a value looks like, the reference table, the JSON Schema --------------


def toml_value(value: Any) -> str:
    """A value as it would be written in the file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, tuple | list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, PathRule):
        return f"{{glob = {toml_value(value.glob)}, instructions = …}}"
    return str(value)


@dataclass(frozen=True)
class Setting:
    """One key as `/cockpit config` shows it."""

    key: str
    value: str  # as it would be written in the file; "" when unset
    from_file: bool
    unset: str  # what an unset value means


def effective(config: RepoConfig) -> list[Setting]:
    """Every key's value and whether the file set it (else it is the default)."""
    shown = []
    for name, rule in KEYS.items():
        value = getattr(config, name)
        text = "" if value is None or value == "" else toml_value(value)
        if len(text) > 120:
            text = text[:119] + "…"
        shown.append(Setting(name, text, name in config.set_keys, rule.unset))
    return shown


def type_text(rule: Rule) -> str:
    if rule.kind == CHOICE:
        return " \\| ".join(f'`"{c}"`' for c in rule.choices)
    if rule.kind == INTEGER:
        return f"integer ≥ {rule.minimum}" if rule.minimum is not None else "integer"
    return {
        BOOLEAN: "boolean",
        TEXT: "string",
        GLOBS: "list of globs",
        PATHS: "array of tables",
    }[rule.kind]


def default_text(name: str) -> str:
    rule, default = KEYS[name], default_of(name)
    if default is None or default == "":
        return f"unset: {rule.unset}"
    if rule.kind == TEXT:
        return toml_value(default)
    return f"`{toml_value(default)}`"


def reference_table() -> str:
    """The README's table of keys (tests/test_repo_config.py holds the README to it)."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, rule in KEYS.items():
        rows.append(f"| `{name}` | {type_text(rule)} | {default_text(name)} | {rule.meaning} |")
    return "\n".join(rows)


def _property(name: str, rule: Rule) -> dict[str, Any]:
    default = default_of(name)
    description = rule.meaning[0].upper() + rule.meaning[1:] + "."
    if rule.unset and default in (None, ""):
        description += f" Unset: {rule.unset}."
    schema: dict[str, Any] = {"description": description}
    if rule.kind == BOOLEAN:
        schema["type"] = "boolean"
    elif rule.kind == INTEGER:
        schema["type"] = "integer"
        if rule.minimum is not None:
            schema["minimum"] = rule.minimum
    elif rule.kind == CHOICE:
        schema.update(type="string", enum=list(rule.choices))
    elif rule.kind == TEXT:
        schema.update(type="string", maxLength=MAX_TEXT)
    elif rule.kind == GLOBS:
        schema.update(type="array", items={"type": "string", "minLength": 1})
    elif rule.kind == PATHS:
        schema.update(
            type="array",
            items={
                "type": "object",
                "properties": {
                    "glob": {"type": "string", "minLength": 1},
                    "instructions": {"type": "string", "maxLength": MAX_TEXT},
                },
                "required": ["glob", "instructions"],
                "additionalProperties": False,
            },
        )
    if default is not None:
        schema["default"] = _plain(default)
    return schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the file for editors (Taplo / Even Better TOML), from the keys."""
    properties = {name: _property(name, rule) for name, rule in KEYS.items()}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "PR Cockpit repository configuration (.github/cockpit.toml)",
        "description": "Read from the default branch. Every key is optional and may also sit "
        "in a [review] table. Unknown keys and bad values are reported on the PR's status "
        "comment and keep their default; the rest applies.",
        "type": "object",
        "properties": {
            SCHEMA_KEY: {"type": "string", "description": "this schema, for editors"},
            **properties,
            SECTION: {
                "type": "object",
                "description": "the same keys, in a [review] table",
                "properties": properties,
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what not in ("schema", "table"):
        sys.exit("usage: python -m bot.repo_config schema|table")
    sys.stdout.write(schema_text() if what == "schema" else reference_table() + "\n")
