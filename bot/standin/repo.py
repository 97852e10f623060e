"""Generate small git repositories with a pull request (tests, demo, offline eval)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

_ENV = {
    "GIT_AUTHOR_NAME": "Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.test",
    "GIT_COMMITTER_NAME": "Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.test",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}

# The sample pull request `cockpit demo` reviews (and the container checks): a SQL injection,
# a secret, an eval and a bare except that the scripted reviewer finds.
SAMPLE_BASE = {
    "app/db.py": "import sqlite3\n\n\ndef find_user(conn, name):\n"
    "    return conn.execute('SELECT * FROM users WHERE name = ?', (name,))\n",
    "app/calc.py": "def parse(text):\n    return int(text)\n",
    "README.md": "# widgets\n",
}
SAMPLE_HEAD = {
    "app/db.py": 'import sqlite3\n\nPASSWORD = "hunter2-prod"\n\n\ndef find_user(conn, name):\n'
    "    return conn.execute(f\"SELECT * FROM users WHERE name = '{name}'\")\n",
    "app/calc.py": "def parse(text):\n    if text == None:\n        return None\n    try:\n"
    "        return eval(text)\n    except:\n        return None\n",
    "tests/test_db.py": 'API_TOKEN = "test-token-not-a-secret"\n\n\ndef test_find_user():\n'
    "    assert API_TOKEN\n",
}


@dataclass(frozen=True)
class GeneratedPR:
    path: Path
    clone_url: str
    number: int
    base_ref: str
    base_sha: str
    head_sha: str
    diff: str


def git(repo: Path, *args: str, data: bytes | None = None) -> str:
    env = {**os.environ, **_ENV}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, input=data, capture_output=True, check=True, timeout=120
    ).stdout.decode()


def write_files(repo: Path, files: dict[str, str | bytes | None]) -> None:
    """Write (or with None, delete) files; `link:target` strings become symlinks."""
    for name, content in files.items():
        target = repo / name
        if content is None:
            git(repo, "rm", "-q", "--", name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str) and content.startswith("link:"):
            if target.is_symlink() or target.exists():
                target.unlink()
            os.symlink(content[5:], target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


def make_pr(
    path: Path,
    *,
    base: dict[str, str | bytes | None],
    head: dict[str, str | bytes | None],
    number: int = 1,
    base_ref: str = "main",
) -> GeneratedPR:
    """A repository whose `base_ref` has `base`, and whose `refs/pull/N/head` adds `head`.

    The head commit lives only under refs/pull/N/head, like a fork's PR on GitHub.
    """
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", base_ref)
    write_files(path, base)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    base_sha = git(path, "rev-parse", "HEAD").strip()
    git(path, "checkout", "-q", "-b", "pr-work")
    write_files(path, head)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "change under review")
    head_sha = git(path, "rev-parse", "HEAD").strip()
    git(path, "update-ref", f"refs/pull/{number}/head", head_sha)
    git(path, "checkout", "-q", base_ref)
    git(path, "branch", "-q", "-D", "pr-work")
    diff = git(path, "diff", "--no-color", "-M", base_sha, head_sha)
    return GeneratedPR(path, path.resolve().as_uri(), number, base_ref, base_sha, head_sha, diff)
