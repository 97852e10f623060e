"""`cockpit eval import-martian`: the Martian Code Review Bench's offline golden comments
(withmartian/code-review-benchmark, MIT) as a golden file.

Each entry is a PR URL with free-text comments and a severity; there is no path, line or sha.
Shas come from the GitHub API with `--resolve` (`GET /repos/{owner}/{repo}/pulls/{number}`
against GITHUB_API_URL); without it they stay null, which `cockpit eval run` reads as
"review refs/pull/N/head against the default branch".
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bot.evals.golden import GoldenError
from bot.texts import OPERATOR, say

_PR_URL = re.compile(
    r"^https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+)/pull/(?P<number>\d+)/?$"
)
SOURCE = (
    "withmartian/code-review-benchmark offline/golden_comments (MIT, Copyright (c) 2025 Martian)"
)


@dataclass(frozen=True)
class PullRef:
    owner: str
    name: str
    number: int

    @property
    def clone_url(self) -> str:
        return f"https://github.com/{self.owner}/{self.name}.git"


def parse_pr_url(url: str) -> PullRef:
    match = _PR_URL.match(url.strip())
    if match is None:
        raise GoldenError(say(OPERATOR, "eval.martian_file", why="url", url=repr(url)))
    return PullRef(match["owner"], match["name"], int(match["number"]))


def convert_entries(source: str, entries: Any) -> list[dict[str, Any]]:
    """One Martian file's entries as golden cases (ids `<file>-<n>`, shas pending)."""
    if not isinstance(entries, list):
        raise GoldenError(say(OPERATOR, "eval.martian_file", why="list", where=source))
    cases = []
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str):
            raise GoldenError(
                say(OPERATOR, "eval.martian_file", why="entry", where=f"{source}[{n - 1}]")
            )
        ref = parse_pr_url(entry["url"])
        comments = entry.get("comments")
        if not isinstance(comments, list):
            raise GoldenError(
                say(OPERATOR, "eval.martian_file", why="comments", where=f"{source}[{n - 1}]")
            )
        labels = []
        for comment in comments:
            text = comment.get("comment") if isinstance(comment, dict) else None
            if not isinstance(text, str) or not text.strip():
                raise GoldenError(
                    say(OPERATOR, "eval.martian_file", why="comment", where=f"{source}[{n - 1}]")
                )
            label: dict[str, Any] = {"problem": text.strip()}
            if isinstance(comment.get("severity"), str):
                label["severity"] = comment["severity"]
            labels.append(label)
        case: dict[str, Any] = {
            "id": f"{source}-{n}",
            "pr": ref.number,
            "url": entry["url"],
            "repository": ref.clone_url,
            "title": str(entry.get("pr_title", "")),
            "base_sha": None,
            "head_sha": None,
            "labels": labels,
        }
        if isinstance(entry.get("original_url"), str):
            case["original_url"] = entry["original_url"]
        if isinstance(entry.get("az_comment"), str):
            case["note"] = entry["az_comment"]
        cases.append(case)
    return cases


def martian_golden(directory: Path) -> dict[str, Any]:
    """Every `*.json` of the Martian golden comments folder, as one golden document."""
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


Fetch = Callable[[PullRef], Awaitable[dict[str, Any]]]


class PullNotFound(GoldenError):
    """GitHub answered 404: it does not know this pull request (asking again will not help)."""


@dataclass
class Resolution:
    """What `--resolve` could not do: PRs GitHub does not know, and cases it could not be
    asked about (network, rate limit, a server error), with the reason."""

    unknown: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return len(self.unknown) + len(self.failed)


def github_fetcher(session: aiohttp.ClientSession, api_url: str, token: str | None) -> Fetch:
    """`GET /repos/{owner}/{repo}/pulls/{number}` on the API base (never a URL from data)."""
    headers = {"Accept": "application/vnd.github+json", "User-Agent": "pr-cockpit-eval"}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    async def fetch(ref: PullRef) -> dict[str, Any]:
        url = f"{api_url.rstrip('/')}/repos/{ref.owner}/{ref.name}/pulls/{ref.number}"
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(30)) as resp:
            if resp.status == 404:
                raise PullNotFound(say(OPERATOR, "eval.martian_file", why="unknown_pull", ref=ref))
            if resp.status != 200:
                raise GoldenError(
                    say(OPERATOR, "eval.martian_file", why="status", ref=ref, status=resp.status)
                )
            return await resp.json()

    return fetch


async def resolve_shas(golden: dict[str, Any], fetch: Fetch, *, concurrency: int = 4) -> Resolution:
    """Fill in each case's base and head sha from GitHub; says which stay pending and why."""
    limit = asyncio.Semaphore(concurrency)
    resolution = Resolution()

    async def one(case: dict[str, Any]) -> None:
        async with limit:
            try:
                data = await fetch(parse_pr_url(case["url"]))
            except PullNotFound:
                resolution.unknown.append(case["id"])
                return
            except (GoldenError, ValueError) as exc:
                resolution.failed.append((case["id"], str(exc)))
                return
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = say(
                    OPERATOR, "eval.martian_file", why="unreachable", error_class=type(exc).__name__
                )
                resolution.failed.append((case["id"], reason))
                return
        head, base = data.get("head") or {}, data.get("base") or {}
        if not isinstance(head.get("sha"), str) or not isinstance(base.get("sha"), str):
            resolution.failed.append(
                (case["id"], say(OPERATOR, "eval.martian_file", why="no_shas"))
            )
            return
        case["head_sha"], case["base_sha"] = head["sha"], base["sha"]
        if isinstance(base.get("ref"), str):
            case["base_ref"] = base["ref"]

    await asyncio.gather(*(one(case) for case in golden["cases"]))
    if resolution.pending:
        golden["note"] = say(OPERATOR, "eval.martian_file", why="pending", count=resolution.pending)
    else:
        golden.pop("note", None)
    return resolution


async def resolve_with_github(golden: dict[str, Any], api_url: str) -> Resolution:
    token = os.environ.get("GITHUB_TOKEN") or None
    async with aiohttp.ClientSession() as session:
        return await resolve_shas(golden, github_fetcher(session, api_url, token))
