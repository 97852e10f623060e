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
