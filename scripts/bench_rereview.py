"""Re-review benchmark: a 3-line push to a reviewed 50-file PR, delta re-review vs full review.

Runs the real bot (`make_app` on 127.0.0.1) against the GitHub stand-in and a zero-latency
scripted model (the Anthropic stand-in with `scripted_reviewer` on loopback), on a generated
repository whose PR changes 50 Python modules (a few with `eval(` / `== None`, so the draft
has findings). In one run:

1. `pull_request.opened` → a full review of head 1 (it clones the mirror) → draft;
2. a 3-line push to a module without findings → `synchronize` → the delta re-review of
   head 2 (`since` = head 1, the finding ledger in its request) → draft;
3. a maintainer's `/cockpit review` comment → a full review of the same head 2 → draft.

The model input of a review is measured from what the Anthropic stand-in received: the last
request of the review's reviewer conversation (the requests whose tools include
`submit_review`; the last one holds the whole conversation), counted as UTF-8 bytes of its
user texts and tool results. The system prompt is the same for every review; it is printed
separately and left out of the ratio. The target: the delta re-review's input is at most 0.3
of the full review's of the same head, with the same open findings (F number, path, title of
the `findings` rows in state 'kept'). Exits 1 when either is not met.

    python scripts/bench_rereview.py [--files 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.server import CONTEXT, make_app  # noqa: E402
from bot.standin import serve_local  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.repo import git, make_pr  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from handlers import router  # noqa: E402
from tests import deliveries  # noqa: E402
from tests.conftest import WEBHOOK_SECRET  # noqa: E402
from tests.world import INSTALLATION, NAME, OWNER, World, comment_payload  # noqa: E402

TARGET_RATIO = 0.30
TIMEOUT = 60.0
FLAGGED = {7: "    return eval(text)\n", 19: "    if text == None:\n        return 0\n"}
PUSHED = 3  # a module without findings (i % 25 not in FLAGGED)
PUSH = "\ndef size_{i}(text):\n    return len(text)\n"  # the 3 lines the push adds


def module(i: int, revision: int) -> str:
    """A small module; the head revision adds a function, a few of them with flagged code."""
    text = f'"""Module {i}."""\n\n\ndef parse_{i}(text):\n    return int(text) + {i}\n'
    if revision:
        text += f"\n\ndef load_{i}(text, rev={revision}):\n"
        text += FLAGGED.get(i % 25, f"    return parse_{i}(text) * rev\n")
    return text


@dataclass
class Measured:
    """One review: its row, what the model was sent, and its open findings."""

    label: str
    review_id: int
    head_sha: str
    requests: int  # model requests during the review (all roles)
    reviewer_requests: int  # of those, the reviewer's (tools include submit_review)
    conversations: int  # reviewer conversations started (a request with one message)
    tool_calls: int  # tools the reviewer ran before its last request (submit_review not)
    user_bytes: int
    tool_bytes: int
    system_bytes: int
    findings: list[tuple[int, str, str]]  # kept: (ordinal, path, title)

    @property
    def input_bytes(self) -> int:
        return self.user_bytes + self.tool_bytes


def size(texts: list[str]) -> int:
    return sum(len(t.encode()) for t in texts)


async def bench(root: Path, files: int) -> int:
    base = {f"pkg/mod_{i:02d}.py": module(i, 0) for i in range(files)} | {"README.md": "# w\n"}
    head = {f"pkg/mod_{i:02d}.py": module(i, 1) for i in range(files)}
    pr = await asyncio.to_thread(make_pr, root / "origin", base=base, head=head, number=1)
    github = GitHubStandin()
    await github.start()
    repo = github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    world = World(github, pr, repo)
    model = AnthropicStandin(scripted_reviewer)
    runner: web.AppRunner | None = None
    measured: list[Measured] = []
    started = time.perf_counter()
    try:
        os.environ["ANTHROPIC_BASE_URL"] = await model.start()
        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-0123456789"
        settings = github.settings(
            root / "data", WEBHOOK_SECRET, provider="claude", claude_model=MODEL
        )
        app = make_app(settings, router)
        runner, url = await serve_local(app)
        db = app[CONTEXT].db

        async def finished(count: int) -> dict | None:
            """The newest review row once there are more than `count` and its job is done."""
            rows = await db.fetchall("SELECT * FROM reviews ORDER BY id")
            if len(rows) <= count or rows[-1]["state"] not in ("draft", "failed", "posted"):
                return None
            return rows[-1] if await app[CONTEXT].jobs.pending() == 0 else None

        async def review(http: aiohttp.ClientSession, label: str, event: str, data: dict):
            count = len(await db.fetchall("SELECT id FROM reviews"))
            first = len(model.requests)
            body = json.dumps(data).encode()
            headers = deliveries.headers(event, body, WEBHOOK_SECRET, f"bench-{label}")
            start = time.perf_counter()
            async with http.post(f"{url}/webhooks/github", data=body, headers=headers) as resp:
                assert resp.status in (200, 202), await resp.text()
            while (row := await finished(count)) is None:
                if time.perf_counter() - start > TIMEOUT:
                    raise TimeoutError(f"review {label} not done within {TIMEOUT:.0f} s")
                await asyncio.sleep(0.01)
            if row["state"] != "draft":
                raise RuntimeError(f"review {label} ended {row['state']}: {row['error']}")
            window = model.requests[first:]
            mine = [b for b in window if "submit_review" in model.normalise(b).tools]
            if not mine:
                raise RuntimeError(f"review {label}: no reviewer request reached the model")
            last = model.normalise(mine[-1])
            kept = await db.fetchall(
                "SELECT ordinal, path, title FROM findings WHERE review_id = ? AND state = 'kept'"
                " ORDER BY ordinal",
                (row["id"],),
            )
            measured.append(
                Measured(
                    label,
                    row["id"],
                    row["head_sha"],
                    len(window),
                    len(mine),
                    sum(1 for b in mine if len(b["messages"]) == 1),
                    sum(1 for name, _ in last.tool_calls if name != "submit_review"),
                    size(last.user_texts),
                    size(last.tool_results),
                    len(last.system.encode()),
                    [(r["ordinal"], r["path"], r["title"]) for r in kept],
                )
            )
            return row

        async with aiohttp.ClientSession() as http:
            await review(http, "full@head1", "pull_request", world.pull_request_payload("opened"))
            path = f"pkg/mod_{PUSHED:02d}.py"
            head2 = await asyncio.to_thread(
                world.push, {path: module(PUSHED, 1) + PUSH.format(i=PUSHED)}
            )
            numstat = git(pr.path, "diff", "--numstat", pr.head_sha, head2).split()
            await review(
                http,
                "delta@head2",
                "pull_request",
                world.pull_request_payload("synchronize", head_sha=head2),
            )
            await review(
                http, "full@head2", "issue_comment", comment_payload(world, "/cockpit review")
            )
    finally:
        if runner is not None:
            await runner.cleanup()
        await github.stop()
        await model.stop()
    elapsed = time.perf_counter() - started

    first, delta, full = measured
    print(
        f"{files}-file PR, {len(pr.diff)} bytes of diff; push {pr.head_sha[:7]}..{head2[:7]}: "
        f"{numstat[2]} +{numstat[0]} -{numstat[1]} lines"
    )
    print(
        "model input = UTF-8 bytes of user texts + tool results in the reviewer's last request "
        "(system prompt not counted; shown apart)"
    )
    print(
        "requests: all model requests during the review; reviewer: those whose tools include "
        "submit_review; tool calls: tools run before submit_review\n"
    )
    print(
        f"{'review':<13} {'id':>3} {'head':<8} {'requests':>8} {'reviewer':>8} {'tool calls':>10}"
        f" {'user B':>8} {'tools B':>8} {'input B':>8} {'system B':>8}"
    )
    for m in measured:
        print(
            f"{m.label:<13} {m.review_id:>3} {m.head_sha[:7]:<8} {m.requests:>8}"
            f" {m.reviewer_requests:>8} {m.tool_calls:>10} {m.user_bytes:>8} {m.tool_bytes:>8}"
            f" {m.input_bytes:>8} {m.system_bytes:>8}"
        )
    for m in measured:
        if m.conversations != 1:
            print(f"note: {m.label} had {m.conversations} reviewer conversations; the last counted")
    ratio = delta.input_bytes / full.input_bytes if full.input_bytes else float("inf")
    ratio_ok = ratio <= TARGET_RATIO
    print(
        f"\ndelta re-review {delta.input_bytes} B / full review of the same head "
        f"{full.input_bytes} B = {ratio:.3f} (target <= {TARGET_RATIO:.2f}): "
        + ("PASS" if ratio_ok else "FAIL")
    )
    print(
        f"with the system prompt ({delta.system_bytes} B each): "
        f"{(delta.input_bytes + delta.system_bytes) / (full.input_bytes + full.system_bytes):.3f}"
    )

    def show(m: Measured) -> None:
        print(f"\nopen findings of {m.label} (review {m.review_id}): {len(m.findings)}")
        for ordinal, where, title in m.findings:
            print(f"  F{ordinal:<3} {where:<18} {title}")
        if not m.findings:
            print("  (none)")

    show(first)
    show(delta)
    show(full)
    same = delta.findings == full.findings
    print(
        "\nopen findings of the delta re-review and the full review of head 2: "
        + ("the same: PASS" if same else "DIFFERENT: FAIL")
    )
    if not same:
        only_delta = sorted(set(delta.findings) - set(full.findings))
        only_full = sorted(set(full.findings) - set(delta.findings))
        print(f"  only in the delta re-review: {only_delta or 'none'}")
        print(f"  only in the full review:     {only_full or 'none'}")
    print(f"\n(run took {elapsed:.1f} s)")
    return 0 if ratio_ok and same else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50)
    args = parser.parse_args()
    if args.files <= PUSHED:
        parser.error(f"--files must be more than {PUSHED}")
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="cockpit-bench-rereview-"))
    try:
        return asyncio.run(bench(root, args.files))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
