"""Review preparation benchmark: cold and warm reviews against a fresh `git clone`, same run.

Generates an origin repository with `git fast-import` (≈ 20,000 files over ≈ 2,000 commits on
`main`, plus a PR stored only under `refs/pull/1/head`), served as GitHub serves it: partial
clones allowed (`uploadpack.allowFilter`). Then, each timed against a checkout `git clone` of
the same repository in the same run:

- cold: a first review of a repository the data directory has never seen — `sync` (the
  partial mirror clone and the PR's refs) + `add_worktree` + the reviewer's first `git_diff` +
  `read_file` of the PR's first READS changed files (what a reviewer reads, fetched on demand).
  The same with the origin refusing filters gives the full mirror reviews had before; both
  must give the same tool answers.
- a whole-tree `search_code` right after a cold review: it fetches the head's blobs in one
  request (measured apart: a review pays it only when it searches the whole tree).
- warm: for each of N pushes of a new PR head, `sync` + `add_worktree` + the first `git_diff`.
- disk: what a second concurrent review adds, and that the mirror's `objects/` do not grow.

    python scripts/bench_worktree.py [--files 20000] [--commits 2000] [--runs 5] [--clones 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.agents.toolbox import Toolbox  # noqa: E402
from bot.worktrees import Mirrors, git_env  # noqa: E402

REPO = "bench/repo"
REFS = ["refs/heads/main", "refs/pull/1/head"]
READS = 10  # changed files the cold review reads, as a reviewer looks closer at some
SEARCH = "reviewed change"  # the whole-tree search after the cold review (the PR's files)
WORDS = ["parse", "load", "store", "fetch", "merge", "build", "render", "check", "cache", "queue"]
EPOCH = 1_700_000_000


def module(path: str, version: int) -> bytes:
    """A few hundred bytes of plausible Python, a pure function of (path, version)."""
    rng = random.Random(f"{path}:{version}")
    verb, noun = rng.choice(WORDS), rng.choice(WORDS)
    n, m, k = rng.randint(2, 99), rng.randint(3, 40), rng.randint(2, 9)
    return (
        f'"""{noun.title()} helpers for {path} (revision {version})."""\n\n'
        f"from __future__ import annotations\n\nimport {rng.choice(['os', 're', 'json'])}\n\n\n"
        f"def {verb}_{noun}(value: int, *, limit: int = {n}) -> int:\n"
        f'    """{verb.title()} the {noun} up to `limit`."""\n'
        f"    total = value * {n}\n    for item in range(min(limit, {m})):\n"
        f"        total += item % {k}\n    return total\n\n\n"
        f"class {noun.title()}{verb.title()}:\n"
        f"    def __init__(self, size: int = {m}) -> None:\n        self.size = size\n"
    ).encode()


class Stream:
    """A `git fast-import` stream with fixed identities and dates."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.clock = EPOCH

    def data(self, payload: bytes) -> None:
        self.parts += [b"data %d\n" % len(payload), payload, b"\n"]

    def commit(self, ref: str, message: str, files: dict[str, bytes], parent: str = "") -> None:
        self.clock += 60
        who = f"Bench <bench@example.com> {self.clock} +0000"
        self.parts.append(f"commit {ref}\nauthor {who}\ncommitter {who}\n".encode())
        self.data(message.encode())
        if parent:
            self.parts.append(f"from {parent}\n".encode())
        for path, payload in files.items():
            self.parts.append(f"M 100644 inline {path}\n".encode())
            self.data(payload)

    def run(self, repo: Path, env: dict[str, str]) -> None:
        stream = b"".join(self.parts) + b"done\n"
        git(["fast-import", "--quiet", "--done"], repo, env, stream)


def git(args: list[str], cwd: Path, env: dict[str, str], stdin: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, capture_output=True)
    if done.returncode:
        raise SystemExit(f"git {args[0]} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout.decode()


def generate(origin: Path, env: dict[str, str], files: int, commits: int) -> list[str]:
    """Build `main` and the PR; returns the PR's files (later pushes modify them)."""
    git(["init", "--quiet", "--bare", "--initial-branch=main", str(origin)], origin.parent, env)
    rng = random.Random(1)
    paths: list[str] = []
    versions: dict[str, int] = {}
    stream = Stream()
    per_commit = max(1, files // commits)
    for c in range(commits):
        change: dict[str, bytes] = {}
        for j in range(len(paths), min(files, len(paths) + per_commit)):
            paths.append(f"pkg{j % 50}/sub{(j // 50) % 20}/mod{j}.py")
            versions[paths[-1]] = 0
            change[paths[-1]] = module(paths[-1], 0)
        for path in rng.sample(paths, min(2, len(paths))):
            versions[path] += 1
            change[path] = module(path, versions[path])
        stream.commit("refs/heads/main", f"{rng.choice(WORDS)}: change {c}", change)
    pr_files = rng.sample(paths, 50)
    pr = {p: module(p, versions[p] + 1) + b"\n# reviewed change\n" for p in pr_files}
    stream.commit("refs/pull/1/head", "PR #1: touch 50 modules", pr, parent="refs/heads/main")
    stream.run(origin, env)
    # Packed like a hosted origin. fast-import deltifies each object against the one written
    # before it, so the newest trees sit at the end of long delta chains; its manual
    # (PACKFILE OPTIMIZATION) recommends `repack -a -d`, with -f to recompute those deltas.
    git(["repack", "-a", "-d", "-f", "--quiet"], origin, env)
    for key in ("uploadpack.allowFilter", "uploadpack.allowAnySHA1InWant"):  # as GitHub allows
        git(["config", key, "true"], origin, env)
    return pr_files


def push_pr_head(origin: Path, env: dict[str, str], pr_files: list[str], n: int) -> str:
    """The PR event: a new commit on top of the PR head, changing three of its files."""
    stream = Stream()
    stream.clock = EPOCH + 10_000_000 + n * 60
    changes = {p: module(p, 1000 + n) for p in pr_files[(3 * n) % 48 : (3 * n) % 48 + 3]}
    stream.commit("refs/pull/1/head", f"PR #1: push {n}", changes, parent="refs/pull/1/head^0")
    stream.run(origin, env)
    return git(["rev-parse", "refs/pull/1/head"], origin, env).strip()


def disk(root: Path, skip: str = "") -> int:
    total = 0
    for top, dirs, names in os.walk(root):  # does not follow symlinks
        dirs[:] = [d for d in dirs if d != skip]
        total += sum(os.lstat(os.path.join(top, name)).st_size for name in names)
    return total


@dataclass
class Cold:
    seconds: float  # mirror + worktree + git_diff + reads
    search: float  # a whole-tree search_code just after
    objects: int  # bytes of the mirror's objects/ after the reads (before the search)
    answers: list[str]  # what the tools answered (the same from any mirror)


async def cold_review(data: Path, url: str, head: str, reads: list[str]) -> Cold:
    """A first review on an empty data directory: mirror, worktree, the diff, some reads."""
    mirrors = Mirrors(data)
    start = time.perf_counter()
    await mirrors.sync(REPO, url, REFS)
    tree = await mirrors.add_worktree(REPO, name="cold", head_sha=head, base_ref=REFS[0])
    tools = Toolbox(tree)
    answers = [await tools.call("git_diff", {})]
    answers += [await tools.call("read_file", {"path": path}) for path in reads]
    seconds = time.perf_counter() - start
    assert answers[0].startswith("diff --git"), answers[0][:200]
    objects = disk(mirrors.mirror_path(REPO) / "objects")
    start = time.perf_counter()
    found = await tools.call("search_code", {"pattern": SEARCH})
    search = time.perf_counter() - start
    return Cold(seconds, search, objects, [*answers, found])


async def warm_runs(mirrors: Mirrors, origin: Path, env: dict, pr_files: list[str], runs: int):
    url = origin.resolve().as_uri()
    await mirrors.sync(REPO, url, REFS)  # the cold clone, once per repository: not timed here
    timings, head = [], ""
    for n in range(1, runs + 1):
        head = push_pr_head(origin, env, pr_files, n)
        start = time.perf_counter()
        await mirrors.sync(REPO, url, REFS)
        tree = await mirrors.add_worktree(
            REPO, name=f"bench-{n}", head_sha=head, base_ref="refs/heads/main"
        )
        answer = await Toolbox(tree).call("git_diff", {})
        timings.append(time.perf_counter() - start)
        assert answer.startswith("diff --git"), answer[:200]
    return timings, head


async def second_review(mirrors: Mirrors, head: str) -> tuple[int, int, int]:
    objects = mirrors.mirror_path(REPO) / "objects"
    before, objects_before = disk(mirrors.root.parent), disk(objects)
    await asyncio.gather(
        *(
            mirrors.add_worktree(REPO, name=f"concurrent-{k}", head_sha=head, base_ref=REFS[0])
            for k in ("a", "b")
        )
    )
    return disk(mirrors.root.parent) - before, objects_before, disk(objects)


def ms(values: list[float]) -> str:
    each = ", ".join(f"{v * 1000:.0f}" for v in values)
    return f"{statistics.median(values) * 1000:.0f} ms  [{each}]"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--commits", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--clones", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "home").mkdir()
        env = git_env(home=tmp / "home")
        origin = tmp / "origin.git"
        start = time.perf_counter()
        pr_files = generate(origin, env, args.files, args.commits)
        count = len(git(["ls-tree", "-r", "--name-only", "main"], origin, env).splitlines())
        commits = git(["rev-list", "--count", "main"], origin, env).strip()
        print(
            f"generated origin in {time.perf_counter() - start:.1f} s: "
            f"{count} files, {commits} commits on main, PR under refs/pull/1/head"
        )
        url = origin.resolve().as_uri()
        head = git(["rev-parse", "refs/pull/1/head"], origin, env).strip()
        reads = sorted(pr_files)[:READS]

        # Rounds interleave the three so that the disk's mood weighs on each alike.
        clones: list[float] = []
        partial: list[Cold] = []
        full: list[Cold] = []
        for k in range(args.clones):
            target = tmp / f"clone{k}"
            start = time.perf_counter()
            git(["clone", "--quiet", url, str(target)], tmp, env)
            clones.append(time.perf_counter() - start)
            for allow, found in (("true", partial), ("false", full)):
                git(["config", "uploadpack.allowFilter", allow], origin, env)
                found.append(asyncio.run(cold_review(tmp / f"cold-{allow}-{k}", url, head, reads)))
            git(["config", "uploadpack.allowFilter", "true"], origin, env)
        checkout = disk(tmp / "clone0", skip=".git")
        clone_objects = disk(tmp / "clone0" / ".git" / "objects")
        same = all(c.answers == full[0].answers for c in partial + full)

        mirrors = Mirrors(tmp / "data")
        timings, head = asyncio.run(warm_runs(mirrors, origin, env, pr_files, args.runs))
        warm = statistics.median(timings)
        added, objects_before, objects_after = asyncio.run(second_review(mirrors, head))

    clone, fastest = statistics.median(clones), min(clones)
    cold = statistics.median(c.seconds for c in partial)
    cold_full = statistics.median(c.seconds for c in full)
    search = statistics.median(c.search for c in partial)
    print(f"fresh git clone with checkout, median of {len(clones)}: {ms(clones)}")
    print(
        f"cold review, partial mirror (sync + worktree + git_diff + {READS} read_file), "
        f"median of {len(partial)}: {ms([c.seconds for c in partial])}"
    )
    print(
        f"  = {cold / clone:.1%} of the clone ({cold / fastest:.1%} of the fastest); "
        f"mirror objects {statistics.median(c.objects for c in partial) / 1e6:.1f} MB "
        f"vs the clone's {clone_objects / 1e6:.1f} MB"
    )
    print(
        f"cold review, full mirror (as before), median of {len(full)}: "
        f"{ms([c.seconds for c in full])}"
    )
    print(
        f"  = {cold_full / clone:.1%} of the clone ({cold_full / fastest:.1%} of the fastest); "
        f"mirror objects {statistics.median(c.objects for c in full) / 1e6:.1f} MB"
    )
    print(
        f"then a whole-tree search_code (fetches the head's blobs in one request): "
        f"{ms([c.search for c in partial])} = {search / clone:.1%} of the clone "
        f"(full mirror: {ms([c.search for c in full])})"
    )
    print(
        "tool answers (diff, reads, search) from the partial and the full mirrors: "
        + ("identical" if same else "DIFFER")
    )
    print(
        f"warm review prep (sync + worktree + first git_diff), median of {len(timings)}: "
        f"{ms(timings)}  = {warm / clone:.1%} of the clone ({warm / fastest:.1%} of the fastest)"
    )
    print(
        f"disk added by two concurrent reviews: {added} bytes ({added // 2} per review) "
        f"vs checkout {checkout} bytes ({added / 2 / checkout:.4%} of a checkout each)"
    )
    no_new_objects = objects_after == objects_before
    print(
        f"mirror objects/: {objects_before} -> {objects_after} bytes: "
        + ("no new object storage" if no_new_objects else "GREW")
    )
    ok = cold / fastest <= 0.25 and warm / fastest <= 0.05 and no_new_objects and same
    print(
        "targets (cold <= 25% and warm <= 5% of the fastest clone, the same answers, "
        "no new objects):",
        "met" if ok else "NOT met",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
