"""`cockpit eval import-martian`: the Martian Code Review Bench's golden comments, converted."""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import aiohttp
import msgspec
from msgspec import UNSET, Meta, UnsetType

from bot import inputs
from bot.evals.golden import Case, GoldenError, Label
from bot.texts import OPERATOR, say

_PR_URL = re.compile(
    r"^https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+)/pull/(?P<number>\d+)/?$"
)
SOURCE = (
    "withmartian/code-review-benchmark offline/golden_comments (MIT, Copyright (c) 2025 Martian)"
)


class Comment(msgspec.Struct):
    comment: Annotated[str, Meta(pattern=r"\S")]
    severity: str | UnsetType = UNSET


class Entry(msgspec.Struct):
    """A pull request of the bench: free-text comments, with no path, line or sha."""

    url: str
    comments: list[Comment]
    pr_title: str = ""
    original_url: str | UnsetType = UNSET
    az_comment: str | UnsetType = UNSET


class Side(msgspec.Struct):
    sha: str
    ref: str | None = None


class Pull(msgspec.Struct):
    head: Side
    base: Side


@dataclass(frozen=True)
class PullRef:
    owner: str
    name: str
    number: int


def parse_pr_url(url: str) -> PullRef:
    match = _PR_URL.match(url.strip())
    if match is None:
        raise GoldenError(say(OPERATOR, "eval.martian_file", why="url", url=repr(url)))
    return PullRef(match["owner"], match["name"], int(match["number"]))


def convert_entries(source: str, entries: Any) -> list[dict[str, Any]]:
    for problem in inputs.problems(entries, list[Entry])[:1]:
        path, inside = problem.path, problem.path[1:2] == ("comments",)
        why = "comment" if inside and len(path) > 2 else "comments" if inside else "entry"
        where = f"{source}[{path[0]}]" if path else source
        raise GoldenError(
            say(OPERATOR, "eval.martian_file", why=why if path else "list", where=where)
        )
    cases = []
    for n, entry in enumerate(inputs.decode(entries, list[Entry]), start=1):
        ref = parse_pr_url(entry.url)
        case = Case(
            id=f"{source}-{n}",
            pr=ref.number,
            url=entry.url,
            original_url=entry.original_url,
            repository=f"https://github.com/{ref.owner}/{ref.name}.git",
            title=entry.pr_title,
            base_sha=None,
            head_sha=None,
            labels=[Label(problem=c.comment, severity=c.severity) for c in entry.comments],
            note=entry.az_comment,
        )
        cases.append(msgspec.to_builtins(case))
    return cases


def martian_golden(directory: Path) -> dict[str, Any]:
    files = sorted(p for p in directory.glob("*.json") if p.is_file())
    if not files:
        raise GoldenError(say(OPERATOR, "eval.martian_file", why="no_files", where=directory))
    cases = []
    for path in files:
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GoldenError(
                say(OPERATOR, "eval.martian_file", why="not_json", where=path, error=exc)
            ) from None
        cases.extend(convert_entries(path.stem, entries))
    return {
        "version": 1,
        "name": "martian-offline",
        "description": say(OPERATOR, "eval.martian_file", why="description", source=SOURCE),
        "note": say(OPERATOR, "eval.martian_file", why="note"),
        "cases": cases,
    }


@dataclass
class Resolution:
    """PRs GitHub does not know, and cases it could not be asked about, with the reason."""

    unknown: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return len(self.unknown) + len(self.failed)


async def _fetch(session: aiohttp.ClientSession, api_url: str, ref: PullRef) -> Pull | None:
    """None: GitHub answered 404, it does not know this pull request (asking again will not
    help)."""
    # On the API base: never a URL from the data.
    url = f"{api_url.rstrip('/')}/repos/{ref.owner}/{ref.name}/pulls/{ref.number}"
    async with session.get(url, timeout=aiohttp.ClientTimeout(30)) as resp:
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise GoldenError(
                say(OPERATOR, "eval.martian_file", why="status", ref=ref, status=resp.status)
            )
        try:
            return msgspec.json.decode(await resp.read(), type=Pull)
        except msgspec.DecodeError:
            raise GoldenError(say(OPERATOR, "eval.martian_file", why="no_shas")) from None


async def resolve_with_github(golden: dict[str, Any], api_url: str) -> Resolution:
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "pr-cockpit-eval"}
    if token := os.environ.get("GITHUB_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    limit, resolution = asyncio.Semaphore(4), Resolution()

    async def one(session: aiohttp.ClientSession, case: dict[str, Any]) -> None:
        async with limit:
            try:
                pull = await _fetch(session, api_url, parse_pr_url(case["url"]))
            except ValueError as exc:
                resolution.failed.append((case["id"], str(exc)))
                return
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = say(
                    OPERATOR, "eval.martian_file", why="unreachable", error_class=type(exc).__name__
                )
                resolution.failed.append((case["id"], reason))
                return
        if pull is None:
            resolution.unknown.append(case["id"])
            return
        case["head_sha"], case["base_sha"] = pull.head.sha, pull.base.sha
        if pull.base.ref is not None:
            case["base_ref"] = pull.base.ref

    async with aiohttp.ClientSession(headers=headers) as session:
        await asyncio.gather(*(one(session, case) for case in golden["cases"]))
    if resolution.pending:
        golden["note"] = say(OPERATOR, "eval.martian_file", why="pending", count=resolution.pending)
    else:
        golden.pop("note", None)
    return resolution
