"""The bare path a user takes, against local stand-ins: `cockpit serve` started from an empty
folder with only the required settings (every default as shipped: the data goes to ./data),
a signed pull_request delivery → a draft, `/cockpit codex-review` → the critique,
`/cockpit send-back` with a revision that adds a finding beside one it keeps → the revised
draft, `/cockpit approve` (and its redelivery) → published once, then SIGTERM → a clean exit.

    python scripts/smoke_userpath.py [--cockpit PATH/TO/cockpit]

`--cockpit` names the installation to serve (`.ci/run` passes the wheel's venv); by default
this checkout's `python -m bot`. The stand-ins (GitHub, Claude, Codex) run in this process on
127.0.0.1. One PASS/FAIL line per check; exit 0 when every check passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from drill_kit import NAME, OWNER, SECRET, Lab, lab_dir, remove

from bot.standin.models import Action, Conversation, OpenAIStandin, call
from bot.standin.openapi import OpenAPIValidator
from bot.standin.scripted import scan_diff, scripted_reviewer
from tests import deliveries
from tests.serverproc import ServerProcess

NUMBER = 1
WAIT = 90.0  # seconds any one step may take on a loaded machine
ADDED_TITLE = "Result of eval() is returned unchecked"


def adds_a_finding_on_revision(conversation: Conversation) -> Action:
    """The scripted reviewer, whose revision keeps what the critique confirmed and adds a
    finding on the same file, two lines below a kept one: the most common revision."""
    action = scripted_reviewer(conversation)
    if not conversation.last_user_text.startswith("[Review feedback from"):
        return action
    name, review = action.tools[0]
    kept = review["findings"]
    first = scan_diff(conversation.result_of("git_diff") or "")[0]
    added = {
        **first,
        "line": first["line"] + 2,
        "severity": "major",
        "title": ADDED_TITLE,
        "body": "Whatever `eval` produced is returned as the result without a type check.",
    }
    return call(name, **{**review, "findings": [*kept, added]})


class Smoke:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def check(self, name: str, ok: bool, why: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'} {name}" + ("" if ok else f": {why}"), flush=True)
        if not ok:
            self.failed.append(name)
        return ok


async def settle(lab: Lab, done: Callable[[], bool]) -> bool:
    """Wait until `done()` and no job has work left; False after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            if done() and lab.busy_jobs() == 0:
                return True
        except sqlite3.Error:
            pass  # the database is not there yet, or busy: look again
        await asyncio.sleep(0.1)
    return False


def status_body(lab: Lab) -> str:
    comments = lab.github.status_comments(f"{OWNER}/{NAME}", NUMBER)
    return comments[0]["body"] if comments else ""


def latest_reply(lab: Lab) -> str:
    replies = [
        c["body"] for c in lab.github.issue_comments.values() if "pr-cockpit:" not in c["body"]
    ]
    return replies[-1] if replies else "(no reply)"


def first_line_with(text: str, *words: str) -> str:
    for line in text.splitlines():
        if any(word in line for word in words):
            return line.strip()[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else "(empty)"


def logged_error(lab: Lab) -> str:
    """The last exception the server logged (its last line), to say why a step failed."""
    found = ""
    for line in (lab.root / "server.log").read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("exc"):
            found = record["exc"].strip().splitlines()[-1]
    return found or "(no exception in the server log)"


def pending(lab: Lab) -> list[dict[str, Any]]:
    return [r for r in lab.github.reviews.values() if r["state"] == "PENDING"]


def submits(lab: Lab) -> int:
    return len(lab.github.calls("POST", r"/pulls/\d+/reviews/\d+/events$"))


async def walk(lab: Lab, smoke: Smoke, cockpit: list[str]) -> None:
    folder = lab.root / "where-the-user-is"
    folder.mkdir()
    key = folder / "app.private-key.pem"
    key.write_text(lab.github.private_key_pem)
    codex = OpenAIStandin(scripted_reviewer)
    await codex.start()
    env = {  # the required settings only; the key as a path relative to the folder
        "GITHUB_APP_ID": lab.github.app_id,
        "GITHUB_PRIVATE_KEY_PATH": key.name,
        "GITHUB_WEBHOOK_SECRET": SECRET,
        "GITHUB_API_URL": lab.github.url,
        "ANTHROPIC_BASE_URL": lab.model.url,
        "ANTHROPIC_API_KEY": "sk-ant-smoke-0123456789",
        "OPENAI_BASE_URL": f"{codex.url}/v1",
        "OPENAI_API_KEY": "sk-smoke-0123456789",
    }
    lab.data_dir = folder / "data"  # where the default puts it
    server = ServerProcess(
        env, None, lab.root / "server.log", cwd=folder, command=cockpit, flags=True
    )
    lab.server = server
    try:
        started = time.monotonic()
        try:
            await server.start(timeout=WAIT)
        except (RuntimeError, TimeoutError) as exc:
            smoke.check("cockpit serve starts from an empty folder", False, str(exc)[-500:])
            return
        smoke.check(
            "cockpit serve starts from an empty folder with only the required settings",
            not any(k.startswith("COCKPIT_") for k in server.env),
            f"set: {sorted(k for k in server.env if k.startswith('COCKPIT_'))}",
        )
        async with aiohttp.ClientSession() as http:
            await steps(lab, smoke, http, folder)
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(asyncio.to_thread(server.proc.wait), WAIT)
            smoke.check("SIGTERM: a clean exit", code == 0, f"exit code {code}")
        except TimeoutError:
            smoke.check("SIGTERM: a clean exit", False, f"still running after {WAIT:.0f}s")
        print(f"(the walk took {time.monotonic() - started:.1f}s)")
    finally:
        server.kill()
        await codex.stop()
        log = (lab.root / "server.log").read_text(errors="replace")
        if smoke.failed:
            print("--- server log (last lines) ---\n" + "\n".join(log.splitlines()[-30:]))


async def steps(lab: Lab, smoke: Smoke, http: aiohttp.ClientSession, folder: Path) -> None:
    status, _ = await lab.send(http, "pull_request", lab.pull_request("opened", NUMBER))
    await settle(lab, lambda: bool(pending(lab)) or "❌" in status_body(lab))
    body = status_body(lab)
    [head] = [lab.heads[NUMBER]]
    draft = pending(lab)
    smoke.check(
        "a signed pull_request delivery makes a draft (pending review)",
        status == 202 and len(draft) == 1 and draft[0]["commit_id"] == head,
        f"HTTP {status}; status comment: {first_line_with(body, '❌', 'failed')}",
    )
    smoke.check(
        "the status comment shows the draft's findings",
        "| F1 |" in body and "❌" not in body,
        first_line_with(body, "❌", "failed"),
    )
    runs = [r for r in lab.github.check_runs.values() if r.get("head_sha") == head]
    smoke.check(
        "the check run is completed with the findings as annotations",
        len(runs) == 1
        and runs[0].get("status") == "completed"
        and len(runs[0]["annotations"]) >= 1,
        f"check runs: {[(r.get('status'), len(r['annotations'])) for r in runs]}",
    )
    mirror = folder / "data" / "mirrors" / OWNER / f"{NAME}.git" / "HEAD"
    smoke.check("the data went to ./data of the folder", mirror.is_file(), f"no {mirror}")

    await lab.send(http, "issue_comment", lab.comment(NUMBER, "/cockpit codex-review"))
    critiques = lambda: [  # noqa: E731
        c for c in lab.github.issue_comments.values() if "pr-cockpit:session" in c["body"]
    ]
    await settle(lab, lambda: bool(critiques()))
    smoke.check(
        "/cockpit codex-review posts Codex's critique",
        bool(critiques()) and "refute" in critiques()[-1]["body"],
        first_line_with(latest_reply(lab), "error", "could not", "❌"),
    )

    lab.faults.policy = adds_a_finding_on_revision
    await lab.send(http, "issue_comment", lab.comment(NUMBER, "/cockpit send-back"))
    await settle(lab, lambda: ADDED_TITLE in status_body(lab) or "error" in latest_reply(lab))
    body = status_body(lab)
    revised = pending(lab)
    comments = [c["body"] for r in revised for c in r["comments"]]
    smoke.check(
        "/cockpit send-back with a revision that adds a finding revises the draft",
        ADDED_TITLE in body and len(revised) == 1 and any(ADDED_TITLE in c for c in comments),
        f"reply: {first_line_with(latest_reply(lab), 'error', 'failed', '❌')}; "
        f"server log: {logged_error(lab)}",
    )

    approve = lab.comment(NUMBER, "/cockpit approve")
    delivery = str(uuid.uuid4())
    await lab.send(http, "issue_comment", approve, delivery_id=delivery)
    await settle(lab, lambda: submits(lab) >= 1)
    again, _ = await lab.send(http, "issue_comment", approve, delivery_id=delivery)
    await settle(lab, lambda: True)
    published = [r for r in lab.github.reviews.values() if r["state"] != "PENDING"]
    smoke.check(
        "/cockpit approve publishes the draft once (its redelivery too)",
        submits(lab) == 1 and len(published) == 1 and again == 200,
        f"{submits(lab)} submit event(s), redelivery HTTP {again}; "
        f"reply: {first_line_with(latest_reply(lab), 'error', 'failed', '❌')}",
    )
    violations = lab.github.violations
    smoke.check(
        "every GitHub request fits GitHub's OpenAPI description",
        not violations,
        "; ".join(violations[:3]),
    )


async def main(cockpit: list[str]) -> int:
    root = lab_dir("cockpit-smoke-")
    smoke = Smoke()
    try:
        async with Lab(root, prs=1) as lab:
            lab.github.validator = OpenAPIValidator.from_file(deliveries.OPENAPI)
            await walk(lab, smoke, cockpit)
    finally:
        remove(root)
    print(
        "smoke: every check passed"
        if not smoke.failed
        else f"smoke: {len(smoke.failed)} check(s) FAILED: {json.dumps(smoke.failed)}"
    )
    return 1 if smoke.failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cockpit", help="the cockpit executable to serve (default: this checkout)"
    )
    options = parser.parse_args()
    command = [options.cockpit] if options.cockpit else [sys.executable, "-m", "bot"]
    raise SystemExit(asyncio.run(main(command)))
