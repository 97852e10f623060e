"""What the reviewer's first request shows of a PR, so a model needs no tool call per file:
the diff with head line numbers up to a size budget, the files past it by name and size (read
with `git_diff`, which pages), and the files worth reading: where the names the diff defines
or changes are used (callers, tests), found by `git grep` without a model."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from bot.agents.toolbox import MAX_GIT_BYTES, SEARCH_TIMEOUT
from bot.diff import DiffModel, numbered, parse_diff
from bot.review.plan import is_test
from bot.worktrees import GIT_TIMEOUT, GitError, Worktree

# Characters of diff the first request carries (the line-number gutter comes on top): about
# 15k tokens, most PRs whole. The request is resent with every turn (read from the cache
# where the provider has one), so a larger excerpt costs on each of 40 turns; a smaller one
# sends a model back to `git_diff` for files it could have seen at once.
DIFF_BUDGET_CHARS = 60_000
MAX_SYMBOLS = 20  # names searched for, in the order the diff shows them
MAX_WORTH_READING = 12  # files listed

# A definition's name (Python, Go, Rust, JavaScript/TypeScript, Swift, Kotlin …): on a hunk's
# header line (the enclosing function git names) or on a changed line.
_DEFINED = re.compile(
    r"\b(?:def|class|func|function|fn|fun|struct|interface|trait|enum|type)\s+"
    r"(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]{2,})"
)
_MATCH = re.compile(r"([^\0]+)\0[0-9]+\0([A-Za-z0-9_]+)\n")  # `git grep -z -n -o`
_COMMON = frozenset({"__init__", "main", "self", "None", "True", "False", "string", "error"})


@dataclass(frozen=True)
class Excerpt:
    diff: str  # the numbered patches of the files `shown`, in review order
    shown: tuple[str, ...]
    rest: tuple[tuple[str, int], ...]  # (path, bytes of diff): past the budget, not shown
    budget: int = DIFF_BUDGET_CHARS
    # (path, names it uses, whether it is a test): unchanged files that use what changed
    worth_reading: tuple[tuple[str, tuple[str, ...], bool], ...] = ()


async def diff_excerpt(
    tree: Worktree,
    diff: DiffModel,
    reviewed: Sequence[str],
    *,
    start: str,
    budget: int = DIFF_BUDGET_CHARS,
) -> Excerpt:
    """The `reviewed` files' diffs (`start` → head, as `git_diff` shows them) in review order
    while they fit in `budget`; a file that does not fit leaves room for smaller ones after
    it. Sizes are the PR's patch sizes; the diff is asked of git for the chosen files only, so
    its command line and output stay within about the budget. Then the files worth reading:
    the unchanged ones using the names the shown diff changes."""
    chosen, room = [], budget
    for path in reviewed:
        size = diff.files[path].patch_bytes
        if size <= room:
            chosen.append(path)
            room -= size
    patches = await _patches(tree, diff, chosen, start=start, limit=budget * 2)
    shown: dict[str, None] = {}
    parts, used = [], 0
    for path in chosen:
        patch = patches.get(path)
        if patch is not None and used + len(patch) <= budget:
            shown[path] = None
            parts.append(numbered(patch))
            used += len(patch)
    rest = tuple((p, diff.files[p].patch_bytes) for p in reviewed if p not in shown)
    names = changed_symbols(patches[p] for p in shown)
    changed = {p for f in diff.files.values() for p in (f.path, f.old_path) if p is not None}
    worth = await worth_reading(tree, names, skip=changed)
    return Excerpt("\n".join(parts), tuple(shown), rest, budget, worth)


def changed_symbols(patches: Iterable[str]) -> list[str]:
    """The names a diff changes: defined on a changed line, or the definition a changed line
    is in (the nearest one above it in its hunk, or the one git names on the hunk's header);
    first seen first, at most MAX_SYMBOLS."""
    names: dict[str, None] = {}
    for patch in patches:
        enclosing: list[str] | None = None  # None: before the first hunk (the headers)
        for line in patch.split("\n"):
            if line.startswith("@@"):
                enclosing = _DEFINED.findall(line.split("@@", 2)[-1])[-1:]
                continue
            if enclosing is None or line[:1] not in (" ", "+", "-"):
                continue
            defined = [n for n in _DEFINED.findall(line[1:]) if n not in _COMMON]
            if line[:1] != " ":
                names.update(dict.fromkeys(enclosing + defined))
            enclosing = defined[-1:] or enclosing
    return [n for n in names if n not in _COMMON][:MAX_SYMBOLS]


async def worth_reading(
    tree: Worktree, names: Sequence[str], *, skip: Collection[str]
) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
    """The head's files, other than `skip`, that use the most of `names` (whole words), as
    the toolbox's `search_code` finds them: the blobs fetched in one request, `git grep`
    read-only, under its timeout and byte cap (in a partial mirror that fetches the head's
    missing blobs, as a model's first search would). Nothing found, or a fetch or search
    that fails or times out, is an empty list: the reviewer can still search."""
    if not names:
        return ()
    patterns = [arg for name in names for arg in ("-e", name)]
    try:
        await tree.fetch_blobs()
        out = await tree.git(
            *["grep", "-z", "-n", "-o", "-I", "-w", "-F", "--no-color", "--max-count=20"],
            *patterns,
            tree.head_sha,
            timeout=SEARCH_TIMEOUT,
            limit=MAX_GIT_BYTES,
            check=False,
        )
    except GitError:
        return ()
    prefix = f"{tree.head_sha}:"
    uses: dict[str, dict[str, None]] = {}
    text = out[:MAX_GIT_BYTES].decode("utf-8", errors="replace")
    for path, name in _MATCH.findall(text):  # a path may hold a newline, not a \0
        path = path.removeprefix(prefix)
        if path not in skip and name in names:
            uses.setdefault(path, {}).setdefault(name)
    ranked = sorted(uses.items(), key=lambda item: (-len(item[1]), not is_test(item[0]), item[0]))
    return tuple((path, tuple(used), is_test(path)) for path, used in ranked[:MAX_WORTH_READING])


async def _patches(
    tree: Worktree, diff: DiffModel, paths: Sequence[str], *, start: str, limit: int
) -> dict[str, str]:
    """path → its patch; a rename needs its old path in the pathspec to be found as one."""
    if not paths:
        return {}
    spec = [p for path in paths for p in (path, diff.files[path].old_path) if p is not None]
    out = await tree.git(
        *["--literal-pathspecs", "diff", "--no-color", "--no-ext-diff", "--no-textconv", "-M"],
        start,
        tree.head_sha,
        "--",
        *spec,
        timeout=GIT_TIMEOUT,
        limit=limit,
    )
    text = out[:limit].decode("utf-8", errors="replace")
    if len(out) > limit:  # the last file may be cut: it is not shown
        text = text[: text.rfind("\ndiff --git ") + 1]
    chunks = text.split("\ndiff --git ")
    patches = {}
    for n, chunk in enumerate(chunks):
        patch = chunk if n == 0 else "diff --git " + chunk
        for path in parse_diff(patch).files:  # one file
            patches[path] = patch.removesuffix("\n") + "\n"
    return patches
