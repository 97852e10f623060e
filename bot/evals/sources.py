"""An eval case's code: a clone URL, a local repository or a bundle, mirrored and only read."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from bot.evals.golden import Case, is_url, repository_key
from bot.repo_config import CONFIG_PATH, RepoConfig, parse_repo_config
from bot.texts import OPERATOR, say
from bot.worktrees import GitError, Mirrors, Worktree, run_git


def display_name(repository: str) -> str:
    key = repository_key(repository)
    if not key.startswith("local/"):
        return key
    path = Path(urlparse(repository).path if is_url(repository) else repository)
    return path.name.removesuffix(".bundle").removesuffix(".git") or "repository"


def _fingerprint_sync(path: Path) -> str:
    digest = hashlib.sha256()
    if path.is_file():
        digest.update(path.read_bytes())
        return digest.hexdigest()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            file = Path(root) / name
            stat = file.lstat()
            digest.update(
                f"{file.relative_to(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
            )
    return digest.hexdigest()


async def fingerprint(repository: str) -> str | None:
    """Every file's name, size and modification time under a local source (its content for
    a bundle); None for a remote one (nothing of it is on this machine to change)."""
    if is_url(repository) and not repository.startswith("file://"):
        return None
    path = Path(urlparse(repository).path) if is_url(repository) else Path(repository)
    if not path.exists():
        return None
    return await asyncio.to_thread(_fingerprint_sync, path)


@dataclass(frozen=True)
class PreparedCase:
    tree: Worktree
    key: str
    notes: tuple[str, ...]  # fallbacks taken (head or base not found as given)


@dataclass
class Sources:
    mirrors: Mirrors
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _fetched: dict[str, set[str]] = field(default_factory=dict)

    async def clone_url(self, repository: str) -> str:
        """A URL git can mirror: remote URLs as they are, a local folder as file://, and a
        bundle unpacked once into a bare repository (git cannot fetch a bundle by URL)."""
        if is_url(repository):
            return repository
        path = Path(repository)
        if path.is_dir():
            return path.resolve().as_uri()
        if not path.is_file():
            raise GitError(say(OPERATOR, "eval.repository_not_found", repository=repository))
        digest = (await asyncio.to_thread(_fingerprint_sync, path))[:16]
        target = self.mirrors.root.parent / "sources" / f"{path.stem}-{digest}.git"
        if not (target / "HEAD").exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            await run_git(
                ["clone", "--mirror", "--quiet", "--", str(path.resolve()), str(partial)],
                cwd=target.parent,
                env=self.mirrors.env(),
            )
            partial.rename(target)
        return target.as_uri()

    async def _sync(self, key: str, repository: str, refs: list[str]) -> None:
        async with self._locks.setdefault(key, asyncio.Lock()):
            url = await self.clone_url(repository)
            fetched = self._fetched.setdefault(key, set())
            wanted = [ref for ref in refs if ref not in fetched]
            if fetched and not wanted:
                return
            try:
                await self.mirrors.sync(key, url, wanted)
            except GitError:
                # A ref the source does not have (no refs/pull/N/head in a local
                # repository): the mirror still has everything the clone brought.
                await self.mirrors.sync(key, url, [])
            fetched.update(wanted)

    async def prepare(self, case: Case, name: str) -> PreparedCase:
        """The case's worktree at exactly `head_sha` (else refs/pull/N/head), diffed
        against `base_sha` (else its base branch, else the default branch)."""
        key = repository_key(case.repository)
        pull = f"refs/pull/{case.pr}/head" if case.pr else None
        branch = f"refs/heads/{case.base_ref}" if case.base_ref else None
        await self._sync(key, case.repository, [ref for ref in (pull, branch) if ref])
        notes = []
        head = await self._commit(key, case.head_sha)
        if head is None:
            head = await self._commit(key, pull)
            if head is None:
                wanted = case.head_sha or pull
                raise GitError(say(OPERATOR, "eval.not_in_repository", which="head", rev=wanted))
            notes.append(
                say(OPERATOR, "eval.head_fallback", sha=case.head_sha, pr=case.pr, head=head)
            )
        base = await self._commit(key, case.base_sha)
        if base is None:
            base = await self._commit(key, branch or "HEAD")
            if base is None:
                wanted = case.base_sha or branch or "HEAD"
                raise GitError(say(OPERATOR, "eval.not_in_repository", which="base", rev=wanted))
            notes.append(
                say(OPERATOR, "eval.base_fallback", sha=case.base_sha, branch=case.base_ref)
            )
        tree = await self.mirrors.add_worktree(key, name=name, head_sha=head, base_ref=base)
        return PreparedCase(tree, key, tuple(notes))

    async def _commit(self, key: str, rev: str | None) -> str | None:
        return await self.mirrors.resolve(key, rev) if rev else None

    async def repo_config(self, key: str) -> RepoConfig:
        out = await run_git(
            ["cat-file", "blob", f"HEAD:{CONFIG_PATH}"],
            cwd=self.mirrors.mirror_path(key),
            env=self.mirrors.env(),
            timeout=30,
            limit=64 * 1024,
            check=False,
        )
        if not out:
            return RepoConfig()
        return parse_repo_config(out.decode("utf-8", errors="replace"))

    async def release(self, prepared: PreparedCase) -> None:
        await self.mirrors.remove_worktree(prepared.key, prepared.tree.path)
