"""Golden files: labelled PRs at fixed shas (format in README and `golden.schema.json`)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bot.texts import OPERATOR, say

SCHEMA_FILE = Path(__file__).with_name("golden.schema.json")
URL_SCHEMES = ("https://", "http://", "file://")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_CASE_ID = re.compile(r"[A-Za-z0-9._:/-]+")
_TOP_KEYS = {"version", "name", "description", "note", "repository", "base_ref", "cases"}
_CASE_KEYS = {
    "id",
    "pr",
    "url",
    "original_url",
    "repository",
    "title",
    "body",
    "base_ref",
    "base_sha",
    "head_sha",
    "labels",
    "known_false_positives",
    "note",
}
_LABEL_KEYS = {"path", "line", "title", "problem", "severity"}


class GoldenError(ValueError):
    """A golden file that cannot be used; the message lists what is wrong."""


@dataclass(frozen=True)
class Label:
    problem: str
    path: str | None = None
    line: int | None = None
    title: str | None = None
    severity: str | None = None


@dataclass(frozen=True)
class Case:
    id: str
    repository: str  # a clone URL or an absolute local path
    base_sha: str | None
    head_sha: str | None
    labels: tuple[Label, ...]
    pr: int | None = None
    url: str | None = None
    title: str = ""
    body: str = ""
    base_ref: str | None = None
    known_false_positives: tuple[Label, ...] = ()
    note: str | None = None


@dataclass(frozen=True)
class Golden:
    path: Path
    name: str
    cases: tuple[Case, ...]
    description: str = ""
    note: str | None = None
    labels: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", sum(len(c.labels) for c in self.cases))


def is_url(repository: str) -> bool:
    return repository.startswith(URL_SCHEMES)


def repository_key(repository: str) -> str:
    """A stable `owner/name` for the eval's mirror of a repository."""
    if is_url(repository) and not repository.startswith("file://"):
        parts = urlparse(repository).path.strip("/").removesuffix(".git").split("/")
        if len(parts) >= 2 and all(parts[-2:]):
            return f"{parts[-2]}/{parts[-1]}"
    digest = hashlib.sha256(repository.encode()).hexdigest()[:10]
    name = Path(urlparse(repository).path if is_url(repository) else repository).name
    return f"local/{name or 'repo'}-{digest}"


def _label_problems(item: Any, where: str) -> list[str]:
    if not isinstance(item, dict):
        return [say(OPERATOR, "eval.golden", why="object", where=where)]
    problems = [
        say(OPERATOR, "eval.golden", why="unknown", where=where, key=k)
        for k in sorted(set(item) - _LABEL_KEYS)
    ]
    problem = item.get("problem")
    if not isinstance(problem, str) or not problem.strip():
        problems.append(say(OPERATOR, "eval.golden", why="non_empty", where=where, key="problem"))
    for key in ("path", "title", "severity"):
        if key in item and not isinstance(item[key], str):
            problems.append(say(OPERATOR, "eval.golden", why="string", where=where, key=key))
    if "path" in item and isinstance(item["path"], str) and not item["path"]:
        problems.append(say(OPERATOR, "eval.golden", why="empty", where=where, key="path"))
    line = item.get("line")
    if "line" in item and (isinstance(line, bool) or not isinstance(line, int) or line < 1):
        problems.append(say(OPERATOR, "eval.golden", why="positive", where=where, key="line"))
    return problems


def _case_problems(item: Any, where: str, has_repository: bool) -> list[str]:
    if not isinstance(item, dict):
        return [say(OPERATOR, "eval.golden", why="object", where=where)]
    problems = [
        say(OPERATOR, "eval.golden", why="unknown", where=where, key=k)
        for k in sorted(set(item) - _CASE_KEYS)
    ]
    case_id = item.get("id")
    if not isinstance(case_id, str) or not _CASE_ID.fullmatch(case_id):
        problems.append(say(OPERATOR, "eval.golden", why="case_id", where=where))
    for key in ("base_sha", "head_sha"):
        if key not in item:
            problems.append(say(OPERATOR, "eval.golden", why="sha_required", where=where, key=key))
        elif item[key] is not None and (
            not isinstance(item[key], str) or not _SHA.fullmatch(item[key])
        ):
            problems.append(say(OPERATOR, "eval.golden", why="sha", where=where, key=key))
    pr = item.get("pr")
    if "pr" in item and (isinstance(pr, bool) or not isinstance(pr, int) or pr < 1):
        problems.append(say(OPERATOR, "eval.golden", why="positive", where=where, key="pr"))
    for key in ("url", "original_url", "repository", "title", "body", "base_ref", "note"):
        if key in item and not isinstance(item[key], str):
            problems.append(say(OPERATOR, "eval.golden", why="string", where=where, key=key))
    if "repository" in item and item["repository"] == "":
        problems.append(say(OPERATOR, "eval.golden", why="empty", where=where, key="repository"))
    if not has_repository and not item.get("repository"):
        problems.append(say(OPERATOR, "eval.golden", why="no_repository", where=where))
    if item.get("head_sha") is None and "pr" not in item and "head_sha" in item:
        problems.append(say(OPERATOR, "eval.golden", why="no_head", where=where))
    for key in ("labels", "known_false_positives"):
        if key not in item:
            if key == "labels":
                problems.append(say(OPERATOR, "eval.golden", why="labels_required", where=where))
            continue
        if not isinstance(item[key], list):
            problems.append(say(OPERATOR, "eval.golden", why="list", where=where, key=key))
            continue
        for n, label in enumerate(item[key]):
            problems.extend(_label_problems(label, f"{where}.{key}[{n}]"))
    return problems


def golden_problems(data: Any) -> list[str]:
    """Everything wrong with a golden document (empty when it is usable)."""
    if not isinstance(data, dict):
        return [say(OPERATOR, "eval.golden", why="file_object")]
    problems = [
        say(OPERATOR, "eval.golden", why="unknown", where=None, key=k)
        for k in sorted(set(data) - _TOP_KEYS)
    ]
    if "version" in data and (type(data["version"]) is not int or data["version"] != 1):
        problems.append(say(OPERATOR, "eval.golden", why="version"))
    for key in ("name", "description", "note", "repository", "base_ref"):
        if key in data and not isinstance(data[key], str):
            problems.append(say(OPERATOR, "eval.golden", why="string", where=None, key=key))
    if data.get("repository") == "":
        problems.append(say(OPERATOR, "eval.golden", why="empty", where=None, key="repository"))
    cases = data.get("cases")
    if not isinstance(cases, list):
        return [*problems, say(OPERATOR, "eval.golden", why="list", where=None, key="cases")]
    has_repository = isinstance(data.get("repository"), str) and bool(data["repository"])
    seen: set[str] = set()
    for n, case in enumerate(cases):
        problems.extend(_case_problems(case, f"cases[{n}]", has_repository))
        if isinstance(case, dict) and isinstance(case.get("id"), str):
            if case["id"] in seen:
                problems.append(
                    say(
                        OPERATOR,
                        "eval.golden",
                        why="id_twice",
                        where=f"cases[{n}]",
                        id=repr(case["id"]),
                    )
                )
            seen.add(case["id"])
    return problems


def _resolve(repository: str, base: Path) -> str:
    if is_url(repository):
        return repository
    path = Path(repository).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def _labels(items: list[dict[str, Any]]) -> tuple[Label, ...]:
    """Validated labels (their keys are Label's fields) as Labels."""
    return tuple(Label(**{**item, "problem": item["problem"].strip()}) for item in items)


def parse_golden(data: Any, path: Path, *, repository: str | None = None) -> Golden:
    """A validated golden document; `repository` (from `--repo`) replaces its repositories."""
    problems = golden_problems(data)
    if problems:
        raise GoldenError(
            say(OPERATOR, "eval.golden", why="file", path=path, problems=problems, shown=15)
        )
    base = path.parent
    cases = []
    for item in data["cases"]:
        where = repository or item.get("repository") or data["repository"]
        cases.append(
            Case(
                id=item["id"],
                repository=_resolve(where, Path.cwd() if repository else base),
                base_sha=item["base_sha"],
                head_sha=item["head_sha"],
                labels=_labels(item["labels"]),
                pr=item.get("pr"),
                url=item.get("url"),
                title=item.get("title", ""),
                body=item.get("body", ""),
                base_ref=item.get("base_ref") or data.get("base_ref"),
                known_false_positives=_labels(item.get("known_false_positives", [])),
                note=item.get("note"),
            )
        )
    return Golden(
        path=path,
        name=data.get("name") or path.stem,
        cases=tuple(cases),
        description=data.get("description", ""),
        note=data.get("note"),
    )


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
    """Write a golden document (validated first) as stable, reviewable JSON."""
    problems = golden_problems(data)
    if problems:
        raise GoldenError("; ".join(problems[:15]))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
