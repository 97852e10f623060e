"""Golden files: labelled PRs at fixed shas, declared once (`golden.schema.json` is generated)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import msgspec
from msgspec import UNSET, Meta, UnsetType
from msgspec.structs import force_setattr, replace

from bot import inputs
from bot.texts import OPERATOR, say

SCHEMA_FILE = Path(__file__).with_name("golden.schema.json")
URL_SCHEMES = ("https://", "http://", "file://")
Sha = Annotated[str, Meta(pattern="^([0-9a-f]{40}|[0-9a-f]{64})$")] | None
Positive = Annotated[int, Meta(ge=1)]
Filled = Annotated[str, Meta(min_length=1)]
Severity = Annotated[
    str, Meta(description="Free text; ours are critical | major | minor | nit, public sets theirs")
]
Repository = Annotated[
    str,
    Meta(
        min_length=1,
        description="Where the code is: a clone URL (https://, http://, file://) or a local path"
        " (a git repository or a .bundle file) relative to the golden file; a case's own replaces"
        " the file's, which is required unless every case names one",
    ),
]


class GoldenError(ValueError):
    """The message lists what is wrong."""


class _Part(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """Unknown keys refused, written without its defaults."""


class Label(_Part, kw_only=True):
    """An issue a good review of the case finds."""

    path: Filled | UnsetType = UNSET
    line: Positive | UnsetType = UNSET
    title: str | UnsetType = UNSET
    problem: Annotated[str, Meta(pattern=r"\S")]
    severity: Severity | UnsetType = UNSET

    def __post_init__(self) -> None:
        force_setattr(self, "problem", self.problem.strip())


class Case(_Part, kw_only=True):
    """A pull request at fixed shas, with the issues a good review of it finds."""

    id: Annotated[str, Meta(pattern="^[A-Za-z0-9._:/-]+$")]
    pr: Positive | UnsetType = UNSET
    url: str | UnsetType = UNSET
    original_url: str | UnsetType = UNSET
    repository: Repository | UnsetType = UNSET
    title: str = ""
    body: str = ""
    base_ref: str | UnsetType = UNSET
    base_sha: Annotated[Sha, Meta(description="null when pending: the base branch is used")]
    head_sha: Annotated[Sha, Meta(description="null when pending: refs/pull/<pr>/head is used")]
    labels: list[Label]
    known_false_positives: Annotated[
        list[Label], Meta(description="Findings people dropped (known false positives)")
    ] = []
    note: str | UnsetType = UNSET


class Golden(_Part, kw_only=True):
    """Labelled pull requests for `cockpit eval run`, each at fixed shas with the issues to find."""

    version: Literal[1] = 1
    name: Annotated[str, Meta(description="Short name shown in reports")] = ""
    description: str = ""
    note: Annotated[str, Meta(description="What to know before using it (shas pending)")] = ""
    repository: Repository | UnsetType = UNSET
    base_ref: Annotated[
        str, Meta(description="Base branch of a case without base_sha (default: the default one)")
    ] = ""
    cases: list[Case]

    @property
    def labels(self) -> int:
        return sum(len(c.labels) for c in self.cases)


def is_url(repository: str) -> bool:
    return repository.startswith(URL_SCHEMES)


def repository_key(repository: str) -> str:
    if is_url(repository) and not repository.startswith("file://"):
        parts = urlparse(repository).path.strip("/").removesuffix(".git").split("/")
        if len(parts) >= 2 and all(parts[-2:]):
            return f"{parts[-2]}/{parts[-1]}"
    digest = hashlib.sha256(repository.encode()).hexdigest()[:10]
    name = Path(urlparse(repository).path if is_url(repository) else repository).name
    return f"local/{name or 'repo'}-{digest}"


# The message for a problem with a key, when its type alone does not say it.
_WHY = {"version": "version", "id": "case_id", "base_sha": "sha", "head_sha": "sha"}
_WHY |= {"problem": "non_empty", "pr": "positive", "line": "positive"}
_WHY |= dict.fromkeys(("cases", "labels", "known_false_positives"), "list")


def _said(problem: inputs.Problem) -> str:
    if not problem.path:
        return say(OPERATOR, "eval.golden", why="file_object")
    where = inputs.Problem(problem.path[:-1], problem.why).where or None
    key = problem.key
    if problem.why == "unknown":
        return say(OPERATOR, "eval.golden", why="unknown", where=where, key=problem.got)
    if isinstance(key, int):  # a case or label that is not an object
        return say(OPERATOR, "eval.golden", why="object", where=problem.where)
    if problem.why == "missing" and key in ("base_sha", "head_sha", "labels"):
        why = "labels_required" if key == "labels" else "sha_required"
    else:
        why = _WHY.get(key) or ("empty" if problem.why == "length" else "string")
    return say(OPERATOR, "eval.golden", why=why, where=where, key=key)


def golden_problems(data: Any) -> list[str]:
    """Everything wrong with a golden document: its shape first, then what no type says."""
    found = [_said(problem) for problem in inputs.problems(data, Golden)]
    if found:
        return found
    golden, seen = inputs.decode(data, Golden), set()
    for n, case in enumerate(golden.cases):
        where = f"cases[{n}]"
        if not (case.repository or golden.repository):
            found.append(say(OPERATOR, "eval.golden", why="no_repository", where=where))
        if case.head_sha is None and not case.pr:
            found.append(say(OPERATOR, "eval.golden", why="no_head", where=where))
        if case.id in seen:
            found.append(
                say(OPERATOR, "eval.golden", why="id_twice", where=where, id=repr(case.id))
            )
        seen.add(case.id)
    return found


def _resolve(repository: str, base: Path) -> str:
    if is_url(repository):
        return repository
    path = Path(repository).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def parse_golden(data: Any, path: Path, *, repository: str | None = None) -> Golden:
    """Each case with its repository resolved (relative to the file; `--repo` replaces them)."""
    problems = golden_problems(data)
    if problems:
        raise GoldenError(
            say(OPERATOR, "eval.golden", why="file", path=path, problems=problems, shown=15)
        )
    golden = inputs.decode(data, Golden)
    base = Path.cwd() if repository else path.parent
    cases = [
        replace(
            case,
            repository=_resolve(repository or case.repository or golden.repository, base),
            base_ref=case.base_ref or golden.base_ref,
        )
        for case in golden.cases
    ]
    return replace(golden, name=golden.name or path.stem, cases=cases)


def load_golden(path: Path | str, *, repository: str | None = None) -> Golden:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise GoldenError(
            say(OPERATOR, "eval.golden", why="unreadable", path=path, error=exc.strerror or exc)
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise GoldenError(
            say(OPERATOR, "eval.golden", why="not_json", path=path, error=exc)
        ) from None
    return parse_golden(data, path, repository=repository)


def write_golden(path: Path, data: dict[str, Any]) -> None:
    problems = golden_problems(data)
    if problems:
        raise GoldenError("; ".join(problems[:15]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def schema_text() -> str:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/pr-cockpit/pr-cockpit/bot/evals/golden.schema.json",
        **inputs.json_schema(Golden),
        "title": "PR Cockpit golden file",
    }
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_text())
