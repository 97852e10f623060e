"""What a review reads from the default branch's commit and never from the PR: the `REVIEW.md`
and `AGENTS.md` files above its changed paths, and the `linguist-*` attributes its
`.gitattributes` files give them — through git, from the object store (nothing is checked
out, and a partial mirror fetches just those blobs)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bot.review.instructions import AGENTS_FILE, ATTRIBUTES_FILE, REVIEW_FILE, candidates
from bot.review.noise import ATTRIBUTES
from bot.worktrees import Worktree

READ_BYTES = 256 * 1024  # of one REVIEW.md or AGENTS.md (its review section may be far down)
LIST_BYTES = 64 << 20  # ls-tree and check-attr answers for PRs of thousands of files
_REGULAR = {b"100644", b"100755"}  # blobs; a link is never followed, a submodule never read


@dataclass(frozen=True)
class BaseFiles:
    commit: str
    texts: dict[str, str] = field(default_factory=dict)  # REVIEW.md / AGENTS.md → text
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)  # path → linguist-*


async def read_base(tree: Worktree, commit: str, paths: Iterable[str]) -> BaseFiles:
    """The instruction files and attributes of `commit` that apply to `paths`."""
    paths = sorted(set(paths))
    if not paths:
        return BaseFiles(commit)
    listed = await tree.git(
        "ls-tree", "-z", commit, "--", *sorted(candidates(paths)), limit=LIST_BYTES
    )
    found: dict[str, tuple[bytes, str]] = {}  # path → (mode, blob id)
    for record in listed.split(b"\x00"):
        meta, _, name = record.partition(b"\t")
        if not name:
            continue
        mode, kind, oid = meta.split()
        if kind == b"blob" and mode in _REGULAR:
            found[name.decode(errors="replace")] = (mode, oid.decode())
    texts = {}
    for path, (_mode, oid) in sorted(found.items()):
        if path.rsplit("/", 1)[-1] in (REVIEW_FILE, AGENTS_FILE):
            data = await tree.git("cat-file", "blob", oid, limit=READ_BYTES)
            # a longer file is cut at READ_BYTES (git's answer then holds one byte more)
            texts[path] = data[:READ_BYTES].decode("utf-8", errors="replace")
    attribute_files = {p: v for p, v in found.items() if p.endswith(ATTRIBUTES_FILE)}
    attributes = await _attributes(tree, attribute_files, paths) if attribute_files else {}
    return BaseFiles(commit, texts, attributes)


async def _attributes(
    tree: Worktree, files: dict[str, tuple[bytes, str]], paths: list[str]
) -> dict[str, dict[str, str]]:
    """`git check-attr` over a scratch index holding just the commit's `.gitattributes`
    files: git's own matching (nested files, patterns, `-attr`, macros), on any git version
    (`check-attr --source` needs git 2.40)."""
    entries = b"".join(
        mode + b" " + oid.encode() + b"\t" + path.encode() + b"\x00"
        for path, (mode, oid) in sorted(files.items())
    )
    with tempfile.TemporaryDirectory(prefix="cockpit-attributes-") as scratch:
        index = Path(scratch) / "index"
        await tree.git("update-index", "-z", "--index-info", stdin=entries, index=index)
        out = await tree.git(
            "check-attr",
            "--cached",
            "-z",
            "--stdin",
            *ATTRIBUTES,
            stdin=b"".join(p.encode() + b"\x00" for p in paths),
            index=index,
            limit=LIST_BYTES,
        )
    fields = out.decode("utf-8", errors="replace").split("\x00")
    found: dict[str, dict[str, str]] = {}
    for n in range(0, len(fields) - 2, 3):
        path, attribute, value = fields[n : n + 3]
        if value != "unspecified":
            found.setdefault(path, {})[attribute] = value
    return found
