"""The reviewer's read-only tools over the git object store at the head sha (no write, shell or
network tool; nothing from the PR is executed or checked out)."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from bot.agents.answers import Positive, told, tool
from bot.inputs import decode, problems
from bot.texts import MODEL, say
from bot.worktrees import GIT_TIMEOUT, GitError, Worktree, truncated

MAX_READ_BYTES = 256 * 1024  # read at most this much of a blob
MAX_OUTPUT_CHARS = 24_000  # any one tool answer
MAX_LINES = 400
MAX_LIST_ENTRIES = 500
MAX_PATTERN_CHARS = 300
SEARCH_TIMEOUT = 5.0
MAX_GIT_BYTES = MAX_OUTPUT_CHARS * 2  # git stops after this much (the answer is cut further)
RAW_DIFF_BYTES = 64 << 20  # `git diff --raw` of a PR (about 130 bytes a file)
# `git_diff` answers a page at a time: whole lines, at most this many characters (room is left
# for its notes under MAX_OUTPUT_CHARS); git stops after MAX_PAGED_BYTES (about 200 pages).
PAGE_CHARS = 20_000
MAX_PAGED_BYTES = 4 << 20
_DIFF_PATH = re.compile(r"^(?:\+\+\+ b/|--- a/)(.+)$", re.M)
_DIFF_HEADER = re.compile(r"^diff --git a/(.+)$", re.M)


class ToolError(Exception):
    def __init__(self, why: str, **context: Any) -> None:
        super().__init__(say(MODEL, "tool", why=why, **context))


class ReadFile(msgspec.Struct, forbid_unknown_fields=True):
    """Read a file of the PR's head commit, with line numbers. Optional 1-based
    start_line/end_line select a range (at most 400 lines per call)."""

    path: str
    start_line: Positive | None = None
    end_line: Positive | None = None


class ListFiles(msgspec.Struct, forbid_unknown_fields=True):
    """List a directory of the PR's head commit (the repository root if no path).
    Directories end with '/'."""

    path: str | None = None


class SearchCode(msgspec.Struct, forbid_unknown_fields=True):
    """Search the head commit with a regular expression (POSIX extended); returns
    path:line:text matches. Optional path limits the search."""

    pattern: Annotated[str, Meta(pattern=f"^[^\\n]{{1,{MAX_PATTERN_CHARS}}}$")]
    path: str | None = None


class GitDiff(msgspec.Struct, forbid_unknown_fields=True):
    """Unified diff of the pull request (merge-base of base and head → head), for the whole
    PR or one path. A long diff comes in pages of whole lines (about 20,000 characters
    each); optional 1-based page picks one, and each page says whether more follow."""

    path: str | None = None
    page: Positive | None = None


class GitLog(msgspec.Struct, forbid_unknown_fields=True):
    """Commit history of the head (optionally of one path): short sha, author, date,
    subject."""

    path: str | None = None
    max_count: Annotated[int, Meta(ge=1, le=100)] | None = None


TOOLS = {
    "read_file": ReadFile,
    "list_files": ListFiles,
    "search_code": SearchCode,
    "git_diff": GitDiff,
    "git_log": GitLog,
}
TOOL_DEFINITIONS = [tool(name, shape) for name, shape in TOOLS.items()]


def clean_path(raw: str | None, *, allow_root: bool = False) -> str:
    """`..`, absolute paths and `.git` are refused before git is asked; never touches the disk."""
    raw = raw or ""  # no path: "" and "." come out as no parts, below
    if "\x00" in raw or len(raw) > 4096:
        raise ToolError("path_invalid")
    if raw.startswith("/") or raw.startswith("\\") or (len(raw) > 1 and raw[1] == ":"):
        raise ToolError("path_absolute")
    parts = [p for p in PurePosixPath(raw.replace("\\", "/")).parts if p != "."]
    if any(p == ".." for p in parts):
        raise ToolError("path_parent")
    if any(p.lower() == ".git" for p in parts):
        raise ToolError("path_git")
    if not parts and not allow_root:
        raise ToolError("path_required")
    return "/".join(parts)


def cap(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + "\n" + say(MODEL, "tool", why="truncated", limit=limit)


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    kind: str
    oid: str
    path: str


def _tree_entries(out: bytes) -> Iterator[TreeEntry]:
    for record in out.split(b"\x00"):
        if record:
            meta, _, name = record.partition(b"\t")
            mode, kind, oid = meta.decode().split()
            yield TreeEntry(mode, kind, oid, name.decode(errors="replace"))


class Toolbox:
    """The read-only tools for one review. `left_out`: changed files the review leaves out
    (path → why): `git_diff` does not show them, `read_file` says so; `since`: a re-review's
    last reviewed commit, where `git_diff` starts; `reviewed`: the files under review, of which
    `coverage` counts those the model has seen."""

    definitions = TOOL_DEFINITIONS

    def __init__(
        self,
        tree: Worktree,
        *,
        on_call: Callable[[str], Awaitable[None]] | None = None,
        left_out: Mapping[str, str] | None = None,
        since: str | None = None,
        reviewed: Iterable[str] = (),
    ) -> None:
        self.tree = tree
        self.reviewed = frozenset(reviewed)
        self.seen: set[str] = set()  # paths shown by `git_diff` or `read_file`
        self.on_call = on_call
        self.left_out = dict(left_out or {})
        self.calls = 0
        self.start = since or tree.merge_base
        self._shown: str | None = None  # the tree `git_diff` compares with (see `_shown_tree`)

    async def call(self, name: str, arguments: Any) -> str:
        """Errors come back as text for the model, never as exceptions."""
        self.calls += 1
        if self.on_call is not None:
            await self.on_call(name)
        shape = TOOLS.get(name)
        if shape is None:
            return say(MODEL, "tool", why="unknown_tool", tool=repr(name), tools=sorted(TOOLS))
        found = problems(arguments, shape)
        if found:
            return say(MODEL, "tool", why="error", error=told(found))
        try:
            answer = cap(await getattr(self, f"_tool_{name}")(decode(arguments, shape)))
        except (ToolError, GitError) as exc:
            return say(MODEL, "tool", why="error", error=exc)
        if name == "git_diff":  # what the answer shows, cut to its cap
            self.seen.update(diff_paths(answer))
        return answer

    def coverage(self) -> tuple[int, int]:
        """(files under review the model has seen, files under review)."""
        return len(self.seen & self.reviewed), len(self.reviewed)

    async def _entry(self, path: str) -> TreeEntry | None:
        out = await self.tree.git("ls-tree", "-z", "--full-tree", self.tree.head_sha, "--", path)
        return next((entry for entry in _tree_entries(out) if entry.path == path), None)

    async def _tool_read_file(self, args: ReadFile) -> str:
        """A file the review leaves out can still be read (what it says may explain the
        code under review); the answer starts by saying it is not part of the review."""
        path = clean_path(args.path)
        answer = await self._read_file(path, args.start_line or 1, args.end_line)
        if path not in self.left_out:
            return answer
        reason = self.left_out[path]
        return say(MODEL, "tool", why="left_out_read", path=path, reason=reason) + "\n" + answer

    async def _read_file(self, path: str, start: int, end: int | None) -> str:
        entry = await self._entry(path)
        if entry is None:
            return say(MODEL, "tool", why="missing", path=path)
        if entry.kind == "tree":
            return say(MODEL, "tool", why="directory", path=path)
        if entry.kind == "commit":
            return say(MODEL, "tool", why="submodule", path=path, oid=entry.oid)
        if entry.mode == "120000":
            target = await self.tree.git("cat-file", "blob", entry.oid, limit=4096)
            shown = repr(target.decode(errors="replace"))
            return say(MODEL, "tool", why="symlink", path=path, target=shown)
        size = int((await self.tree.git("cat-file", "-s", entry.oid)).decode().strip())
        data = await self.tree.git("cat-file", "blob", entry.oid, limit=MAX_READ_BYTES)
        self.seen.add(path)
        if b"\x00" in data[:8192]:
            return say(MODEL, "tool", why="binary", path=path, size=size)
        clipped = size > MAX_READ_BYTES
        lines = data[:MAX_READ_BYTES].decode("utf-8", errors="replace").splitlines()
        if clipped and lines:
            lines = lines[:-1]  # the last line may be cut mid-way
        end = min(end or start + MAX_LINES - 1, start + MAX_LINES - 1, len(lines))
        if start > max(len(lines), 1):
            return say(MODEL, "tool", why="past_end", path=path, lines=len(lines))
        width = len(str(end))
        body = "\n".join(f"{n:>{width}}| {lines[n - 1]}" for n in range(start, end + 1))
        notes = []
        if end < len(lines):
            more = say(MODEL, "tool", why="more_lines", start=start, end=end, lines=len(lines))
            notes.append(more)
        if clipped:
            notes.append(say(MODEL, "tool", why="clipped", size=size, read=MAX_READ_BYTES))
        return "\n".join([body, *notes])

    async def _tool_list_files(self, args: ListFiles) -> str:
        path = clean_path(args.path, allow_root=True)
        if path:
            entry = await self._entry(path)
            if entry is None:
                return say(MODEL, "tool", why="missing", path=path)
            if entry.kind != "tree":
                return say(MODEL, "tool", why="not_directory", path=path)
        spec = [f"{path}/"] if path else []
        head = self.tree.head_sha
        out = await self.tree.git("ls-tree", "-z", head, "--", *spec, limit=MAX_GIT_BYTES)
        cut = truncated(out, MAX_GIT_BYTES)
        if cut:  # the last record may be cut mid-way
            out = out[:MAX_GIT_BYTES].rpartition(b"\x00")[0]
        names = [e.path + ("/" if e.kind == "tree" else "") for e in _tree_entries(out)]
        shown = [json.dumps(n)[1:-1] if not n.isprintable() else n for n in names]
        text = "\n".join(shown[:MAX_LIST_ENTRIES])
        if len(names) > MAX_LIST_ENTRIES:
            more = len(names) - MAX_LIST_ENTRIES
            text += "\n" + say(MODEL, "tool", why="more_entries", more=more)
        if cut:
            text += "\n" + say(MODEL, "tool", why="git_truncated", limit=MAX_GIT_BYTES)
        return text or say(MODEL, "tool", why="empty")

    async def _tool_search_code(self, args: SearchCode) -> str:
        path = clean_path(args.path, allow_root=True)
        await self.tree.fetch_blobs(path)  # a partial mirror: one request, not one per file
        try:
            out = await self.tree.git(
                *["grep", "-n", "-I", "-E", "--no-color", "--max-count=20", "-e"],
                args.pattern,
                self.tree.head_sha,
                "--",
                *([path] if path else []),
                timeout=SEARCH_TIMEOUT,
                limit=MAX_GIT_BYTES,
                check=False,
            )
        except GitError:
            raise ToolError("search_timed_out", seconds=SEARCH_TIMEOUT) from None
        prefix = f"{self.tree.head_sha}:".encode()
        lines = [line.removeprefix(prefix) for line in out[:MAX_GIT_BYTES].splitlines()]
        text = "\n".join(line.decode("utf-8", errors="replace")[:500] for line in lines)
        if truncated(out, MAX_GIT_BYTES):
            text += "\n" + say(MODEL, "tool", why="git_truncated", limit=MAX_GIT_BYTES)
        return text or say(MODEL, "tool", why="no_matches")

    async def _tool_git_diff(self, args: GitDiff) -> str:
        path = clean_path(args.path, allow_root=True)
        if path in self.left_out:
            return say(MODEL, "tool", why="left_out_path", path=path, reason=self.left_out[path])
        hidden = sum(1 for p in self.left_out if _under(p, path))
        out = await self.tree.git(
            *["diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"],
            self.start,
            await self._shown_tree() if hidden else self.tree.head_sha,
            "--",
            *([path] if path else []),
            limit=MAX_PAGED_BYTES,
        )
        cut = truncated(out, MAX_PAGED_BYTES)
        text = out[:MAX_PAGED_BYTES].decode("utf-8", errors="replace")
        if cut:  # the last line may be cut mid-way
            text = text.rpartition("\n")[0] + "\n"
        pages = paged(text)
        number = args.page or 1
        notes = [say(MODEL, "tool", why="left_out", count=hidden)] if hidden else []
        if not pages:
            return "\n".join(notes) or say(MODEL, "tool", why="no_changes")
        if number > len(pages):
            return say(MODEL, "tool", why="past_pages", page=number, pages=len(pages), more=cut)
        page = pages[number - 1]
        body = page.removesuffix("\n")
        if len(pages) == 1 and not cut:
            return "\n".join([*notes, body])
        facts = {"page": number, "pages": len(pages), "more": cut, "path": path}
        split = body == page and number < len(pages)  # a line longer than a page goes on
        more = say(MODEL, "tool", why="diff_page", split=split, **facts)
        return "\n".join([*notes, body, more])  # the left-out note first, as ever

    async def _shown_tree(self) -> str:
        """The head's tree with every left-out file as the diff's start has it: diffed with the
        start, it is the PR without them, in one `git diff` whatever the PR's size (a list of
        files would not fit on a command line). Its new tree objects are unreachable: gc
        drops them."""
        if self._shown is None:
            head = self.tree.head_sha
            raw = await self.tree.git(
                *["diff", "--raw", "-z", "--no-renames", "--no-abbrev"],
                self.start,
                head,
                timeout=GIT_TIMEOUT,
                limit=RAW_DIFF_BYTES,
            )
            fields = raw.split(b"\x00")  # `:<modes> <ids> <status>`, then the path
            restore = b"".join(
                _as_at_start(meta, name)
                for meta, name in zip(fields[0::2], fields[1::2], strict=False)
                if meta.startswith(b":") and name.decode(errors="replace") in self.left_out
            )
            with tempfile.TemporaryDirectory(prefix="cockpit-diff-") as scratch:
                index = Path(scratch) / "index"
                await self.tree.git("read-tree", head, index=index, timeout=GIT_TIMEOUT)
                info = ("update-index", "-z", "--index-info")
                await self.tree.git(*info, stdin=restore, index=index)
                tree = await self.tree.git("write-tree", "--missing-ok", index=index)
            self._shown = tree.decode().strip()
        return self._shown

    async def _tool_git_log(self, args: GitLog) -> str:
        path = clean_path(args.path, allow_root=True)
        out = await self.tree.git(
            *["log", "--no-color", "--no-show-signature", "--format=%h %an %ad %s", "--date=short"],
            f"--max-count={args.max_count or 20}",
            self.tree.head_sha,
            "--",
            *([path] if path else []),
            limit=MAX_GIT_BYTES,
        )
        return _text(out) or say(MODEL, "tool", why="no_commits")


def paged(text: str, size: int = PAGE_CHARS) -> list[str]:
    """`text` in pages of whole lines of at most `size` characters (a longer line is cut
    across pages); joined again they are `text`."""
    pages: list[str] = []
    page: list[str] = []
    length = 0
    for line in re.findall(r"[^\n]*\n|[^\n]+$", text):
        while len(line) > size:  # a line longer than a page fills pages of its own
            if page:
                pages.append("".join(page))
                page, length = [], 0
            pages.append(line[:size])
            line = line[size:]
        if length + len(line) > size:
            pages.append("".join(page))
            page, length = [], 0
        page.append(line)
        length += len(line)
    if page:
        pages.append("".join(page))
    return [p for p in pages if p]


def diff_paths(diff: str) -> set[str]:
    """The paths a unified diff shows: both sides of a change, and a header's path when it has
    no `---`/`+++` lines (a binary file, a mode change) and names one path twice."""
    paths = set(_DIFF_PATH.findall(diff))
    for header in _DIFF_HEADER.findall(diff):
        half = (len(header) - 3) // 2
        if header[half : half + 3] == " b/" and header[:half] == header[half + 3 :]:
            paths.add(header[:half])
    return paths


def _text(out: bytes, limit: int = MAX_GIT_BYTES) -> str:
    text = out[:limit].decode("utf-8", errors="replace")
    if not truncated(out, limit):
        return text
    note = "\n" + say(MODEL, "tool", why="git_truncated", limit=limit)
    return text[: MAX_OUTPUT_CHARS - len(note)] + note


def _as_at_start(meta: bytes, name: bytes) -> bytes:
    """The `--index-info` record putting `name` back as the diff's start had it (mode 0
    removes a file the start did not have)."""
    mode, _mode, oid = meta[1:].split(b" ")[:3]
    if not int(mode, 8):
        mode = b"0"
    return mode + b" " + oid + b"\t" + name + b"\x00"


def _under(path: str, folder: str) -> bool:
    return not folder or path == folder or path.startswith(folder + "/")
