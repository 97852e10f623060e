"""`cockpit review-local`: the review engine on a local repository's commits, read only."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from bot.agents.base import AgentError, Budget
from bot.config import (
    MODEL_KEYS,
    PROVIDERS,
    ConfigError,
    Settings,
    load_settings,
    missing_model_key,
)
from bot.records.vocab import Verdict
from bot.texts import OPERATOR, render, say, usd
from bot.worktrees import GitError, Mirrors, Worktree, commit_of, run_git, with_config

if TYPE_CHECKING:
    from bot.records.types import DraftFinding

EXIT_RUNTIME, EXIT_CONFIG = 1, 2
# Where the default branch is looked for, in order: what a pull request would be opened
# against (the remote's default branch), then the usual local names.
DEFAULT_BRANCHES = (
    "refs/remotes/origin/HEAD",
    "refs/remotes/origin/main",
    "refs/remotes/origin/master",
    "refs/heads/main",
    "refs/heads/master",
)
MIRROR = "local/repository"  # the one mirror in a run's own temporary folder
MAX_LINES_SHOWN = 12  # lines of the head version shown under a finding
MAX_COMMIT_TEXT = 8000  # characters of commit messages given to the reviewer as the description
# The uncommitted count is a note, not the review: past this it is left out. Listing untracked
# files reads each folder's .gitignore, and one that is a FIFO (a hostile repository) holds git
# until someone writes to it.
UNCOMMITTED_SECONDS = 10
# Terminal control characters (ESC sequences, C1 controls, DEL) that model or commit text must
# not carry to a terminal; newlines and tabs stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class LocalError(Exception):
    """review-local cannot run as asked (EXIT_CONFIG): one line saying why and what to do."""


@dataclass(frozen=True)
class LocalOptions:
    path: str = "."
    base: str | None = None
    head: str = "HEAD"
    provider: str | None = None
    verify: bool = False
    json: bool = False


@dataclass(frozen=True)
class Revisions:
    """What is reviewed, resolved in the repository before anything else happens."""

    top: Path  # the repository's folder (the git dir for a bare one)
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    commits: tuple[str, ...]  # subjects, newest first
    description: str
    config_text: str | None  # .github/cockpit.toml at the base, as production reads it
    uncommitted: int  # changed paths in the working tree (not reviewed)


def plain(text: str | None) -> str:
    """Untrusted text (model output, commit messages, file lines) made safe for a terminal:
    control characters other than newline and tab are shown as `?`."""
    return _CONTROL.sub("?", (text or "").replace("\r\n", "\n"))


async def _git(repo: Path, env: dict[str, str], *args: str, check: bool = True) -> str:
    out = await run_git(list(args), cwd=repo, env=env, timeout=60, check=check)
    return out.decode("utf-8", errors="replace").strip()


async def _commit(repo: Path, env: dict[str, str], flag: str, ref: str, top: Path) -> str:
    sha = await commit_of(repo, env, ref)
    if sha is None:
        raise LocalError(say(OPERATOR, "local.no_commit", flag=flag, ref=ref, top=top))
    return sha


async def _default_branch(repo: Path, env: dict[str, str]) -> tuple[str, str]:
    for ref in DEFAULT_BRANCHES:
        sha = await commit_of(repo, env, ref)
        if sha is None:
            continue
        name = ref.removeprefix("refs/remotes/").removeprefix("refs/heads/")
        if ref.endswith("/HEAD"):
            target = await _git(repo, env, "symbolic-ref", "--quiet", "--short", ref, check=False)
            name = target or name
        return name, sha
    raise LocalError(say(OPERATOR, "local.no_default_branch"))


async def resolve(options: LocalOptions, mirrors: Mirrors) -> Revisions:
    """The base and head, resolved in the repository (refs and commits only), and what the
    reviewer is told of them, read in the mirror that borrows its objects."""
    env = mirrors.env()
    path = Path(options.path).expanduser()
    if not path.is_dir():
        raise LocalError(say(OPERATOR, "local.no_folder", path=options.path))
    asked = ["--is-bare-repository", "--show-object-format", "--path-format=absolute"]
    asked += ["--git-common-dir", "--git-path", "objects", "--git-path", "index"]
    try:
        bare, object_format, *paths = (await _git(path, env, "rev-parse", *asked)).splitlines()
    except GitError:
        raise LocalError(say(OPERATOR, "local.not_a_repository", path=options.path)) from None
    git_dir, objects, index = (Path(line) for line in paths)
    top = git_dir if bare == "true" else Path(await _git(path, env, "rev-parse", "--show-toplevel"))
    head_sha = await _commit(path, env, "head", options.head, top)
    if options.base is not None:
        base_ref, base_sha = options.base, await _commit(path, env, "base", options.base, top)
    else:
        base_ref, base_sha = await _default_branch(path, env)
    uncommitted = 0
    if bare != "true" and options.head == "HEAD":
        with contextlib.suppress(TimeoutError, GitError):  # no note, and the review goes on
            async with asyncio.timeout(UNCOMMITTED_SECONDS):
                uncommitted = len(await uncommitted_paths(top, index, env))
    mirror = await mirrors.borrow(MIRROR, git_dir, objects, object_format)
    merge_base = await _git(mirror, env, "merge-base", base_sha, head_sha, check=False)
    log = ""
    if merge_base:
        log_args = ["log", "--no-color", "--no-show-signature", "--format=%s%n%n%b%x00"]
        log = await _git(mirror, env, *log_args, f"{merge_base}..{head_sha}")
    messages = [m.strip() for m in log.split("\x00") if m.strip()]
    show = ["cat-file", "blob", f"{base_sha}:.github/cockpit.toml"]
    config = await run_git(show, cwd=mirror, env=env, timeout=30, limit=64 * 1024, check=False)
    return Revisions(
        top=top,
        head_ref=options.head,
        head_sha=head_sha,
        base_ref=base_ref,
        base_sha=base_sha,
        commits=tuple(m.splitlines()[0] for m in messages),
        description="\n\n".join(messages)[:MAX_COMMIT_TEXT],
        config_text=config.decode("utf-8", errors="replace") if config else None,
        uncommitted=uncommitted,
    )


_EXEC_BIT = 0o100
_INTENT_TO_ADD = 1 << 29  # `git add -N` (a flag of the index entry, as --debug shows it)
_NOT_WRITTEN_BY_GIT = re.compile(r"^/|(^|/)(\.{0,2}|\.git)(/|$)")  # `..`, `.git`, empty parts
# One record of `git ls-files -z -t -v --stage --debug`: `<tag> <mode> <oid> <stage> TAB
# <path> NUL`, then five lines of stat data and flags (each ends in a newline; the format is
# "for manual inspection", so a NUL is accepted there too).
_ENTRY = re.compile(
    r"([A-Za-z]) ([0-7]+) ([0-9a-f]+) ([0-3])\t([^\x00]*)\x00"
    r"  ctime: \d+:\d+[\n\x00]  mtime: (\d+):(\d+)[\n\x00]  dev: \d+\tino: \d+[\n\x00]"
    r"  uid: \d+\tgid: \d+[\n\x00]  size: (\d+)\tflags: ([0-9a-f]+)[\n\x00]",
    re.ASCII,
)


class IndexEntry(NamedTuple):  # a tuple: a repository has hundreds of thousands of them
    tag: str  # `ls-files -t -v`: H tracked, S skip-worktree, M unmerged (lower case: assumed
    mode: str  # unchanged, `git update-index --assume-unchanged`)
    oid: str
    stage: str
    path: str
    mtime: tuple[int, int]  # seconds, nanoseconds (0 when git did not record them)
    size: int  # the low 32 bits
    flags: int


def index_entries(out: bytes) -> list[IndexEntry]:
    """The index's entries as `git ls-files -z -t -v --stage --debug` lists them (an answer
    of another shape gives fewer: the entries up to where it changed)."""
    text = out.decode("utf-8", errors="surrogateescape")
    entries, at = [], 0
    while found := _ENTRY.match(text, at):
        tag, mode, oid, stage, path, seconds, nanoseconds, size, flags = found.groups()
        mtime = (int(seconds), int(nanoseconds))
        entries.append(IndexEntry(tag, mode, oid, stage, path, mtime, int(size), int(flags, 16)))
        at = found.end()
    return entries


def blob_id(file: str, size: int, object_format: str) -> str | None:
    """The blob id of the regular file's bytes as they are (None if it is no longer a regular
    file of `size` bytes: never a link followed, never a pipe waited on)."""
    digest = hashlib.new(object_format, b"blob %d\x00" % size)
    read = 0
    with open(os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb") as data:
        if not stat.S_ISREG(os.fstat(data.fileno()).st_mode):
            return None
        while chunk := data.read(1 << 20):
            digest.update(chunk)
            read += len(chunk)
    return digest.hexdigest() if read == size else None


def worktree_changed(top: Path, entry: IndexEntry, racy_from: int, file_mode: bool) -> bool:
    """Whether the working tree's file differs from its index entry, decided as git does
    (stat data first, then the content when the stat data cannot tell) except that the
    content is hashed as it is, never through the filters or the end-of-line conversion the
    repository configures: a touched file that git would convert counts as changed."""
    if entry.flags & _INTENT_TO_ADD:
        return True
    if _NOT_WRITTEN_BY_GIT.search(entry.path):
        return True  # never looked up
    file = f"{top}/{entry.path}"
    try:
        info = os.lstat(file)
    except (OSError, ValueError):
        return True  # deleted, or a folder where a file was
    link = entry.mode == "120000"
    if link != stat.S_ISLNK(info.st_mode) or not (link or stat.S_ISREG(info.st_mode)):
        return True
    if not link and file_mode and bool(info.st_mode & _EXEC_BIT) != (entry.mode == "100755"):
        return True
    if info.st_size & 0xFFFFFFFF != entry.size:
        return True
    seconds, nanoseconds = divmod(info.st_mtime_ns, 1_000_000_000)
    if (seconds, nanoseconds if entry.mtime[1] else 0) == entry.mtime and seconds < racy_from:
        return False
    object_format = "sha1" if len(entry.oid) == 40 else "sha256"
    try:
        parts = entry.path.split("/")
        if any(top.joinpath(*parts[:n]).is_symlink() for n in range(1, len(parts))):
            return True  # behind a link (git sees it gone): never read
        if link:
            target = os.fsencode(os.readlink(file))
            digest = hashlib.new(object_format, b"blob %d\x00" % len(target) + target)
            return digest.hexdigest() != entry.oid
        return blob_id(file, info.st_size, object_format) != entry.oid
    except OSError:
        return True


async def uncommitted_paths(top: Path, index: Path, env: dict[str, str]) -> set[str]:
    """The paths `git status` would name, found without `git status`: that command reads
    changed-looking files through the repository's clean filters (programs its config names).
    Git compares the index with HEAD and lists the index and the untracked files; the
    working tree's files are compared with the index by their stat data, and by their raw
    content's hash when that cannot tell (see `worktree_changed`)."""
    staged = ["diff-index", "--cached", "--name-only", "-z", "--no-renames", "--no-relative"]
    changed = await _paths(top, env, *staged, "--no-ext-diff", "--no-textconv", "HEAD", "--")
    wanted = r"^(core\.filemode|core\.excludesfile|status\.showuntrackedfiles)$"
    settings = await _git(top, env, "config", "--show-scope", "--get-regexp", wanted, check=False)
    config = {
        key: value
        for scope, _, setting in (line.partition("\t") for line in settings.splitlines())
        if scope != "command"  # the repository's, not git_env's
        for key, _, value in [setting.partition(" ")]
    }
    # The repository's excludes file counts for untracked files, when it is a plain file.
    excludes = config.get("core.excludesfile", "")
    readable = excludes and os.path.isfile(top / excludes)
    others_env = with_config(env, {"core.excludesFile": excludes}) if readable else env
    file_mode = config.get("core.filemode", "true").lower() not in ("false", "no", "off", "0")
    listed = ["ls-files", "-z", "-t", "-v", "--stage", "--debug", "--full-name", "--"]
    out = await run_git(listed, cwd=top, env=env, timeout=60, limit=256 << 20)
    try:  # an entry written no earlier than the index may have changed within its second
        racy_from = int(index.stat().st_mtime)
    except OSError:
        racy_from = 0
    entries = index_entries(out)
    changed |= {e.path for e in entries if e.stage != "0"}  # unmerged
    # Submodules, skip-worktree and assume-unchanged entries are not looked at, as git does.
    looked = [e for e in entries if e.stage == "0" and e.tag == "H" and e.mode != "160000"]
    changed |= await asyncio.to_thread(
        lambda: {e.path for e in looked if worktree_changed(top, e, racy_from, file_mode)}
    )
    untracked = config.get("status.showuntrackedfiles", "normal").lower()
    if untracked not in ("no", "false", "off", "0"):
        others = ["ls-files", "-z", "--others", "--exclude-standard", "--directory", "--full-name"]
        changed |= await _paths(top, others_env, *others, "--no-empty-directory", "--")
    return changed


async def _paths(top: Path, env: dict[str, str], *args: str) -> set[str]:
    out = await run_git(list(args), cwd=top, env=env, timeout=60, limit=64 << 20)
    return {p for p in out.decode("utf-8", errors="surrogateescape").split("\x00") if p}


async def review_local(
    options: LocalOptions, settings: Settings, work: Path
) -> tuple[dict[str, Any], Revisions]:
    """The draft and what it cost, as `--json` prints it (the README's "Try it on your code"
    documents it) and the terminal shows it (templates/local/draft.txt.j2)."""
    from bot.agents.providers import ModelClients
    from bot.evals.runner import Cost, session_spend
    from bot.records.sqlite import SqliteDatabase
    from bot.repo_config import RepoConfig, parse_repo_config
    from bot.review.pipeline import Reviewer, ReviewRequest, review_worktree
    from bot.review.verify import choose_provider, settle_passes, verify_unverified

    mirrors = Mirrors(work, offline=True)
    revisions = await resolve(options, mirrors)
    config = parse_repo_config(revisions.config_text) if revisions.config_text else RepoConfig()
    provider = options.provider or config.provider or settings.provider
    _require_key(provider, options.provider is not None)
    available = [p for p in PROVIDERS if missing_model_key(p) is None]
    verify_with = None
    if options.verify or config.verify:
        verify_with = choose_provider(provider, config.verify_provider, available)
    notes = []
    if config.error:
        notes.append(say(OPERATOR, "local.config_error", error=config.error))
    if revisions.uncommitted:
        notes.append(say(OPERATOR, "local.uncommitted", count=revisions.uncommitted))
    tree = await mirrors.add_worktree(
        MIRROR, name="review-local", head_sha=revisions.head_sha, base_ref=revisions.base_sha
    )
    db = await SqliteDatabase.open(work / "cockpit.sqlite3")
    models = ModelClients(settings)
    try:
        model = models.provider(provider).model
        review: dict[str, Any] = {
            "repository": str(revisions.top),
            "base": {"ref": revisions.base_ref, "sha": revisions.base_sha},
            "head": {"ref": revisions.head_ref, "sha": revisions.head_sha},
            "merge_base": tree.merge_base,
            "provider": provider,
            "model": model,
            "verdict": Verdict.COMMENT,
            "summary": "",
            "findings": [],
            "skipped": [],
            "verify": None,
            "tokens": 0,
            "usd": 0.0,
            "notes": notes,
        }
        if tree.merge_base == tree.head_sha:
            head, base = revisions.head_ref, revisions.base_ref
            review["summary"] = say(OPERATOR, "local.nothing_to_review", head=head, base=base)
            return review, revisions
        commits, head = revisions.commits, revisions.head_ref
        title = commits[0] if len(commits) == 1 else f"{len(commits)} commits on {head}"
        request = ReviewRequest(
            repo=revisions.top.name,
            number=0,
            title=title,
            body=revisions.description,
            base_ref=revisions.base_ref,
            provider=provider,
            config=config,
        )
        progress = say(
            OPERATOR,
            "local.reviewing",
            revisions=revisions,
            merge_base=tree.merge_base,
            provider=provider,
            model=model,
            verify_with=verify_with,
        )
        print(progress, file=sys.stderr, flush=True)
        reviewer = Reviewer(db, models, Budget.from_settings(settings))
        draft = await review_worktree(reviewer, tree, request)
        if draft.once:  # `passes`: what one pass only raised stays when verify confirms it
            chosen = verify_with or choose_provider(provider, config.verify_provider, available)
            draft, error = await settle_passes(reviewer, tree, request, draft, provider=chosen)
            review["verify"] = {"provider": chosen, "error": error}
        findings = draft.findings
        if verify_with is not None and findings:
            findings, error = await verify_unverified(
                reviewer, tree, request, draft, provider=verify_with
            )
            review["verify"] = {"provider": verify_with, "error": error}
        spent = Cost()
        if draft.session_id is not None:  # the reviewer's runs and the verify pass's
            spent = sum(await session_spend(db, draft.session_id), Cost())
        review |= {
            "verdict": draft.verdict,
            "summary": draft.summary,
            "findings": await _numbered(tree, findings),
            "skipped": [{"path": path, "why": why} for path, why in draft.skipped],
            "tokens": spent.tokens,
            "usd": spent.usd,
        }
        return review, revisions
    finally:
        await models.close()
        await db.close()


def _require_key(provider: str, chosen: bool) -> None:
    missing = missing_model_key(provider)
    if missing is None:
        return
    others = [(p, MODEL_KEYS[p][0]) for p in PROVIDERS if p != provider]
    raise LocalError(
        say(
            OPERATOR,
            "local.missing_key",
            variable=missing.variable,
            provider=provider,
            chosen=chosen,
            others=others,
        )
    )


async def _numbered(tree: Worktree, findings: list[DraftFinding]) -> list[dict[str, Any]]:
    """The findings numbered F1…Fn, with their lines as the head has them (at most
    MAX_LINES_SHOWN each)."""
    files: dict[str, list[str]] = {}
    numbered = []
    for number, f in enumerate(findings, 1):
        lines = []
        if f.line and f.side != "LEFT":
            if f.path not in files:
                out = await tree.git("cat-file", "blob", f"{tree.head_sha}:{f.path}", check=False)
                binary = not out or b"\0" in out[:8000]
                files[f.path] = [] if binary else out.decode(errors="replace").splitlines()
            content = files[f.path]
            last = min(f.end_line or f.line, f.line + MAX_LINES_SHOWN - 1, len(content))
            lines = [{"line": n, "text": content[n - 1]} for n in range(f.line, last + 1)]
        numbered.append({"id": f"F{number}", **dataclasses.asdict(f), "lines": lines})
    return numbered


def run_review_local(options: LocalOptions) -> int:
    try:
        settings = load_settings(github=False)
    except ConfigError as exc:
        print(say(OPERATOR, "local.config_failed", error=exc), file=sys.stderr)
        return EXIT_CONFIG
    work = None
    try:
        # The key first, before any work: nothing read, nothing written.
        _require_key(options.provider or settings.provider, options.provider is not None)
        work = Path(tempfile.mkdtemp(prefix="cockpit-review-local-"))
        settings = dataclasses.replace(settings, data_dir=work)
        review, revisions = asyncio.run(review_local(options, settings, work))
    except LocalError as exc:
        print(say(OPERATOR, "local.failed", error=exc), file=sys.stderr)
        return EXIT_CONFIG
    except (AgentError, GitError) as exc:
        print(say(OPERATOR, "local.review_failed", error=exc), file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    if options.json:
        print(json.dumps(review, indent=2, ensure_ascii=False))
    else:
        text = render(
            "local/draft.txt.j2",
            review=review,
            commits=len(revisions.commits),
            plain=plain,
            cost=usd(review["usd"]),
            tokens=f"{review['tokens']:,}",
        )
        print(text, end="")
    return 0
