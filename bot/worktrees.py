"""Partial bare mirrors per repository and no-checkout worktrees, run by safe git subprocesses."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import logging
import os
import re
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from bot.texts import PEOPLE, say

log = logging.getLogger(__name__)

GIT_TIMEOUT = 300.0
TOOL_TIMEOUT = 20.0
OUTPUT_LIMIT = 1 << 20  # bytes of stdout any git call may return unless it asks otherwise
STDERR_LIMIT = 64 << 10
READ_CHUNK = 1 << 16
GC_PRUNE = "1.day.ago"  # unreachable objects go once they are a day old
GC_TIMEOUT = 1800.0
FLOCK_POLL = 0.05  # seconds between tries for a mirror's file lock held by another process
BLOB_FETCH_TIMEOUT = 120.0
PARTIAL_FILTER = "blob:none"  # mirrors hold commits and trees; blobs come on demand
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


class GitError(Exception):
    """A git command failed or timed out; the message is safe to show (no secrets)."""


def git_env(*, home: Path, offline: bool = False) -> dict[str, str]:
    """The only environment git ever runs with: no user/system config, no hooks, no helpers.
    Offline (review-local, in someone's repository and its mirror): no transport at all, so no
    fetch, lazy or not, ever starts, and no system attributes."""
    config = {
        "core.hooksPath": "/dev/null",
        "core.fsmonitor": "false",
        "core.untrackedCache": "false",
        "core.quotePath": "false",
        "core.bigFileThreshold": "1m",  # larger blobs diff as binary, never line by line
        # Short ids of a fixed length: by default their length grows with the number of
        # objects, so a partial mirror and a full one (or one mirror, months apart) would show
        # the same diff and log with different ids.
        "core.abbrev": "12",
        "core.askPass": "",
        "credential.helper": "",
        "protocol.ext.allow": "never",
        "protocol.file.allow": "always",
        "gc.auto": "0",
        "maintenance.auto": "false",
        "advice.detachedHead": "false",
        "diff.noprefix": "false",
        "log.showSignature": "false",
        # The excludes file a repository's config names is read by more commands than the
        # untracked listing (`diff-index` too), and one that is a FIFO holds git until someone
        # writes to it: none is read, but where review-local's listing needs it.
        "core.excludesFile": "/dev/null",
    }
    # A private CA (GitHub Enterprise Server): git's libcurl does not read SSL_CERT_FILE
    # itself, and this environment is built from nothing, so the file is passed on.
    ca_file = os.environ.get("GIT_SSL_CAINFO") or os.environ.get("SSL_CERT_FILE")
    if ca_file:
        config["http.sslCAInfo"] = ca_file
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "/bin/false",
        "SSH_ASKPASS": "/bin/false",
        "GIT_ALLOW_PROTOCOL": "" if offline else "https:http:file",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_CONFIG_COUNT": "0",
    }
    if offline:
        env["GIT_ATTR_NOSYSTEM"] = "1"
    return with_config(env, config)


def with_config(env: dict[str, str], config: dict[str, str]) -> dict[str, str]:
    count = int(env["GIT_CONFIG_COUNT"])
    added = {**env, "GIT_CONFIG_COUNT": str(count + len(config))}
    for n, (key, value) in enumerate(config.items(), start=count):
        added[f"GIT_CONFIG_KEY_{n}"], added[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return added


def with_token(env: dict[str, str], token: str | None) -> dict[str, str]:
    """The installation token reaches git only here, as `http.extraHeader` in this process's
    environment: never in a URL, a file, a command line or a log."""
    if not token:
        return env
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return with_config(env, {"http.extraHeader": f"Authorization: Basic {basic}"})


TokenSource = Callable[[], Awaitable[str | None]]  # a fresh installation token when asked


async def run_git(
    args: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float = GIT_TIMEOUT,
    limit: int = OUTPUT_LIMIT,
    check: bool = True,
    stdin: bytes | None = None,
) -> bytes:
    """`git <args>` (no shell), output streamed with a byte cap: past `limit` bytes git is
    stopped and the answer holds `limit + 1` bytes, so a huge blob never lands in memory
    whole. A git that cannot start is a GitError too, never an OSError."""
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        error = exc.strerror or exc.__class__.__name__  # never the command line: it may be long
        raise GitError(say(PEOPLE, "git_not_started", command=args[0], error=error)) from None
    assert proc.stdout is not None and proc.stderr is not None

    async def write_in() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(stdin or b"")
            await proc.stdin.drain()
        proc.stdin.close()

    async def read_out() -> bytes:
        assert proc.stdout is not None
        chunks, size = [], 0
        while size <= limit:
            chunk = await proc.stdout.read(min(READ_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            _stop(proc)  # enough read; what git wrote past the cap is dropped unread
            log.warning(
                "git output truncated",
                extra={"fields": {"command": args[0], "limit_bytes": limit}},
            )
        return b"".join(chunks)

    async def read_err() -> bytes:
        assert proc.stderr is not None
        kept = bytearray()
        while chunk := await proc.stderr.read(READ_CHUNK):
            kept += chunk[: max(0, STDERR_LIMIT - len(kept))]
        return bytes(kept)

    reader = asyncio.ensure_future(asyncio.gather(read_out(), read_err(), write_in()))
    try:
        out, err, _ = await asyncio.wait_for(asyncio.shield(reader), timeout)
        await asyncio.wait_for(proc.wait(), timeout)
    except (TimeoutError, asyncio.CancelledError) as exc:
        _stop(proc)
        await proc.wait()
        with contextlib.suppress(BaseException):  # the pipes close with the process
            await reader
        if isinstance(exc, TimeoutError):
            raise GitError(say(PEOPLE, "git_timed_out", command=args[0], seconds=timeout)) from None
        raise
    finally:
        # asyncio (3.11) has no public close for a reaped process: without this each call
        # leaves its transport to the garbage collector and a ResourceWarning.
        proc._transport.close()  # type: ignore[attr-defined]
    if check and proc.returncode not in (0, -9) and not truncated(out, limit):
        said = err.decode(errors="replace").strip().splitlines()
        raise GitError(say(PEOPLE, "git_failed", command=args[0], said=said, code=proc.returncode))
    return out


def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill git and close our ends of its pipes. `Process.wait()` returns only once every
    pipe has closed, and a pipe may never report its end by itself: asyncio stops reading
    one whose buffer is full (the rest of a capped answer), and a child git started (gc's
    repack, fetch's helpers) may still hold it. Closed, the pipes end now; whatever wrote
    to them gets SIGPIPE."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    transport = proc._transport  # type: ignore[attr-defined]  # asyncio has no public way
    for fd in (0, 1, 2):
        pipe = transport.get_pipe_transport(fd)
        if pipe is not None:
            pipe.close()


async def commit_of(repo: Path, env: dict[str, str], rev: str) -> str | None:
    verify = ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"]
    out = await run_git(verify, cwd=repo, env=env, timeout=60, check=False)
    return out.decode().strip() or None


def truncated(out: bytes, limit: int = OUTPUT_LIMIT) -> bool:
    return len(out) > limit


async def _rmtree(path: Path) -> None:
    await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)


@dataclass(frozen=True)
class Worktree:
    mirror: Path
    path: Path
    head_sha: str
    base_sha: str
    merge_base: str
    env: dict[str, str]
    # The mirror is a partial clone: a git call may fetch the blobs it reads, and a private
    # repository wants the installation token for that. Asked for at each call (tokens
    # expire within the hour; a session may come back to its worktree days later).
    token: TokenSource | None = field(default=None, repr=False, compare=False)

    async def git(
        self,
        *args: str,
        timeout: float = TOOL_TIMEOUT,
        limit: int = OUTPUT_LIMIT,
        check: bool = True,
        stdin: bytes | None = None,
        config: dict[str, str] | None = None,
        index: Path | None = None,
    ) -> bytes:
        env = with_config(self.env, config) if config else self.env
        if index is not None:
            env = {**env, "GIT_INDEX_FILE": str(index)}
        if self.token is not None:
            env = with_token(env, await self.token())
        return await run_git(
            list(args),
            cwd=self.mirror,
            env=env,
            timeout=timeout,
            limit=limit,
            check=check,
            stdin=stdin,
        )

    async def fetch_blobs(self, path: str = "") -> int:
        """Fetch, in one request, the head's blobs under `path` the partial mirror lacks
        (else `git grep` fetches each with a request of its own); returns how many."""
        start = f"{self.head_sha}:{path}" if path else f"{self.head_sha}^{{tree}}"
        listed = await run_git(
            ["rev-list", "--objects", "--missing=print", "--no-walk", start],
            cwd=self.mirror,
            env=self.env,  # --missing=print never fetches
            timeout=BLOB_FETCH_TIMEOUT,
            limit=64 << 20,
            check=False,
        )
        missing = [
            line[1:] for line in listed.decode(errors="replace").splitlines() if line[:1] == "?"
        ]
        if missing:
            fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--stdin"]
            await self.git(
                *fetch,
                "--recurse-submodules=no",
                f"--filter={PARTIAL_FILTER}",
                "origin",
                timeout=BLOB_FETCH_TIMEOUT,
                stdin="\n".join(missing).encode() + b"\n",
                config={"fetch.negotiationAlgorithm": "noop"},  # as git's own lazy fetches
            )
        return len(missing)


class Mirrors:
    """Bare mirrors under `<data>/mirrors`, worktrees under `<data>/worktrees`; every path is
    absolute, for git runs in other folders."""

    def __init__(self, data_dir: Path, *, offline: bool = False) -> None:
        data_dir = data_dir.absolute()
        self.root = data_dir / "mirrors"
        self.trees = data_dir / "worktrees"
        self.home = data_dir / "git-home"
        self.offline = offline
        self._locks: dict[Path, asyncio.Lock] = {}

    def env(self) -> dict[str, str]:
        self.home.mkdir(parents=True, exist_ok=True)
        return git_env(home=self.home, offline=self.offline)

    def mirror_path(self, repo: str) -> Path:
        owner, _, name = repo.partition("/")
        return self.root / _SAFE_NAME.sub("_", owner) / (_SAFE_NAME.sub("_", name) + ".git")

    def tree_path(self, name: str) -> Path:
        return self.trees / _SAFE_NAME.sub("_", name)

    @contextlib.asynccontextmanager
    async def lock(self, mirror: Path) -> AsyncIterator[None]:
        """One git operation per mirror at a time: in this process (an asyncio lock), and
        across processes sharing the data directory (`fcntl.flock` on `<mirror>.lock`, polled
        so a cancelled waiter never takes it later)."""
        async with self._locks.setdefault(mirror, asyncio.Lock()):
            mirror.parent.mkdir(parents=True, exist_ok=True)
            with open(mirror.with_name(mirror.name + ".lock"), "a+b") as held:  # noqa: ASYNC230
                while True:
                    try:
                        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        await asyncio.sleep(FLOCK_POLL)
                try:
                    yield
                finally:
                    fcntl.flock(held, fcntl.LOCK_UN)

    async def sync(
        self,
        repo: str,
        clone_url: str,
        refs: list[str],
        token: str | None = None,
        *,
        default_branch: str | None = None,
    ) -> Path:
        """Clone the mirror once, then fetch just `refs` (and the remote's HEAD into
        `default_branch`) in one fetch."""
        if not clone_url.startswith(("https://", "http://", "file://")):
            raise GitError(say(PEOPLE, "clone_url_scheme"))
        mirror = self.mirror_path(repo)
        env = with_token(self.env(), token)
        async with self.lock(mirror):
            if not (mirror / "HEAD").exists():
                mirror.parent.mkdir(parents=True, exist_ok=True)
                partial = mirror.with_suffix(".partial")
                await _rmtree(partial)
                clone = ["clone", "--mirror", f"--filter={PARTIAL_FILTER}", "--quiet", "--"]
                await run_git([*clone, clone_url, str(partial)], cwd=mirror.parent, env=env)
                partial.rename(mirror)
            refspecs = [f"+{ref}:{ref}" for ref in refs]
            if default_branch is not None:
                refspecs.append(f"+HEAD:{default_branch}")
            if refspecs:
                fetch = ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head"]
                fetch += ["--no-show-forced-updates", "origin", *refspecs]
                await run_git(fetch, cwd=mirror, env=env)
        return mirror

    async def borrow(self, repo: str, git_dir: Path, objects: Path, object_format: str) -> Path:
        """A new bare mirror that reads a local repository's objects in place: its alternates
        file names their folder, and a shallow repository's boundary is copied. No git process
        runs in the repository (a clone would start `git upload-pack` there, under its own
        config), and the mirror's configuration is only what git_env gives it."""
        mirror = self.mirror_path(repo)
        async with self.lock(mirror):
            init = ["init", "--quiet", "--bare", "--template=", f"--object-format={object_format}"]
            await run_git([*init, "--", str(mirror)], cwd=mirror.parent, env=self.env())
            (mirror / "objects" / "info").mkdir(parents=True, exist_ok=True)
            (mirror / "objects" / "info" / "alternates").write_text(f"{objects}\n")
            if (git_dir / "shallow").is_file():
                shutil.copyfile(git_dir / "shallow", mirror / "shallow")
        return mirror

    async def add_worktree(
        self,
        repo: str,
        *,
        name: str,
        head_sha: str,
        base_ref: str,
        token: TokenSource | None = None,
    ) -> Worktree:
        mirror = self.mirror_path(repo)
        env = self.env()
        path = self.tree_path(name)
        if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", head_sha):
            raise GitError(say(PEOPLE, "head_sha_not_full"))
        async with self.lock(mirror):
            if path.exists():
                await self._remove(mirror, path, env)
            self.trees.mkdir(parents=True, exist_ok=True)
            add = ["worktree", "add", "--detach", "--no-checkout", "--quiet", "--", str(path)]
            try:
                bases, added = await asyncio.gather(  # independent: run side by side
                    self._bases(mirror, env, base_ref, head_sha),
                    run_git([*add, head_sha], cwd=mirror, env=env, timeout=60),
                    return_exceptions=True,
                )
            except BaseException:  # cancelled (e.g. superseded): leave nothing registered
                await asyncio.shield(self._remove_quietly(mirror, path, env))
                raise
            failed = [r for r in (bases, added) if isinstance(r, BaseException)]
            if failed:
                await self._remove_quietly(mirror, path, env)
                raise failed[0]
            assert isinstance(bases, list)
            base_sha, merge_base = bases
        return Worktree(mirror, path, head_sha, base_sha, merge_base, env, token)

    @staticmethod
    async def _bases(mirror: Path, env: dict[str, str], base_ref: str, head: str) -> list[str]:
        verify = ["rev-parse", "--verify", "--end-of-options", f"{base_ref}^{{commit}}"]
        base = (await run_git(verify, cwd=mirror, env=env, timeout=30)).decode().strip()
        merge = await run_git(["merge-base", base, head], cwd=mirror, env=env, timeout=60)
        return [base, merge.decode().strip()]

    async def remove_worktree(self, repo: str, path: Path) -> None:
        mirror = self.mirror_path(repo)
        async with self.lock(mirror):
            await self._remove(mirror, path, self.env())

    async def _remove_quietly(self, mirror: Path, path: Path, env: dict[str, str]) -> None:
        # Clean-up after a failure: its own errors must not hide the failure's.
        try:
            await self._remove(mirror, path, env)
        except Exception:
            log.warning(
                "could not remove a half-made worktree", extra={"fields": {"path": str(path)}}
            )

    async def _remove(self, mirror: Path, path: Path, env: dict[str, str]) -> None:
        if mirror.exists():
            remove = ["worktree", "remove", "--force", "--", str(path)]
            await run_git(remove, cwd=mirror, env=env, timeout=60, check=False)
        await _rmtree(path)

    async def remove_repo(self, repo: str) -> None:
        mirror = self.mirror_path(repo)
        async with self.lock(mirror):
            for tree in self._trees_of(mirror):
                await _rmtree(tree)
            await _rmtree(mirror)

    def _trees_of(self, mirror: Path) -> list[Path]:
        admin = mirror / "worktrees"
        entries = admin.glob("*/gitdir") if admin.exists() else []
        return [Path(entry.read_text().strip()).parent for entry in entries]

    async def drop_pull_refs(self, repo: str, numbers: list[int]) -> int:
        mirror = self.mirror_path(repo)
        if not numbers or not (mirror / "HEAD").exists():
            return 0
        env = self.env()
        async with self.lock(mirror):
            listing = ["for-each-ref", "--format=%(refname)", "refs/pull/"]
            existing = await run_git(listing, cwd=mirror, env=env, timeout=60)
            refs = set(existing.decode(errors="replace").split())
            gone = [f"refs/pull/{n}/head" for n in numbers if f"refs/pull/{n}/head" in refs]
            for ref in gone:
                await run_git(["update-ref", "-d", ref], cwd=mirror, env=env, timeout=60)
        return len(gone)

    async def collect_garbage(self) -> int:
        return await self._in_each_mirror(["gc", "--quiet", f"--prune={GC_PRUNE}"], GC_TIMEOUT)

    async def prune(self, max_age_seconds: float) -> int:
        removed = 0
        now = time.time()
        if self.trees.exists():
            for tree in self.trees.iterdir():
                if now - tree.stat().st_mtime > max_age_seconds:
                    await _rmtree(tree)
                    removed += 1
        await self._in_each_mirror(["worktree", "prune"], 60)
        return removed

    async def _in_each_mirror(self, args: list[str], timeout: float) -> int:
        mirrors = sorted(self.root.glob("*/*.git")) if self.root.exists() else []
        for mirror in mirrors:
            async with self.lock(mirror):
                await run_git(args, cwd=mirror, env=self.env(), timeout=timeout, check=False)
        return len(mirrors)

    async def resolve(self, repo: str, rev: str) -> str | None:
        return await commit_of(self.mirror_path(repo), self.env(), rev)


@dataclass(frozen=True)
class Disk:
    free_mb: int
    min_mb: int

    @property
    def low(self) -> bool:
        return self.free_mb < self.min_mb


def disk(data_dir: Path | str, min_mb: int) -> Disk:
    path = Path(data_dir)
    while not path.exists() and path != path.parent:
        path = path.parent
    return Disk(shutil.disk_usage(path).free // (1024 * 1024), min_mb)
