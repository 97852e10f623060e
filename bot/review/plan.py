"""Pure planning: which files of a PR get reviewed, and where each finding can be shown."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from bot.agents.submit import Finding
from bot.diff import DiffModel
from bot.records.types import DraftFinding
from bot.repo_config import RepoConfig

_TESTS = re.compile(r"(^|/)(tests?|spec|__tests__)/|(^|/)test_[^/]+$|_test\.[a-z]+$")
_DOCS = re.compile(r"\.(md|rst|txt|adoc)$|(^|/)docs?/")


@dataclass(frozen=True)
class FilePlan:
    reviewed: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (path, why), shown on the PR


def _priority(path: str) -> int:
    if _TESTS.search(path):
        return 1
    if _DOCS.search(path):
        return 2
    return 0


def plan_files(diff: DiffModel, config: RepoConfig, noise: Mapping[str, str]) -> FilePlan:
    """Source first, then tests, then docs; ignored, binary and removed files and the `noise`
    (path → why: generated, vendored, lock and minified files, see `bot.review.noise`) are
    skipped; the rest is cut at `max_files` / `max_diff_bytes`, and every skip says why."""
    skipped: list[tuple[str, str]] = []
    candidates = []
    for path, file in diff.files.items():
        if config.ignores(path):
            skipped.append((path, "matches an `ignore` glob"))
        elif file.status == "binary":
            skipped.append((path, "binary file"))
        elif file.status == "removed":
            skipped.append((path, "file removed"))
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
            skipped.append((path, f"over the limit of {config.max_files} files"))
        elif total + size > config.max_diff_bytes:
            skipped.append((path, f"over the diff size limit ({config.max_diff_bytes} bytes)"))
        else:
            reviewed.append(path)
            total += size
    return FilePlan(tuple(reviewed), tuple(sorted(skipped)))


@dataclass(frozen=True)
class Placement:
    """Where a finding goes: inline on `line` (from `start_line`), or into the body."""

    inline: bool
    line: int | None = None
    start_line: int | None = None
    side: str = "RIGHT"
    reason: str = ""


def place(finding: Finding | DraftFinding, diff: DiffModel) -> Placement:
    file = diff.get(finding.path)
    if file is None:
        return Placement(False, reason="file is not part of this pull request's diff")
    if finding.line is None:
        return Placement(False, reason="no line given")
    side = finding.side
    if finding.end_line and file.same_hunk(finding.line, finding.end_line, side):
        return Placement(True, finding.end_line, finding.line, side)
    if file.commentable(finding.line, side):
        return Placement(True, finding.line, None, side)
    if finding.end_line and file.commentable(finding.end_line, side):
        return Placement(True, finding.end_line, None, side)
    return Placement(False, reason=f"line {finding.line} is not part of the diff")


def placed(found: DraftFinding, diff: DiffModel) -> DraftFinding:
    """A finding placed on the diff: an inline one carries the line(s) GitHub will accept, the
    others keep what the reviewer said."""
    placement = place(found, diff)
    if not placement.inline:
        return replace(found, in_diff=False)
    return replace(
        found,
        in_diff=True,
        line=placement.start_line or placement.line,
        side=placement.side,
        end_line=placement.line if placement.start_line else None,
    )
