"""Mirrors and worktrees: fork heads, cheap worktrees, safe git, tokens never on disk."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bot.standin.repo import git, make_pr
from bot.worktrees import GitError, Mirrors, run_git, truncated
from tests.gitserver import TokenGitServer

BASE = {"src/app.py": "def add(a, b):\n    return a + b\n", "README.md": "# demo\n"}
HEAD = {"src/app.py": "def add(a, b):\n    return eval(f'{a}+{b}')\n"}


@pytest.fixture
def pr(tmp_path):
    return make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=7)


async def test_fork_head_is_fetched_from_refs_pull(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    tree = await mirrors.add_worktree(
        "octo/widgets", name="r1", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    assert tree.merge_base == pr.base_sha
    assert (tree.path / ".git").is_file()  # registered worktree …
    assert not (tree.path / "src").exists()  # … without a checkout


async def test_a_relative_data_dir_works_from_any_folder(tmp_path, pr, monkeypatch):
    """git runs in the mirror's parent and in the mirror: every path it gets is absolute,
    so `Mirrors(Path("data"))` clones into ./data, not into a `data` nested in itself."""
    monkeypatch.chdir(tmp_path)
    mirrors = Mirrors(Path("data"))
    mirror = await mirrors.sync("octo/widgets", pr.clone_url, ["refs/pull/7/head"])
    tree = await mirrors.add_worktree(
        "octo/widgets", name="r1", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    assert mirror == tmp_path / "data" / "mirrors" / "octo" / "widgets.git"
    assert (mirror / "HEAD").is_file() and tree.path.is_absolute()
    await mirrors.remove_worktree("octo/widgets", tree.path)
    assert not tree.path.exists()


async def test_new_push_is_fetched_into_the_existing_mirror(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/pull/7/head"])
    git(pr.path, "checkout", "-q", pr.head_sha)
    (pr.path / "src" / "more.py").write_text("x = 1\n")
    git(pr.path, "add", "-A")
    git(pr.path, "commit", "-q", "-m", "second push")
    new_head = git(pr.path, "rev-parse", "HEAD").strip()
    git(pr.path, "update-ref", "refs/pull/7/head", new_head)
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    tree = await mirrors.add_worktree(
        "octo/widgets", name="r2", head_sha=new_head, base_ref="refs/heads/main"
    )
    assert tree.head_sha == new_head


async def test_unknown_head_sha_fails_clearly(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main"])
    with pytest.raises(GitError):
        await mirrors.add_worktree(
            "octo/widgets", name="r", head_sha="f" * 40, base_ref="refs/heads/main"
        )
    assert not mirrors.tree_path("r").exists()


@pytest.mark.parametrize("base_ref", ["-x", "--output=/tmp/pwned", "refs/heads/--upload-pack=x"])
async def test_refs_starting_with_dashes_are_not_options(tmp_path, pr, base_ref):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    with pytest.raises(GitError):
        await mirrors.add_worktree(
            "octo/widgets", name="r", head_sha=pr.head_sha, base_ref=base_ref
        )
    assert not os.path.exists("/tmp/pwned")
    # the worktree add ran alongside the failed base lookup: it is unregistered again
    assert not mirrors.tree_path("r").exists()
    listed = git(mirrors.mirror_path("octo/widgets"), "worktree", "list", "--porcelain")
    assert str(mirrors.tree_path("r")) not in listed


async def test_clone_urls_other_than_https_or_file_are_refused(tmp_path):
    mirrors = Mirrors(tmp_path / "data")
    for url in ("ext::sh -c touch% /tmp/pwned", "ssh://git@example.test/x.git", "-u./x"):
        with pytest.raises(GitError):
            await mirrors.sync("octo/widgets", url, [])


async def test_hooks_in_the_mirror_never_run(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    mirror = await mirrors.sync("octo/widgets", pr.clone_url, ["refs/pull/7/head"])
    marker = tmp_path / "hook-ran"
    for hook in ("post-checkout", "reference-transaction", "pre-auto-gc"):
        path = mirror / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marker}\n")
        path.chmod(0o755)
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    await mirrors.add_worktree(
        "octo/widgets", name="r", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    assert not marker.exists()


async def test_installation_token_never_touches_disk(tmp_path, pr):
    token = "ghs_" + "Z" * 36
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(pr.path), str(served / "w.git")], check=True
    )
    subprocess.run(["git", "update-server-info"], cwd=served / "w.git", check=True)
    server = TokenGitServer(served, token)
    await server.start()
    try:
        mirrors = Mirrors(tmp_path / "data")
        url = f"{server.url}/w.git"
        with pytest.raises(GitError):  # without the token GitHub refuses …
            await mirrors.sync("octo/other", url, ["refs/heads/main"])
        await mirrors.sync(
            "octo/widgets", url, ["refs/heads/main", "refs/pull/7/head"], token=token
        )
        await mirrors.add_worktree(
            "octo/widgets", name="r", head_sha=pr.head_sha, base_ref="refs/heads/main"
        )
    finally:
        await server.stop()
    assert server.authorised > 0  # … and with it, the token went over HTTP
    import base64

    needles = [token.encode(), base64.b64encode(f"x-access-token:{token}".encode())]
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert not any(n in path.read_bytes() for n in needles), path
    config = (mirrors.mirror_path("octo/widgets") / "config").read_text()
    assert "x-access-token" not in config and url in config


async def test_prune_removes_worktrees_past_their_ttl(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    old = await mirrors.add_worktree(
        "octo/widgets", name="old", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    fresh = await mirrors.add_worktree(
        "octo/widgets", name="fresh", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    past = time.time() - 3 * 86400
    os.utime(old.path, (past, past))
    assert await mirrors.prune(max_age_seconds=86400) == 1
    assert not old.path.exists() and fresh.path.exists()
    listed = git(mirrors.mirror_path("octo/widgets"), "worktree", "list")
    assert "old" not in listed and "fresh" in listed


async def test_remove_repo_deletes_mirror_and_worktrees(tmp_path, pr):
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
    tree = await mirrors.add_worktree(
        "octo/widgets", name="r", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    await mirrors.remove_repo("octo/widgets")
    assert not mirrors.mirror_path("octo/widgets").exists() and not tree.path.exists()


async def test_gc_packs_a_mirror_and_drops_closed_pull_refs(tmp_path):
    pr = make_pr(tmp_path / "origin", base={"a.txt": "a\n"}, head={"a.txt": "b\n"}, number=5)
    mirrors = Mirrors(tmp_path / "data")
    mirror = await mirrors.sync("octo/gc", pr.clone_url, ["refs/heads/main", "refs/pull/5/head"])
    assert await mirrors.drop_pull_refs("octo/gc", [5, 6]) == 1
    assert await mirrors.collect_garbage() == 1
    assert "refs/pull/5/head" not in git(mirror, "for-each-ref")
    counts = dict(
        line.split(": ") for line in git(mirror, "count-objects", "-v").strip().splitlines()
    )
    assert int(counts["in-pack"]) > 0  # packed; the dropped head waits a day, then goes
    assert pr.head_sha not in git(mirror, "rev-list", "--all")


def _running(marker: str) -> list[int]:
    """Processes whose command line holds `marker` (wherever they were reparented)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                found.append(int(entry))
    return found


@pytest.mark.parametrize("limit", [1000, 48_000])
async def test_a_capped_git_call_answers_at_once_whatever_still_holds_its_pipes(tmp_path, limit):
    """Past the cap git is stopped and the call answers with the first `limit + 1` bytes,
    even when the pipes do not end with git: here a process git started (as gc starts
    repack, or fetch its helpers) keeps writing to them. Before, the call waited for an end
    of output that never came, and answered with the timeout's error instead. The timeout is
    generous: a call that waits for it fails on the answer, not on a clock."""
    marker = f"cockpit-test-{uuid.uuid4().hex}"
    mirrors = Mirrors(tmp_path / "data")
    (tmp_path / "repo").mkdir()
    git(tmp_path / "repo", "init", "-q")

    async def capped() -> bytes:
        return await run_git(
            ["-c", f"alias.spew=!yes {marker}", "spew"],
            cwd=tmp_path / "repo",
            env=mirrors.env(),
            timeout=60,
            limit=limit,
        )

    try:
        answer = await asyncio.wait_for(capped(), 120)  # only a stuck call meets this bound
    finally:
        deadline = time.monotonic() + 60
        while _running(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the writer gets SIGPIPE at its next write
    line = f"{marker}\n".encode()
    assert answer == (line * (limit // len(line) + 1))[: limit + 1]
    assert truncated(answer, limit)
    assert _running(marker) == []  # git and what it started are gone


async def test_processes_sharing_a_data_dir_take_turns_on_a_mirror(tmp_path, pr):
    """Several processes on one data directory (a shared volume): each has its own in-process
    lock, so only the file lock keeps their clones and fetches of one mirror apart."""
    processes = [Mirrors(tmp_path / "data") for _ in range(4)]  # one lock table each

    async def review(n: int, mirrors: Mirrors) -> str:
        await mirrors.sync("octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/7/head"])
        tree = await mirrors.add_worktree(
            "octo/widgets", name=f"r{n}", head_sha=pr.head_sha, base_ref="refs/heads/main"
        )
        return tree.merge_base

    for _ in range(3):  # a race may need a few rounds to show
        done = await asyncio.gather(
            *(review(n, m) for n, m in enumerate(processes)), return_exceptions=True
        )
        assert done == [pr.base_sha] * len(processes)
        await processes[0].remove_repo("octo/widgets")


async def test_a_git_that_cannot_start_is_a_git_error_never_an_os_error(tmp_path):
    """One argument over the kernel's 128 KiB per argument (E2BIG, whatever `ulimit -s`
    says), or no git on PATH: a GitError that says so, never the command line itself."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    with pytest.raises(GitError) as raised:
        await run_git(["log", "--", "x" * 200_000], cwd=tmp_path, env=env)
    assert str(raised.value) == "git log could not start: Argument list too long"
    with pytest.raises(GitError) as raised:
        await run_git(["log"], cwd=tmp_path, env={**env, "PATH": str(tmp_path)})
    assert str(raised.value) == "git log could not start: No such file or directory"
