"""`cockpit review-local`: the production review engine on a local repository's commits, with
the draft printed in the terminal. It never talks to GitHub and never writes to the repository.

The repository is only read: a few read-only git commands resolve the base and the head in it
(with git's safe environment: no hooks, no fsmonitor, no optional locks), then a bare mirror
under a temporary folder borrows its objects (`git clone --mirror --shared`: nothing is copied
and nothing is written on the repository's side) and the review's worktree is made from that
mirror, as production makes one from its mirror of GitHub. The runs and the session go to a
temporary SQLite database: a trial on a laptop never mixes with a server's ledger and stats
(`cockpit stats`, the daily budget), and nothing is left behind. Both go when the command ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.agents.base import AgentError, Budget
from bot.config import (
    MODEL_KEYS,
    PROVIDERS,
    ConfigError,
    Settings,
    load_settings,
    missing_model_key,
)
from bot.redaction import redact
from bot.texts import catalogue, render, usd
from bot.worktrees import GitError, Mirrors, Worktree, run_git

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
MAX_LINES_SHOWN = 12  # lines of the head version shown under a finding
MAX_COMMIT_TEXT = 8000  # characters of commit messages given to the reviewer as the description
# Terminal control characters (ESC sequences, C1 controls, DEL) that model or commit text must
# not carry to a terminal; newlines and tabs stay.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class LocalError(Exception):
    """review-local cannot run as asked: one line saying why and what to do."""

    def __init__(self, message: str, code: int = EXIT_CONFIG) -> None:
        super().__init__(message)
        self.code = code


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
    git_dir: Path  # where its objects are (the common dir of a linked worktree)
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    commits: tuple[str, ...]  # subjects, newest first
    description: str
    config_text: str | None  # .github/cockpit.toml at the base, as production reads it
    uncommitted: int  # changed paths in the working tree (not reviewed)


@dataclass
class LocalReview:
    """The draft and what it cost, as printed (`render_text`) or emitted (`to_json`)."""

    revisions: Revisions
    merge_base: str
    provider: str
    model: str
    verdict: str
    summary: str
    findings: list[Any]  # bot.records.types.DraftFinding, verify status included
    lines: dict[int, list[tuple[int, str]]]  # finding index → (line, text) at the head
    skipped: tuple[tuple[str, str], ...]
    tokens: int = 0
    usd: float | None = 0.0
    verify_provider: str | None = None
    verify_error: str | None = None
    notes: list[str] = field(default_factory=list)


def say(kind: str, **context: Any) -> str:
    """What `review-local` prints (templates/local/messages.txt.j2), fit to print."""
    return redact(catalogue("local/messages.txt.j2", kind, **context))


def plain(text: str | None) -> str:
    """Untrusted text (model output, commit messages, file lines) made safe for a terminal:
    control characters other than newline and tab are shown as `?`."""
    return _CONTROL.sub("?", (text or "").replace("\r\n", "\n"))


# -- the repository, read only ----------------------------------------------------------------


async def _git(repo: Path, env: dict[str, str], *args: str, check: bool = True) -> str:
    out = await run_git(list(args), cwd=repo, env=env, timeout=60, check=check)
    return out.decode("utf-8", errors="replace").strip()


async def _commit(repo: Path, env: dict[str, str], rev: str) -> str | None:
    verify = ("rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}")
    return await _git(repo, env, *verify, check=False) or None


async def _default_branch(repo: Path, env: dict[str, str]) -> tuple[str, str]:
    for ref in DEFAULT_BRANCHES:
        sha = await _commit(repo, env, ref)
        if sha is None:
            continue
        name = ref.removeprefix("refs/remotes/").removeprefix("refs/heads/")
        if ref.endswith("/HEAD"):
            target = await _git(repo, env, "symbolic-ref", "--quiet", "--short", ref, check=False)
            name = target or name
        return name, sha
    raise LocalError(say("no_default_branch"))


async def resolve(options: LocalOptions, env: dict[str, str]) -> Revisions:
    path = Path(options.path).expanduser()
    if not path.is_dir():
        raise LocalError(say("no_folder", path=options.path))
    try:
        bare = await _git(path, env, "rev-parse", "--is-bare-repository")
    except GitError:
        raise LocalError(say("not_a_repository", path=options.path)) from None
    git_dir = Path(await _git(path, env, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    top = git_dir if bare == "true" else Path(await _git(path, env, "rev-parse", "--show-toplevel"))
    head_sha = await _commit(path, env, options.head)
    if head_sha is None:
        raise LocalError(say("no_commit", flag="head", ref=options.head, top=top))
    if options.base is not None:
        base_ref = options.base
        base_sha = await _commit(path, env, options.base)
        if base_sha is None:
            raise LocalError(say("no_commit", flag="base", ref=options.base, top=top))
    else:
        base_ref, base_sha = await _default_branch(path, env)
    merge_base = await _git(path, env, "merge-base", base_sha, head_sha, check=False)
    log = ""
    if merge_base:
        log = await _git(
            path, env, "log", "--no-color", "--format=%s%n%n%b%x00", f"{merge_base}..{head_sha}"
        )
    messages = [m.strip() for m in log.split("\x00") if m.strip()]
    show = ["cat-file", "blob", f"{base_sha}:.github/cockpit.toml"]
    config = await run_git(show, cwd=path, env=env, timeout=30, limit=64 * 1024, check=False)
    uncommitted = 0
    if bare != "true" and options.head == "HEAD":
        status = await _git(path, env, "status", "--porcelain", "--no-renames")
        uncommitted = len(status.splitlines())
    return Revisions(
        top=top,
        git_dir=git_dir,
        head_ref=options.head,
        head_sha=head_sha,
        base_ref=base_ref,
        base_sha=base_sha,
        commits=tuple(m.splitlines()[0] for m in messages),
        description="\n\n".join(messages)[:MAX_COMMIT_TEXT],
        config_text=config.decode("utf-8", errors="replace") if config else None,
        uncommitted=uncommitted,
    )


async def mirror_of(mirrors: Mirrors, key: str, revisions: Revisions) -> Worktree:
    """A bare mirror that borrows the repository's objects (alternates: no copy, no write
    there), and the review's worktree of it at the head, diffed from the merge base."""
    mirror = mirrors.mirror_path(key)
    async with mirrors.lock(mirror):
        clone = ["clone", "--mirror", "--shared", "--quiet", "--", str(revisions.git_dir)]
        await run_git([*clone, str(mirror)], cwd=mirror.parent, env=mirrors.env())
    return await mirrors.add_worktree(
        key, name="review-local", head_sha=revisions.head_sha, base_ref=revisions.base_sha
    )


# -- the engine ------------------------------------------------------------------------------------


async def run_engine(
    reviewer: Any, tree: Worktree, request: Any, verify_with: str | None
) -> tuple[Any, list[Any], Any]:
    """The production pipeline, as the review job runs it: the review, then (when asked) the
    verify pass over its findings. Returns the draft, its findings with their verdicts, and
    the verification (None when none ran)."""
    from bot.review.pipeline import review_worktree
    from bot.review.verify import apply_verification, verify_draft

    draft = await review_worktree(reviewer, tree, request)
    if verify_with is None or not draft.findings:
        return draft, list(draft.findings), None
    verification = await verify_draft(reviewer, tree, request, draft, provider=verify_with)
    return draft, apply_verification(draft.findings, verification), verification


async def review_local(options: LocalOptions, settings: Settings, work: Path) -> LocalReview:
    from bot.agents.providers import ModelClients
    from bot.evals.runner import Spend, session_spend
    from bot.records.sqlite import Database
    from bot.repo_config import RepoConfig, parse_repo_config
    from bot.review.pipeline import Reviewer, ReviewRequest
    from bot.review.verify import choose_provider

    mirrors = Mirrors(work)
    revisions = await resolve(options, mirrors.env())
    config = parse_repo_config(revisions.config_text) if revisions.config_text else RepoConfig()
    provider = options.provider or config.provider or settings.provider
    _require_key(provider, options.provider is not None)
    available = [p for p in PROVIDERS if missing_model_key(p) is None]
    verify_with = None
    if options.verify or config.verify:
        verify_with = choose_provider(provider, config.verify_provider, available)
    notes = []
    if config.error:
        notes.append(say("config_error", error=config.error))
    if revisions.uncommitted:
        notes.append(say("uncommitted", count=revisions.uncommitted))
    key = "local/" + (re.sub(r"[^A-Za-z0-9._-]", "_", revisions.top.name) or "repository")
    tree = await mirror_of(mirrors, key, revisions)
    db = await Database.open(work / "cockpit.sqlite3")
    models = ModelClients(settings)
    try:
        model = models.provider(provider).model
        review = LocalReview(revisions, tree.merge_base, provider, model, "comment", "", [], {}, ())
        review.notes = notes
        if tree.merge_base == tree.head_sha:
            review.summary = say(
                "nothing_to_review", head=revisions.head_ref, base=revisions.base_ref
            )
            return review
        request = ReviewRequest(
            repo=revisions.top.name,
            number=0,
            title=revisions.commits[0]
            if len(revisions.commits) == 1
            else f"{len(revisions.commits)} commits on {revisions.head_ref}",
            body=revisions.description,
            base_ref=revisions.base_ref,
            provider=provider,
            config=config,
        )
        progress = say(
            "reviewing",
            revisions=revisions,
            merge_base=tree.merge_base,
            provider=provider,
            model=model,
            verify_with=verify_with,
        )
        print(progress, file=sys.stderr, flush=True)
        reviewer = Reviewer(db, models, Budget.from_settings(settings))
        draft, findings, verification = await run_engine(reviewer, tree, request, verify_with)
        review.verdict, review.summary, review.skipped = draft.verdict, draft.summary, draft.skipped
        review.findings, review.lines = findings, await _lines(tree, findings)
        spent = Spend()
        if draft.session_id is not None:  # the reviewer's runs and the verify pass's
            spent = sum(await session_spend(db, draft.session_id), Spend())
        review.tokens, review.usd = spent.tokens, spent.usd
        if verification is not None:
            review.verify_provider, review.verify_error = verification.provider, verification.error
        return review
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
            "missing_key",
            variable=missing.variable,
            provider=provider,
            chosen=chosen,
            others=others,
        )
    )


async def _lines(tree: Worktree, findings: list[Any]) -> dict[int, list[tuple[int, str]]]:
    """Each finding's lines as the head has them (at most MAX_LINES_SHOWN)."""
    files: dict[str, list[str] | None] = {}
    shown: dict[int, list[tuple[int, str]]] = {}
    for index, finding in enumerate(findings):
        if not finding.line or finding.side == "LEFT":
            continue
        if finding.path not in files:
            out = await tree.git("cat-file", "blob", f"{tree.head_sha}:{finding.path}", check=False)
            binary = not out or b"\0" in out[:8000]
            files[finding.path] = None if binary else out.decode(errors="replace").splitlines()
        content = files[finding.path]
        if content is None:
            continue
        first = finding.line
        last = min(finding.end_line or first, first + MAX_LINES_SHOWN - 1)
        shown[index] = [(n, content[n - 1]) for n in range(first, last + 1) if n <= len(content)]
    return shown


# -- output ----------------------------------------------------------------------------------------


def to_json(review: LocalReview) -> dict[str, Any]:
    """The draft as data (the README's "Try it on your code" documents the shape)."""
    revisions = review.revisions
    return {
        "repository": str(revisions.top),
        "base": {"ref": revisions.base_ref, "sha": revisions.base_sha},
        "head": {"ref": revisions.head_ref, "sha": revisions.head_sha},
        "merge_base": review.merge_base,
        "provider": review.provider,
        "model": review.model,
        "verdict": review.verdict,
        "summary": review.summary,
        "findings": [
            {
                "id": f"F{index + 1}",
                "severity": f.severity,
                "path": f.path,
                "line": f.line,
                "end_line": f.end_line,
                "side": f.side,
                "title": f.title,
                "body": f.body,
                "suggestion": f.suggestion,
                "in_diff": f.in_diff,
                "lines": [{"line": n, "text": text} for n, text in review.lines.get(index, [])],
                "verify_status": f.verify_status,
                "verify_note": f.verify_note,
            }
            for index, f in enumerate(review.findings)
        ],
        "skipped": [{"path": path, "why": why} for path, why in review.skipped],
        "verify": None
        if review.verify_provider is None
        else {"provider": review.verify_provider, "error": review.verify_error},
        "tokens": review.tokens,
        "usd": review.usd,
        "notes": review.notes,
    }


def render_text(review: LocalReview) -> str:
    return render(
        "local/draft.txt.j2",
        review=to_json(review),
        commits=len(review.revisions.commits),
        plain=plain,
        cost=usd(review.usd),
        tokens=f"{review.tokens:,}",
    )


# -- the command -----------------------------------------------------------------------------------


def run_review_local(options: LocalOptions) -> int:
    try:
        settings = load_settings(github=False)
    except ConfigError as exc:
        print(say("config_failed", error=exc), file=sys.stderr)
        return EXIT_CONFIG
    try:
        _require_key(options.provider or settings.provider, options.provider is not None)
    except LocalError as exc:  # before any work: nothing read, nothing written
        print(say("failed", error=exc), file=sys.stderr)
        return exc.code
    work = Path(tempfile.mkdtemp(prefix="cockpit-review-local-"))
    try:
        settings = dataclasses.replace(settings, data_dir=work)
        review = asyncio.run(review_local(options, settings, work))
    except LocalError as exc:
        print(say("failed", error=exc), file=sys.stderr)
        return exc.code
    except (AgentError, GitError) as exc:
        print(say("review_failed", error=exc), file=sys.stderr)
        return EXIT_RUNTIME
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if options.json:
        print(json.dumps(to_json(review), indent=2, ensure_ascii=False))
    else:
        print(render_text(review), end="")
    return 0
