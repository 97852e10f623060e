"""`cockpit review-local` from another folder: the production engine (scripted model behind the
real SDKs) on a local repository's commits; the draft printed or as JSON; the repository left
exactly as it was, its hooks never run; no key, no work."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.local import plain
from bot.standin.repo import write_files
from bot.standin.scripted import MODEL

BASE = {
    "app/db.py": "import sqlite3\n\n\ndef find_user(conn, name):\n"
    "    return conn.execute('SELECT * FROM users WHERE name = ?', (name,))\n",
    "README.md": "# widgets\n",
}
FIRST = {
    "app/db.py": 'import sqlite3\n\nPASSWORD = "hunter2-prod"\n\n\ndef find_user(conn, name):\n'
    "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\")\n",
}
SECOND = {
    "app/calc.py": "def parse(text):\n    try:\n        return eval(text)\n    except:\n"
    "        return None\n",
    "tests/test_db.py": 'API_TOKEN = "test-token-not-a-secret"\n',
}
HOOKS = (
    "pre-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "post-merge",
    "fsmonitor-watchman",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    """main (the base) and a checked-out feature branch two commits ahead, with hooks and an
    fsmonitor that would leave a mark if anything ran them, and an origin/HEAD like a clone."""
    path = tmp_path / "widgets"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.com")
    git(path, "config", "user.name", "Dev")
    write_files(path, BASE)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    git(path, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(path, "symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/main")
    git(path, "checkout", "-q", "-b", "feature")
    write_files(path, FIRST)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Look users up by name")
    write_files(path, SECOND)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "A calculator parser")
    marker = tmp_path / "hook-ran"
    for hook in HOOKS:
        script = path / ".git" / "hooks" / hook
        script.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        script.chmod(0o755)
    git(path, "config", "core.fsmonitor", str(path / ".git" / "hooks" / "fsmonitor-watchman"))
    return path


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under the repository (.git included): content hash and mode."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            found[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(),
                info.st_mode,
            )
        elif stat.S_ISDIR(info.st_mode):
            found[str(path.relative_to(root)) + "/"] = ("dir", info.st_mode)
    return found


@pytest.fixture
def elsewhere(tmp_path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def base_env(tmp_path: Path) -> dict[str, str]:
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TMPDIR": str(temp),
        "COCKPIT_CLAUDE_MODEL": MODEL,
        "COCKPIT_CODEX_MODEL": MODEL,
    }


@pytest.fixture
def env(tmp_path, anthropic_standin, openai_standin) -> dict[str, str]:
    keys = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    return {**base_env(tmp_path), **{k: os.environ[k] for k in keys}}


async def cockpit(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """The real command in a subprocess (the stand-ins answer on this test's loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_the_draft_of_a_branch_is_printed_and_the_repository_is_untouched(
    repo, elsewhere, env, tmp_path, anthropic_standin
):
    (repo / "README.md").write_text("# widgets, edited but not committed\n")
    (repo / "scratch.txt").write_text("untracked\n")
    before = snapshot(repo)
    code, out, err = await cockpit("review-local", str(repo), env=env, cwd=elsewhere)
    assert code == 0, err
    assert snapshot(repo) == before  # files, refs, index, config, hooks: all as they were
    assert not (tmp_path / "hook-ran").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # its mirror and database are gone
    assert "2 commit(s), origin/main (" in out and ".. HEAD (" in out
    assert "Verdict: request changes" in out
    assert "the most serious is critical" in out
    assert "F1 · critical · app/calc.py:3" in out
    assert "3 |         return eval(text)" in out  # the lines concerned, from the head
    assert "F3 · major · app/db.py:3" in out and 'PASSWORD = "hunter2-prod"' in out
    assert "Verify:" not in out  # no verify pass unless asked
    assert "2 uncommitted change(s) in the working tree are not reviewed" in out
    assert "Tokens: " in out and "cost: $0.0000" in out
    assert "Reviewing widgets: 2 commit(s)" in err
    # The reviewer was told about the commits, as a PR's title and description.
    first = anthropic_standin.requests[0]["messages"][0]["content"]
    text = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    assert "2 commits on HEAD" in text and "Look users up by name" in text
    assert anthropic_standin.rejected == []


async def test_json_with_a_verify_pass(repo, elsewhere, env, openai_standin):
    code, out, err = await cockpit(
        "review-local", str(repo), "--verify", "--json", env=env, cwd=elsewhere
    )
    assert code == 0, err
    draft = json.loads(out)
    assert draft["repository"] == str(repo)
    assert draft["head"] == {"ref": "HEAD", "sha": git(repo, "rev-parse", "HEAD")}
    assert draft["base"] == {"ref": "origin/main", "sha": git(repo, "rev-parse", "main")}
    assert draft["merge_base"] == draft["base"]["sha"]
    assert (draft["provider"], draft["model"], draft["verdict"]) == (
        "claude",
        MODEL,
        "request_changes",
    )
    assert draft["verify"] == {"provider": "codex", "error": None}
    by_path = {(f["path"], f["line"]): f for f in draft["findings"]}
    assert [f["id"] for f in draft["findings"]] == [f"F{n}" for n in range(1, 6)]
    token = by_path[("tests/test_db.py", 1)]
    assert token["verify_status"] == "refuted" and "test code" in token["verify_note"]
    sql = by_path[("app/db.py", 7)]
    assert sql["severity"] == "critical" and sql["verify_status"] == "confirmed"
    assert sql["lines"] == [{"line": 7, "text": FIRST["app/db.py"].splitlines()[6]}]
    assert sql["in_diff"] is True and sql["side"] == "RIGHT"
    assert draft["tokens"] > 0 and draft["usd"] == 0
    assert draft["notes"] == [] and draft["skipped"] == []
    assert len(openai_standin.requests) > 0  # the verifier: the other provider


async def test_base_and_head_choose_the_commits(repo, elsewhere, env):
    first = git(repo, "rev-parse", "HEAD~1")
    code, out, err = await cockpit(
        "review-local",
        str(repo),
        "--base",
        "main",
        "--head",
        "HEAD~1",
        "--json",
        env=env,
        cwd=elsewhere,
    )
    assert code == 0, err
    draft = json.loads(out)
    assert draft["head"] == {"ref": "HEAD~1", "sha": first}
    assert {f["path"] for f in draft["findings"]} == {"app/db.py"}
    assert draft["notes"] == []  # another head than HEAD: the working tree is not its business
    code, out, err = await cockpit(
        "review-local", str(repo), "--base", "HEAD~1", "--json", env=env, cwd=elsewhere
    )
    assert code == 0, err
    assert {f["path"] for f in json.loads(out)["findings"]} == {"app/calc.py", "tests/test_db.py"}


async def test_the_current_folder_is_the_default_and_main_without_a_remote(
    repo, env, anthropic_standin
):
    git(repo, "update-ref", "-d", "refs/remotes/origin/HEAD")
    git(repo, "update-ref", "-d", "refs/remotes/origin/main")
    code, out, err = await cockpit("review-local", "--json", env=env, cwd=repo / "app")
    assert code == 0, err
    assert json.loads(out)["base"]["ref"] == "main"


async def test_nothing_to_review_on_the_default_branch_costs_nothing(
    repo, elsewhere, env, anthropic_standin
):
    git(repo, "checkout", "-q", "main")
    code, out, err = await cockpit("review-local", str(repo), env=env, cwd=elsewhere)
    assert code == 0, err
    assert "Nothing to review: HEAD has no commits that origin/main lacks" in out
    assert anthropic_standin.requests == []


@pytest.mark.parametrize(
    ("args", "variable"),
    [((), "ANTHROPIC_API_KEY"), (("--provider", "codex"), "OPENAI_API_KEY")],
)
async def test_without_the_model_key_it_names_the_variable_before_any_work(
    repo, elsewhere, tmp_path, args, variable
):
    env = base_env(tmp_path)
    before = snapshot(repo)
    code, out, err = await cockpit("review-local", str(repo), *args, env=env, cwd=elsewhere)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"cockpit review-local: {variable} is not set")
    assert list((tmp_path / "tmp").iterdir()) == []
    assert snapshot(repo) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--head", "no-such-branch"), "--head no-such-branch: no such commit"),
        (("--base", "nope"), "--base nope: no such branch or commit"),
    ],
)
async def test_unknown_refs_are_named(repo, elsewhere, env, args, expected):
    code, _, err = await cockpit("review-local", str(repo), *args, env=env, cwd=elsewhere)
    assert code == 2
    assert err.strip().splitlines()[-1].startswith(f"cockpit review-local: {expected}")


async def test_a_folder_outside_any_repository(elsewhere, env):
    code, _, err = await cockpit("review-local", str(elsewhere), env=env, cwd=elsewhere)
    assert code == 2 and "is not in a git repository" in err
    assert "Traceback" not in err


@given(st.text())
def test_terminal_text_never_carries_control_characters(text):
    shown = plain(text)
    assert not any((ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert len(shown) <= len(text)


# -- a repository that names programs -----------------------------------------------------------

# Every place a repository's git config (or its attributes, pointing at that config) can name a
# program git would run: each one leaves a marker named after its key if it ever runs.
HOSTILE_CONFIG = {
    "filter.evil.clean": "filter.clean",
    "filter.evil.smudge": "filter.smudge",
    "filter.proc.process": "filter.process",
    "diff.evil.textconv": "diff.textconv",
    "diff.drv.command": "diff.command",
    "diff.external": "diff.external",
    "merge.drv.driver": "merge.driver",
    "core.fsmonitor": "core.fsmonitor",
    "core.pager": "core.pager",
    "pager.log": "pager.log",
    "pager.status": "pager.status",
    "core.sshCommand": "core.sshCommand",
    "core.gitProxy": "core.gitProxy",
    "core.askPass": "core.askPass",
    "core.alternateRefsCommand": "core.alternateRefsCommand",
    "core.editor": "core.editor",
    "gpg.program": "gpg.program",
    "gpg.ssh.program": "gpg.ssh.program",
    "credential.helper": "credential.helper",
    "uploadpack.packObjectsHook": "uploadpack.packObjectsHook",
}
INCLUDED_CONFIG = {  # in a file `include.path` names, and one `includeIf` names
    "filter.inc.clean": "include.filter.clean",
    "diff.inc.textconv": "include.diff.textconv",
}
CONDITIONAL_CONFIG = {"filter.cond.clean": "includeIf.filter.clean"}
ATTRIBUTES_INFO = "*.md filter=proc diff=drv merge=drv\n"  # .git/info/attributes
ATTRIBUTES_COMMITTED = (  # the committed .gitattributes (later lines win)
    "* filter=evil diff=evil merge=drv\ntests/* filter=inc diff=inc\n.gitattributes filter=cond\n"
)


def program(folder: Path, marks: Path, name: str) -> str:
    """A script that leaves `marks/<name>` when run."""
    script = folder / name.replace("/", "_")
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marks / name}"\n')
    script.chmod(0o755)
    return str(script)


def sign(repo: Path) -> None:
    """Give the head commit a (fake) signature, so showing signatures would call gpg."""
    head = git(repo, "cat-file", "commit", "HEAD") + "\n"
    header, _, message = head.partition("\n\n")
    signature = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n =fake\n -----END PGP SIGNATURE-----"
    signed = f"{header}\n{signature}\n\n{message}"
    sha = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--stdin"],
        cwd=repo,
        input=signed,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    git(repo, "update-ref", "refs/heads/feature", sha)


@pytest.fixture
def hostile(repo, tmp_path) -> tuple[Path, Path]:
    """The feature branch of `repo`, in a repository whose config, attributes (its own and
    committed ones) and hooks name a program for every key git might run one for; every
    tracked file touched after the index was written (a `git status` would run the clean
    filters to see whether they changed). Returns the repository and the markers' folder."""
    marks, programs, hooks = tmp_path / "marks", tmp_path / "programs", tmp_path / "hooks"
    for folder in (marks, programs, hooks):
        folder.mkdir()
    git(repo, "checkout", "-q", "main")
    (repo / ".gitattributes").write_text(ATTRIBUTES_COMMITTED)
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(repo, "checkout", "-q", "feature")
    git(repo, "rebase", "-q", "main")
    sign(repo)
    git(repo, "reset", "-q", "--hard", "feature")
    for hook in (*HOOKS, "post-rewrite", "pre-push", "post-commit", "push-to-checkout"):
        script = hooks / hook
        script.write_text(f'#!/bin/sh\necho "$0" >> "{marks / ("core.hooksPath." + hook)}"\n')
        script.chmod(0o755)
    tracked = git(repo, "ls-files").splitlines()
    config = {key: program(programs, marks, name) for key, name in HOSTILE_CONFIG.items()}
    config["credential.helper"] = "!" + config["credential.helper"]
    config["core.hooksPath"] = str(hooks)
    config["log.showSignature"] = "true"
    config["protocol.allow"] = "always"
    config["remote.origin.url"] = "ssh://git@example.invalid/widgets.git"
    config["remote.origin.fetch"] = "+refs/heads/*:refs/remotes/origin/*"
    config["remote.ext.url"] = "ext::" + program(programs, marks, "remote.ext")
    config["remote.proxied.url"] = "git://example.invalid/widgets.git"  # core.gitProxy's
    included, conditional = tmp_path / "included.gitconfig", tmp_path / "conditional.gitconfig"
    for path, keys in ((included, INCLUDED_CONFIG), (conditional, CONDITIONAL_CONFIG)):
        for key, name in keys.items():
            subprocess.run(
                ["git", "config", "-f", str(path), key, program(programs, marks, name)],
                check=True,
            )
    config["include.path"] = str(included)
    config[f"includeIf.gitdir:{repo}/.git.path"] = str(conditional)
    for key, value in config.items():
        git(repo, "config", key, value)
    (repo / ".git" / "info" / "attributes").write_text(ATTRIBUTES_INFO)
    later = (repo / ".git" / "index").stat().st_mtime + 3600
    for path in tracked:  # the index's stat no longer matches
        os.utime(repo / path, (later, later))
    assert list(marks.iterdir()) == []  # setting it up ran nothing
    (tmp_path / "hook-ran").unlink(missing_ok=True)  # the commits above ran `repo`'s hooks
    return repo, marks


def test_plain_git_runs_the_programs_the_hostile_repository_names(hostile):
    """The hostile repository bites: ordinary git commands in it run the programs (so the
    test below would see one that review-local ran)."""
    repo, marks = hostile
    runs = {
        ("status", "--", "app"): {"filter.clean", "core.fsmonitor"},
        ("status", "--", "README.md"): {"filter.process"},
        ("status", "--", "tests"): {"include.filter.clean"},
        ("status", "--", ".gitattributes"): {"includeIf.filter.clean"},
        ("diff", "main", "feature"): {"diff.external"},
        ("diff", "--no-ext-diff", "main", "feature"): {"diff.textconv", "include.diff.textconv"},
        ("log", "-1"): {"gpg.program"},
        ("fetch", "origin"): {"core.sshCommand"},
        ("fetch", "ext"): {"remote.ext"},
        ("fetch", "proxied"): {"core.gitProxy"},
        ("credential", "fill"): {"credential.helper"},
    }
    for args, expected in runs.items():
        for mark in marks.iterdir():
            mark.unlink()
        subprocess.run(
            ["git", *args],
            cwd=repo,
            input="protocol=https\nhost=example.com\n\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert expected <= {p.name for p in marks.iterdir()}, args


def state(root: Path) -> dict[str, tuple[str, int, int]]:
    """Every file and folder under the repository (.git included): content hash (or link
    target), mode and mtime."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            content = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        else:
            content = "dir"
        found[str(path.relative_to(root))] = (content, info.st_mode, info.st_mtime_ns)
    return found


async def test_a_hostile_repository_runs_no_program_and_is_not_written(
    hostile, elsewhere, env, tmp_path
):
    repo, marks = hostile
    before = state(repo)
    code, out, err = await cockpit("review-local", str(repo), env=env, cwd=elsewhere)
    assert sorted(p.name for p in marks.iterdir()) == []  # no program the repository names ran
    assert not (tmp_path / "hook-ran").exists()
    assert code == 0, err
    assert state(repo) == before  # not a byte, not an mtime: index, config, refs, files
    assert "Verdict: request changes" in out and "F1 · critical · app/calc.py:3" in out
    # Every tracked file was touched, none changed: nothing to commit, nothing said.
    assert "uncommitted" not in out
    code, out, err = await cockpit(
        "review-local", str(repo), "--verify", "--json", env=env, cwd=elsewhere
    )
    assert sorted(p.name for p in marks.iterdir()) == []
    assert code == 0, err
    assert json.loads(out)["verify"] == {"provider": "codex", "error": None}
    assert state(repo) == before


async def test_a_partial_clone_fetches_no_missing_object(repo, elsewhere, env, tmp_path):
    """A repository that says it is a partial clone, with an object the review would read
    missing: git would fetch it from the promisor remote (a program the config names, then a
    write); review-local fetches nothing, runs nothing and reads what is there."""
    marks, programs = tmp_path / "marks", tmp_path / "programs"
    marks.mkdir()
    programs.mkdir()
    git(repo, "checkout", "-q", "main")
    write_files(repo, {".github/cockpit.toml": 'provider = "codex"\n'})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "cockpit settings")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(repo, "checkout", "-q", "feature")
    git(repo, "rebase", "-q", "main")
    blob = git(repo, "rev-parse", "main:.github/cockpit.toml")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    upstream = tmp_path / "upstream"
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(upstream))
    for key, value in {
        "core.repositoryformatversion": "1",
        "extensions.partialClone": "origin",
        "remote.origin.url": upstream.as_uri(),
        "remote.origin.promisor": "true",
        "remote.origin.uploadpack": program(programs, marks, "remote.uploadpack"),
        "core.sshCommand": program(programs, marks, "core.sshCommand"),
    }.items():
        git(repo, "config", key, value)
    (tmp_path / "hook-ran").unlink(missing_ok=True)  # the commits above ran `repo`'s hooks
    before = state(repo)
    code, out, err = await cockpit("review-local", str(repo), "--json", env=env, cwd=elsewhere)
    assert sorted(p.name for p in marks.iterdir()) == []
    assert not (tmp_path / "hook-ran").exists()
    assert code == 0, err
    assert state(repo) == before  # no object fetched into it
    assert json.loads(out)["provider"] == "claude"  # the settings' blob is not there to read


def status_paths(repo: Path) -> set[str]:
    """The paths `git status` names (read without refreshing the index)."""
    out = subprocess.run(
        ["git", "--no-optional-locks", "status", "--porcelain", "-z", "--no-renames"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout
    return {record[3:].decode(errors="surrogateescape") for record in out.split(b"\0") if record}


async def test_the_uncommitted_count_names_what_git_status_names(tmp_path):
    """Staged, unstaged, racily clean, touched but unchanged, deleted, mode and link changes,
    untracked files and folders, intent-to-add, skip-worktree, assume-unchanged and
    conflicted paths: counted as `git status` counts them, without it."""
    from bot.local import uncommitted_paths  # (new with this count)
    from bot.worktrees import Mirrors

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "dev@example.com")
    git(repo, "config", "user.name", "Dev")
    files = {
        f"{name}.txt": f"{name}\n"
        for name in ("staged", "edited", "racy", "touched", "gone", "mode", "hidden", "assumed")
    }
    files |= {"link": "link:touched.txt", "sub dir/naïve.txt": "x\n", "both.txt": "base\n"}
    write_files(repo, files)
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "other")
    write_files(repo, {"both.txt": "other\n"})
    git(repo, "commit", "-q", "-am", "other")
    git(repo, "checkout", "-q", "main")
    write_files(repo, {"both.txt": "main\n"})
    git(repo, "commit", "-q", "-am", "main")
    subprocess.run(["git", "merge", "-q", "other"], cwd=repo, capture_output=True)  # conflicts
    write_files(repo, {"staged.txt": "staged, longer\n", "new.txt": "new\n"})
    git(repo, "add", "staged.txt", "new.txt")
    write_files(repo, {"edited.txt": "edited, longer\n", "link": "link:gone.txt"})
    (repo / "gone.txt").unlink()
    (repo / "mode.txt").chmod(0o755)
    git(repo, "update-index", "--skip-worktree", "hidden.txt")
    (repo / "hidden.txt").unlink()
    git(repo, "update-index", "--assume-unchanged", "assumed.txt")
    (repo / "assumed.txt").write_text("assumed, but changed\n")
    (repo / "intent.txt").write_text("intent\n")
    git(repo, "add", "-N", "intent.txt")
    for name in ("untracked.txt", "folder/a.txt", "folder/b.txt", "debug.log", "x.tmp"):
        write_files(repo, {name: "?\n"})
    (repo / ".excludes").write_text("*.tmp\n")  # the repository's own excludes file counts
    git(repo, "config", "core.excludesFile", ".excludes")
    (repo / "empty").mkdir()
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=repo)  # stat data fresh
    index = repo / ".git" / "index"
    racy = repo / "racy.txt"
    written = racy.stat().st_mtime_ns
    racy.write_text("RACY\n")  # same size, and the same mtime as the index records …
    os.utime(racy, ns=(written, written))
    os.utime(index, ns=(written, written))  # … written in the same second as the index
    later = written + 10**9
    os.utime(repo / "touched.txt", ns=(later, later))  # touched, not changed
    before = state(repo)
    env = Mirrors(tmp_path / "work", offline=True).env()
    found = await uncommitted_paths(repo, index, env)
    assert state(repo) == before
    expected = status_paths(repo)
    assert found == expected
    assert {"staged.txt", "edited.txt", "racy.txt", "gone.txt", "mode.txt", "link"} <= found
    assert {"both.txt", "new.txt", "intent.txt", "untracked.txt", "folder/"} <= found
    assert found.isdisjoint(
        {"touched.txt", "hidden.txt", "assumed.txt", "debug.log", "x.tmp", "empty/"}
    )


@pytest.mark.parametrize("where", ["app/.gitignore", "core.excludesFile"])
async def test_a_fifo_the_untracked_listing_would_read_does_not_stall_the_review(
    repo, elsewhere, env, where
):
    """Before: `git ls-files timed out after 60s` and no review. A FIFO among the work tree's
    .gitignore files costs the uncommitted note (after UNCOMMITTED_SECONDS); one the
    repository's core.excludesFile names is not read, and the note stays."""
    (repo / "scratch.txt").write_text("untracked\n")
    fifo = repo / (where if "/" in where else "excludes")
    os.mkfifo(fifo)
    if "/" not in where:
        git(repo, "config", "core.excludesFile", "excludes")
    code, out, err = await cockpit("review-local", str(repo), env=env, cwd=elsewhere)
    assert code == 0, err
    assert "F1 · critical · app/calc.py:3" in out and "timed out" not in out + err
    if "/" in where:
        assert "uncommitted change(s)" not in out
    else:
        assert "1 uncommitted change(s) in the working tree are not reviewed" in out


async def test_passes_keep_what_two_raise_or_the_verify_pass_confirms(
    repo, elsewhere, env, anthropic_standin, openai_standin
):
    """`passes = 2` in the base's `.github/cockpit.toml`: review-local reviews twice, in two
    file orders (a model whose findings depend on the order), keeps what both passes raised,
    and has the other provider verify what one raised: kept when confirmed (the eval() and
    the bare except), left out when refuted (the test fixture's token) or uncertain (the
    hunches)."""
    from tests.test_review_groups import by_order

    git(repo, "checkout", "-q", "main")
    write_files(repo, {".github/cockpit.toml": 'min_severity = "nit"\npasses = 2\n'})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "two passes")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(repo, "checkout", "-q", "feature")
    git(repo, "rebase", "-q", "main")
    anthropic_standin.policy = by_order
    code, out, err = await cockpit("review-local", str(repo), "--json", env=env, cwd=elsewhere)
    assert code == 0, err
    draft = json.loads(out)
    assert "Reviewed in 2 independent passes" in draft["summary"]
    assert "3 findings raised by one pass only" in draft["summary"]  # left out
    assert draft["verify"] == {"provider": "codex", "error": None}
    found = {(f["path"], f["title"], f["verify_status"]) for f in draft["findings"]}
    assert found == {
        ("app/db.py", "Hard-coded credential", None),  # both passes
        ("app/db.py", "SQL query built with an f-string", None),
        ("app/calc.py", "eval() runs untrusted input", "confirmed"),  # one, confirmed
        ("app/calc.py", "Bare except hides errors", "confirmed"),
    }
