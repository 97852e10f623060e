"""What the reviewer's first request shows of a PR, so a model needs no tool call per file:
the diff with head line numbers up to a size budget, and the files past it by name and size
(read with `git_diff`, which pages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.diff import DiffModel, numbered, parse_diff
from bot.worktrees import GIT_TIMEOUT, Worktree

# Characters of diff the first request carries (the line-number gutter comes on top): about
# 15k tokens, most PRs whole. The request is resent with every turn (read from the cache
# where the provider has one), so a larger excerpt costs on each of 40 turns; a smaller one
# sends a model back to `git_diff` for files it could have seen at once.
DIFF_BUDGET_CHARS = 60_000


@dataclass(frozen=True)
class Excerpt:
    diff: str  # the numbered patches of the files `shown`, in review order
    shown: tuple[str, ...]
    rest: tuple[tuple[str, int], ...]  # (path, bytes of diff): past the budget, not shown
    budget: int = DIFF_BUDGET_CHARS


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
    its command line and output stay within about the budget."""
    chosen, room = [], budget
    for path in reviewed:
        size = diff.files[path].patch_bytes
        if size <= room:
            chosen.append(path)
            room -= size
    patches = await _patches(tree, diff, chosen, start=start, limit=budget * 2)
    shown, parts, used = [], [], 0
    for path in chosen:
        patch = patches.get(path)
        if patch is not None and used + len(patch) <= budget:
            shown.append(path)
            parts.append(numbered(patch))
            used += len(patch)
    rest = tuple((p, diff.files[p].patch_bytes) for p in reviewed if p not in set(shown))
    return Excerpt("\n".join(parts), tuple(shown), rest, budget)


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
