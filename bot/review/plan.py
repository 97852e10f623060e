"""Pure planning: which files of a PR get reviewed, and where each finding can be shown."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bot.diff import DiffModel
from bot.records.types import DraftFinding
from bot.repo_config import RepoConfig
from bot.texts import PEOPLE, say

_TESTS = re.compile(r"(^|/)(tests?|spec|__tests__)/|(^|/)test_[^/]+$|_test\.[a-z]+$")
_DOCS = re.compile(r"\.(md|rst|txt|adoc)$|(^|/)docs?/")
# What a test file's name says it tests: `test_calc.py`, `calc_test.go`, `calc.test.ts`,
# `calc.spec.js`, `CalcTest.java` all test `calc`.
_TESTED = re.compile(r"^test_|(?:[._-](?:test|spec)|Tests?)$")

# Above the first request's size budget a PR is reviewed in groups of related files, each in a
# session of its own: about 8-10 files, a group closing at a folder's end once it has 8, never
# past 10 (a file and its tests stay together), nor, with more than one file, past the budget.
GROUP_MAX = 10
GROUP_MIN = 8


@dataclass(frozen=True)
class FilePlan:
    reviewed: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why), shown on the PR
    ignored: tuple[str, ...] = ()  # matched by an `ignore` glob
    # path → why: the changed files the reviewer's diff leaves out and no finding may be on
    # (those matching an `ignore` glob, and the noise)
    left_out: Mapping[str, str] = field(default_factory=dict)


def is_test(path: str) -> bool:
    return bool(_TESTS.search(path))


def _priority(path: str) -> int:
    if is_test(path):
        return 1
    if _DOCS.search(path):
        return 2
    return 0


def plan_files(diff: DiffModel, config: RepoConfig, noise: Mapping[str, str]) -> FilePlan:
    """Source first, then tests, then docs; ignored, binary and removed files and the `noise`
    (path → why: generated, vendored, lock and minified files, see `bot.review.noise`) are
    skipped; the rest is cut at `max_files` / `max_diff_bytes`, and every skip says why. The
    ignored files and the noise are `left_out`: the reviewer's diff does not show them, and
    findings on them are dropped (`bot.review.pipeline`)."""
    skipped: list[tuple[str, str]] = []
    candidates = []
    ignored, matched = [], say(PEOPLE, "skipped", why="ignored")
    for path, file in diff.files.items():
        if config.ignores(path):
            ignored.append(path)
            skipped.append((path, matched))
        elif file.status == "binary":
            skipped.append((path, say(PEOPLE, "skipped", why="binary")))
        elif file.status == "removed":
            skipped.append((path, say(PEOPLE, "skipped", why="removed")))
        elif path in noise:
            skipped.append((path, noise[path]))
        else:
            candidates.append(path)
    candidates.sort(key=lambda p: (_priority(p), p))
    reviewed: list[str] = []
    total = 0
    for path in candidates:
        size = diff.files[path].patch_bytes
        if len(reviewed) >= config.max_files:
            skipped.append((path, say(PEOPLE, "skipped", why="files", limit=config.max_files)))
        elif total + size > config.max_diff_bytes:
            skipped.append((path, say(PEOPLE, "skipped", why="bytes", limit=config.max_diff_bytes)))
        else:
            reviewed.append(path)
            total += size
    left_out = {**noise, **dict.fromkeys(ignored, matched)}
    return FilePlan(tuple(reviewed), tuple(sorted(skipped)), tuple(sorted(ignored)), left_out)


def placed(found: DraftFinding, diff: DiffModel) -> DraftFinding:
    """A finding placed on the diff: an inline one carries the line(s) GitHub will accept (its
    range when that lies in one hunk, else its first line, else its last), the others keep
    what the reviewer said."""
    file = diff.get(found.path)
    line, end, side = found.line, found.end_line, found.side
    if file is None or line is None:
        return replace(found, in_diff=False)
    if end and file.same_hunk(line, end, side):
        return replace(found, in_diff=True)
    if file.commentable(line, side):
        return replace(found, in_diff=True, end_line=None)
    if end and file.commentable(end, side):
        return replace(found, in_diff=True, line=end, end_line=None)
    return replace(found, in_diff=False)


def _stem(path: str) -> str:
    return posixpath.basename(path).split(".", 1)[0]


def grouped(
    reviewed: Sequence[str], sizes: Mapping[str, int], budget: int
) -> tuple[tuple[str, ...], ...]:
    """The files under review in groups of related ones (the same folder, a file and its
    tests), each in review order; one group when their diffs fit the `budget` together.
    Folders come in path order, so a package's subfolders follow it."""
    if sum(sizes[p] for p in reviewed) <= budget:
        return (tuple(reviewed),)
    order = {path: n for n, path in enumerate(reviewed)}
    sources: dict[str, str] = {}  # stem → the first source file of that name
    for path in reviewed:
        if not is_test(path):
            sources.setdefault(_stem(path).casefold(), path)
    units: dict[str, list[str]] = {}  # a source file (or a test of none) → its files
    for path in reviewed:
        subject = _TESTED.sub("", _stem(path)).casefold() if is_test(path) else None
        anchor = sources.get(subject, path) if subject else path
        units.setdefault(anchor, []).append(path)
    ranked = sorted(units.items(), key=lambda unit: (posixpath.dirname(unit[0]), unit[0]))
    groups: list[list[str]] = []
    folder, size = None, 0
    for anchor, files in ranked:
        here, more = posixpath.dirname(anchor), sum(sizes[p] for p in files)
        group = groups[-1] if groups else []
        full = len(group) + len(files) > GROUP_MAX or size + more > budget
        turn = len(group) >= GROUP_MIN and here != folder
        if not groups or (group and (full or turn)):
            groups.append([])
            size = 0
        groups[-1].extend(files)
        folder, size = here, size + more
    return tuple(tuple(sorted(group, key=order.__getitem__)) for group in groups)


def in_order(items: Sequence[Any], number: int, passes: int) -> tuple[Any, ...]:
    """The files (or groups) as pass `number` of `passes` reads them: review order turned
    round by its share of them, so each pass starts elsewhere (with as many items as passes,
    no two passes start with the same one) and reads what others read first later."""
    start = (number - 1) * len(items) // max(passes, 1)
    return (*items[start:], *items[:start])
