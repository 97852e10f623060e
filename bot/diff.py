"""The PR's diff (merge-base → head) as the set of lines a review comment may sit on."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

import unidiff


@dataclass
class FileDiff:
    path: str
    old_path: str | None
    status: str  # added | removed | modified | renamed | binary
    patch_bytes: int = 0
    # side → {line number: hunk index}; a range comment must stay inside one hunk
    lines: dict[str, dict[int, int]] = field(default_factory=lambda: {"LEFT": {}, "RIGHT": {}})
    added: int = 0
    removed: int = 0

    def commentable(self, line: int, side: str = "RIGHT") -> bool:
        return line in self.lines.get(side, {})

    def same_hunk(self, start: int, end: int, side: str = "RIGHT") -> bool:
        hunks = self.lines.get(side, {})
        return start in hunks and end in hunks and hunks[start] == hunks[end] and start <= end


@dataclass
class DiffModel:
    files: dict[str, FileDiff]

    def get(self, path: str) -> FileDiff | None:
        return self.files.get(path)


def unquote(name: str) -> str:
    """Undo git's C-style quoting of unusual file names (`"dir/\\303\\274.py"` → `dir/ü.py`)."""
    if len(name) < 2 or not (name.startswith('"') and name.endswith('"')):
        return name
    return codecs.escape_decode(name[1:-1].encode())[0].decode("utf-8", errors="replace")


def _strip_prefix(name: str | None) -> str | None:
    if name is None or name == "/dev/null":
        return None
    name = unquote(name.rstrip("\t"))
    return name[2:] if name[:2] in ("a/", "b/") else name


def parse_diff(text: str) -> DiffModel:
    files: dict[str, FileDiff] = {}
    for patched in unidiff.PatchSet(text):
        old_path = _strip_prefix(patched.source_file)
        path = _strip_prefix(patched.target_file) or old_path or patched.path
        if patched.is_binary_file:
            status = "binary"
        elif patched.is_added_file:
            status = "added"
        elif patched.is_removed_file:
            status = "removed"
            path = old_path or path
        elif patched.is_rename:
            status = "renamed"
        else:
            status = "modified"
        diff = FileDiff(
            path=path,
            old_path=old_path if old_path != path else None,
            status=status,
            patch_bytes=len(str(patched).encode()),
        )
        for index, hunk in enumerate(patched):
            for line in hunk:
                if line.is_added:
                    diff.lines["RIGHT"][line.target_line_no] = index
                    diff.added += 1
                elif line.is_removed:
                    diff.lines["LEFT"][line.source_line_no] = index
                    diff.removed += 1
                elif line.is_context:
                    diff.lines["RIGHT"][line.target_line_no] = index
                    diff.lines["LEFT"][line.source_line_no] = index
        files[path] = diff
    return DiffModel(files)


_HUNK = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def numbered(patch: str) -> str:
    """One file's patch with each line's number in the head version in a gutter before it
    (blank for removed lines, headers and `\\ No newline` notes), so a reviewer can point at
    a line without reading the file."""
    lines = patch.removesuffix("\n").split("\n")
    numbers: list[int | None] = []
    head: int | None = None
    for line in lines:
        hunk = _HUNK.match(line)
        if hunk:
            head = int(hunk.group(1))
            numbers.append(None)
        elif head is not None and line[:1] in (" ", "+"):
            numbers.append(head)
            head += 1
        else:
            numbers.append(None)
    width = len(str(max((n for n in numbers if n is not None), default=0)))
    return "\n".join(
        f"{'' if n is None else n:>{width}} {line}" for n, line in zip(numbers, lines, strict=True)
    )
