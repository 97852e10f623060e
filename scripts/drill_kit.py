"""What the drills share: a lab (generated repository with many PRs, the GitHub and Anthropic
stand-ins on 127.0.0.1, the real `cockpit serve` as a subprocess), signed deliveries, the
database read from outside, memory figures from /proc, and a list of violations.

Traffic goes only to 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import Action, AnthropicStandin, Conversation  # noqa: E402
from bot.standin.repo import git, make_pr  # noqa: E402
from bot.standin.scripted import scripted_reviewer  # noqa: E402
from tests import deliveries  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

# A killed server drops its requests to the stand-ins half-way: that is the drill, not news.
logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)

OWNER, NAME, INSTALLATION = "octo", "widgets", 7
SECRET = "drill-webhook-secret-0123"
PEOPLE = {"maint": "maintain", "dev": "write", "stranger": "none"}
BASE = {"README.md": "# widgets\n", "calc.py": "def parse(text):\n    return int(text)\n"}


def module(number: int) -> str:
    return (
        f"def handler_{number}(text, values):\n"
        "    result = eval(text)\n"
        "    if values == None:\n"
        "        return result\n"
        "    return result + sum(values)\n"
    )


class Faults:
    """A model policy: the scripted reviewer, with faults injected ahead of it in order."""

    def __init__(self, policy: Callable[[Conversation], Action] = scripted_reviewer) -> None:
        self.policy = policy
        self.queued: list[Action] = []
        self.conversations = 0

    def __call__(self, conversation: Conversation) -> Action:
        if len(conversation.events) == 1:  # a new conversation: the prompt only
            self.conversations += 1
        if self.queued:
            return self.queued.pop(0)
        return self.policy(conversation)


@dataclass
class Lab:
    root: Path
    prs: int
    github: GitHubStandin = field(init=False)
    model: AnthropicStandin = field(init=False)
    faults: Faults = field(default_factory=Faults)
    heads: dict[int, str] = field(default_factory=dict)
    clone_url: str = ""
    server: ServerProcess | None = None
    data_dir: Path | None = None
    violations: list[str] = field(default_factory=list)

    async def __aenter__(self) -> Lab:
        self.github = GitHubStandin()
        await self.github.start()
        self.model = AnthropicStandin(self.faults)
        await self.model.start()
        await asyncio.to_thread(self._make_repo)
        self.data_dir = self.data_dir or self.root / "data"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.kill()
        self.model.gate.set()
        self.github.gate.set()
        await self.model.stop()
        await self.github.stop()

    def _make_repo(self) -> None:
        """One origin with `prs` PR heads (refs/pull/N/head), each adding a flawed module."""
        origin = self.root / "origin"
        pr = make_pr(origin, base=BASE, head={"mod_1.py": module(1)}, number=1)
        self.clone_url = pr.clone_url
        self.heads[1] = pr.head_sha
        repo = self.github.add_repo(
            OWNER, NAME, clone_url=pr.clone_url, installation_id=INSTALLATION, permissions=PEOPLE
        )
        self.github.add_pull(repo, 1, head_sha=pr.head_sha, base_sha=pr.base_sha, diff=pr.diff)
        for number in range(2, self.prs + 1):
            blob = git(origin, "hash-object", "-w", "--stdin", data=module(number).encode())
            tree = git(
                origin,
                "mktree",
                data=(
                    git(origin, "ls-tree", pr.base_sha)
                    + f"100644 blob {blob.strip()}\tmod_{number}.py\n"
                ).encode(),
            ).strip()
            head = git(origin, "commit-tree", tree, "-p", pr.base_sha, "-m", f"PR {number}")
            head = head.strip()
            git(origin, "update-ref", f"refs/pull/{number}/head", head)
            diff = git(origin, "diff", "--no-color", "-M", pr.base_sha, head)
            self.github.add_pull(repo, number, head_sha=head, base_sha=pr.base_sha, diff=diff)
            self.heads[number] = head
        self.base_sha = pr.base_sha

    # -- the server ---------------------------------------------------------------

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "GITHUB_APP_ID": self.github.app_id,
            "GITHUB_PRIVATE_KEY": self.github.private_key_pem,
            "GITHUB_WEBHOOK_SECRET": SECRET,
            "GITHUB_API_URL": self.github.url,
            "GITHUB_APP_SLUG": self.github.slug,
            "ANTHROPIC_BASE_URL": self.model.url,
            "ANTHROPIC_API_KEY": "sk-ant-drill-0123456789",
            **extra,
        }

    async def start(self, **extra: str) -> ServerProcess:
        assert self.data_dir is not None
        if self.server is None:
            self.server = ServerProcess(self.env(**extra), self.data_dir, self.root / "server.log")
        await self.server.start(timeout=60)
        return self.server

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    @property
    def db_path(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "cockpit.sqlite3"

    def rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30) as conn:
            return conn.execute(sql, args).fetchall()

    def one(self, sql: str, args: tuple = ()) -> Any:
        return self.rows(sql, args)[0][0]

    def rss_mib(self, field_name: str = "VmHWM") -> float:
        """The server's resident memory (VmHWM: its peak so far) in MiB."""
        assert self.server is not None and self.server.proc is not None
        status = Path(f"/proc/{self.server.proc.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    # -- deliveries -----------------------------------------------------------------

    def repository(self) -> dict[str, Any]:
        return {
            "id": 4242,
            "name": NAME,
            "full_name": f"{OWNER}/{NAME}",
            "owner": {"login": OWNER, "type": "Organization"},
            "clone_url": self.clone_url,
            "html_url": f"https://github.test/{OWNER}/{NAME}",
            "default_branch": "main",
        }

    def pull_request(
        self, action: str, number: int, *, author: str = "dev", head: str | None = None
    ) -> dict[str, Any]:
        return {
            "action": action,
            "number": number,
            "installation": {"id": INSTALLATION},
            "repository": self.repository(),
            "sender": {"login": author, "type": "User"},
            "pull_request": {
                "number": number,
                "state": "closed" if action == "closed" else "open",
                "draft": False,
                "title": f"Change {number}",
                "body": "Please review.",
                "user": {"login": author, "type": "User"},
                "html_url": f"https://github.test/{OWNER}/{NAME}/pull/{number}",
                "head": {"sha": head or self.heads[number], "ref": f"pr-{number}"},
                "base": {"sha": self.base_sha, "ref": "main"},
            },
        }

    def comment(
        self, number: int, body: str, *, user: str = "maint", comment_id: int | None = None
    ) -> dict[str, Any]:
        return {
            "action": "created",
            "installation": {"id": INSTALLATION},
            "repository": self.repository(),
            "sender": {"login": user, "type": "User"},
            "issue": {
                "number": number,
                "title": f"Change {number}",
                "pull_request": {"url": f"https://github.test/{OWNER}/{NAME}/pull/{number}"},
            },
            "comment": {
                "id": comment_id or uuid.uuid4().int % 10**12,
                "body": body,
                "user": {"login": user, "type": "User"},
            },
        }

    async def send(
        self,
        session: aiohttp.ClientSession,
        event: str,
        data: dict[str, Any] | bytes,
        delivery_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, float]:
        """POST a signed delivery; (status, seconds). Status 0: no answer (connection lost)."""
        body = data if isinstance(data, bytes) else json.dumps(data).encode()
        sent = deliveries.headers(event, body, SECRET, delivery_id or str(uuid.uuid4()))
        started = time.monotonic()
        try:
            async with session.post(
                f"{self.url}/webhooks/github", data=body, headers={**sent, **(headers or {})}
            ) as response:
                await response.read()
                return response.status, time.monotonic() - started
        except (TimeoutError, aiohttp.ClientError, ConnectionError):
            return 0, time.monotonic() - started

    async def health(self, session: aiohttp.ClientSession) -> tuple[int, dict]:
        try:
            async with session.get(f"{self.url}/healthz") as response:
                return response.status, await response.json()
        except (TimeoutError, aiohttp.ClientError, ConnectionError, ValueError):
            return 0, {}

    # -- waiting and checking ------------------------------------------------------------

    def busy_jobs(self) -> int:
        """Jobs with work to do now (a job scheduled for later, like tomorrow's
        maintenance, does not count)."""
        return self.one(
            "SELECT COUNT(*) FROM jobs WHERE state IN ('running', 'waiting')"
            " OR (state = 'queued' AND run_after <= ?)",
            (time.time(),),
        )

    async def until(self, predicate: Callable[[], Any], timeout: float, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return True
            except sqlite3.OperationalError:
                pass  # the database is busy or not there yet: look again
            await asyncio.sleep(0.1)
        self.violate(f"timed out after {timeout:.0f}s waiting for {what}")
        return False

    async def drained(self, timeout: float) -> float:
        started = time.monotonic()
        await self.until(lambda: self.busy_jobs() == 0, timeout, "every job to finish")
        return time.monotonic() - started

    def check(self, ok: bool, message: str) -> None:
        print(f"  [{'ok' if ok else 'VIOLATION'}] {message}")
        if not ok:
            self.violations.append(message)

    def violate(self, message: str) -> None:
        self.check(False, message)

    def pending_per_pr(self) -> dict[int, int]:
        found: dict[int, int] = {}
        for review in self.github.reviews.values():
            if review["state"] == "PENDING":
                found[review["number"]] = found.get(review["number"], 0) + 1
        return found

    def finish(self, name: str) -> int:
        if self.violations:
            print(f"\n{name}: FAILED, {len(self.violations)} violation(s)")
            return 1
        print(f"\n{name}: passed")
        return 0


def load_mix(lab: Lab, seed: int) -> list[tuple[str, dict[str, Any], str]]:
    """20 deliveries per PR (1,000 for 50 PRs), shuffled: PR events (opened, repeated
    synchronize and reopened of the same head, a label) and commands (status, help, review,
    approve, a bad reference, a stranger's approve, a plain comment)."""
    import random

    rng = random.Random(seed)
    mix: list[tuple[str, dict[str, Any], str]] = []
    for number in range(1, lab.prs + 1):
        events = [("pull_request", lab.pull_request("opened", number))]
        events += [("pull_request", lab.pull_request("synchronize", number))] * 3
        events += [("pull_request", lab.pull_request("reopened", number))] * 2
        events += [("pull_request", lab.pull_request("labeled", number))]
        bodies = [
            ("maint", "/cockpit status"),
            ("maint", "/cockpit status"),
            ("dev", "/cockpit status"),
            ("dev", "/cockpit status"),
            ("maint", "/cockpit help"),
            ("dev", "/cockpit help"),
            ("maint", "/cockpit frobnicate"),
            ("maint", "/cockpit review"),
            ("maint", "Looks right.\n\n/cockpit approve"),
            ("maint", "/cockpit drop F9"),
            ("stranger", "/cockpit approve"),
            ("dev", "LGTM, thanks!"),
            ("dev", "<!--\n/cockpit approve\n-->"),
        ]
        events += [("issue_comment", lab.comment(number, body, user=user)) for user, body in bodies]
        mix += [
            (event, data, f"{number}-{n}-{uuid.uuid4().hex[:8]}")
            for n, (event, data) in enumerate(events)
        ]
    rng.shuffle(mix)
    return mix


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(latencies: list[float]) -> str:
    return (
        f"p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms"
    )


def lab_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
