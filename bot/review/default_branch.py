"""What a review reads from the default branch's commit, never from the PR."""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bot.review.instructions import AGENTS_FILE, ATTRIBUTES_FILE, REVIEW_FILE, candidates, joined
from bot.review.noise import ATTRIBUTES
from bot.worktrees import GIT_TIMEOUT, Worktree

READ_BYTES = 256 * 1024  # of one REVIEW.md or AGENTS.md (its review section may be far down)
LIST_BYTES = 64 << 20  # the folders read and check-attr answers for PRs of thousands of files
_REGULAR = {b"100644", b"100755"}  # blobs; a link is never followed, a submodule never read


@dataclass(frozen=True)
class BaseFiles:
    commit: str
    texts: dict[str, str] = field(default_factory=dict)  # REVIEW.md / AGENTS.md → text
    attributes: dict[str, dict[str, str]] = field(default_factory=dict)  # path → linguist-*


async def read_default_branch(tree: Worktree, commit: str, paths: Iterable[str]) -> BaseFiles:
    paths = sorted(set(paths))
    if not paths:
        return BaseFiles(commit)
    found = await _steering_files(tree, commit, candidates(paths))
    texts = {}
    for path, (_mode, oid) in sorted(found.items()):
        if path.rsplit("/", 1)[-1] in (REVIEW_FILE, AGENTS_FILE):
            data = await tree.git("cat-file", "blob", oid, limit=READ_BYTES)
            # a longer file is cut at READ_BYTES (git's answer then holds one byte more)
            texts[path] = data[:READ_BYTES].decode("utf-8", errors="replace")
    attribute_files = {p: v for p, v in found.items() if p.endswith(ATTRIBUTES_FILE)}
    attributes = await _attributes(tree, attribute_files, paths) if attribute_files else {}
    return BaseFiles(commit, texts, attributes)


async def _steering_files(
    tree: Worktree, commit: str, wanted: set[str]
) -> dict[str, tuple[bytes, str]]:
    """Which of the `wanted` paths are regular files in `commit`: path → (mode, blob id).
    The folders they would sit in are read whole, as tree objects, by one `git cat-file
    --batch` that takes their names on stdin: a PR of thousands of files in folders of their
    own asks after tens of thousands of places, far more than one command line can name."""
    # a folder whose name holds a newline cannot be named on cat-file's stdin (`-z` needs
    # git 2.38): steering files there are not found
    folders = sorted({p.rpartition("/")[0] for p in wanted if "\n" not in p})
    # `<commit>:` is the root's tree; `<commit>:a/b/` only ever names a folder (a file or a
    # link there is "missing": its blob is never read, nor fetched by a partial mirror)
    names = [f"{commit}:{folder}/" if folder else f"{commit}:" for folder in folders]
    out = await tree.git(
        "cat-file",
        "--batch",
        stdin="".join(name + "\n" for name in names).encode(),
        timeout=GIT_TIMEOUT,
        limit=LIST_BYTES,
    )
    found: dict[str, tuple[bytes, str]] = {}
    at = 0
    for folder, name in zip(folders, names, strict=True):
        missing = name.encode() + b" missing\n"
        if out.startswith(missing, at):
            at += len(missing)
            continue
        end = out.find(b"\n", at)
        fields = out[at:end].split() if end >= 0 else []
        if len(fields) != 3 or end + 1 + int(fields[2]) >= len(out):
            break  # git was stopped at LIST_BYTES: what came before stands
        oid, kind, size = fields[0], fields[1], int(fields[2])
        body = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1  # the object, then a newline
        if kind != b"tree":
            continue
        for mode, entry, blob in _tree_entries(body, len(oid) // 2):
            path = joined(folder, entry.decode(errors="replace"))
            if path in wanted and mode in _REGULAR:
                found[path] = (mode, blob)
    return found


def _tree_entries(body: bytes, id_bytes: int) -> list[tuple[bytes, bytes, str]]:
    """A tree object's entries: (mode, name, object id in hex). Each is `<mode> <name>\\0`
    and the id's raw bytes."""
    entries, at = [], 0
    while at < len(body):
        end = body.index(b"\x00", at)
        mode, _, name = body[at:end].partition(b" ")
        entries.append((mode, name, body[end + 1 : end + 1 + id_bytes].hex()))
        at = end + 1 + id_bytes
    return entries


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
