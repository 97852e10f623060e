"""Review overhead benchmark: delivery → pending review for a 50-file PR on a warm mirror.

Runs the real bot (`make_app` on 127.0.0.1) against the GitHub stand-in and a zero-latency
scripted model (the Anthropic stand-in with `scripted_reviewer` on loopback), on a generated
repository whose PR changes 50 Python modules (a few with `eval(` / `== None`, so the draft
has inline findings). One untimed `opened` review clones the mirror; then each timed run
pushes a new PR head and posts a signed `pull_request.synchronize` delivery, and measures
from just before the POST until the stand-in receives `POST .../pulls/1/reviews` for that
head (delivery → pending review), and until the review is `draft` with no queued or running
job (delivery → job done). Prints p50/p90, the GitHub API calls each review made, and for
one review the ordered calls as method + path template, so they can be quoted.

    python scripts/bench_review_overhead.py [--runs 12] [--files 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.server import CONTEXT, make_app  # noqa: E402
from bot.standin import serve_local  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.repo import make_pr  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from handlers import router  # noqa: E402
from tests import deliveries  # noqa: E402
from tests.conftest import WEBHOOK_SECRET  # noqa: E402
from tests.world import INSTALLATION, NAME, OWNER, World  # noqa: E402

TARGET_P50 = 1.5
FLAGGED = {7: "    return eval(text)\n", 19: "    if text == None:\n        return 0\n"}
NAMES = {
    "pulls": "pull_number",
    "issues": "issue_number",
    "reviews": "review_id",
    "comments": "comment_id",
    "check-runs": "check_run_id",
    "installations": "installation_id",
    "collaborators": "username",
}


def module(i: int, revision: int) -> str:
    """A small module; the head revision adds a function, a few of them with flagged code."""
    text = f'"""Module {i}."""\n\n\ndef parse_{i}(text):\n    return int(text) + {i}\n'
    if revision:
        text += f"\n\ndef load_{i}(text, rev={revision}):\n"
        text += FLAGGED.get(i % 25, f"    return parse_{i}(text) * rev\n")
    return text


def template(path: str) -> str:
    """`/repos/octo/widgets/pulls/1/reviews/9` → `/repos/{owner}/{repo}/pulls/{pull_number}/…`."""
    parts = path.split("/")
    if parts[1:2] == ["repos"] and len(parts) > 3:
        parts[2:4] = ["{owner}", "{repo}"]
    for k in range(2, len(parts)):
        prev = parts[k - 1]
        if prev == "contents":
            parts[k:] = ["{path}"]
            break
        if prev == "collaborators" or (prev in NAMES and parts[k].isdigit()):
            parts[k] = "{" + NAMES[prev] + "}"
    return "/".join(parts)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


async def bench(root: Path, runs: int, files: int) -> int:
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
    try:
        os.environ["ANTHROPIC_BASE_URL"] = await model.start()
        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-0123456789"
        settings = github.settings(
            root / "data", WEBHOOK_SECRET, provider="claude", claude_model=MODEL
        )
        app = make_app(settings, router)
        runner, url = await serve_local(app)
        db = app[CONTEXT].db

        async def done(sha: str) -> bool:
            row = await db.fetchone(
                "SELECT state FROM reviews WHERE head_sha = ? ORDER BY id DESC LIMIT 1", (sha,)
            )
            if row is None or row["state"] not in ("draft", "failed"):
                return False
            return await app[CONTEXT].jobs.pending() == 0

        def pending(sha: str, since: int) -> bool:
            return any(
                r["method"] == "POST"
                and r["path"].endswith("/pulls/1/reviews")
                and (r["body"] or {}).get("commit_id") == sha
                for r in github.requests[since:]
            )

        async def review(http: aiohttp.ClientSession, action: str, sha: str) -> tuple:
            body = json.dumps(world.pull_request_payload(action, head_sha=sha)).encode()
            headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET)
            since = len(github.requests)
            start = time.perf_counter()
            async with http.post(f"{url}/webhooks/github", data=body, headers=headers) as resp:
                assert resp.status in (200, 202), await resp.text()
            while not pending(sha, since):
                if time.perf_counter() - start > 60:
                    raise TimeoutError(f"no pending review for {sha[:7]} within 60 s")
                await asyncio.sleep(0.005)
            to_pending = time.perf_counter() - start
            while not await done(sha):
                if time.perf_counter() - start > 60:
                    raise TimeoutError(f"review job for {sha[:7]} not done within 60 s")
                await asyncio.sleep(0.005)
            state = await db.fetchone("SELECT state FROM reviews ORDER BY id DESC LIMIT 1")
            assert state["state"] == "draft", f"review ended {state['state']}"
            return to_pending, time.perf_counter() - start, github.requests[since:]

        async with aiohttp.ClientSession() as http:
            warm = await review(http, "opened", pr.head_sha)
            [draft] = [r for r in github.reviews.values() if r["state"] == "PENDING"]
            print(
                f"{files}-file PR, {len(pr.diff)} bytes of diff, draft with "
                f"{len(draft['comments'])} inline findings; warm-up (clone) review "
                f"{warm[1]:.2f} s, {len(warm[2])} GitHub calls"
            )
            results = []
            for i in range(runs):
                sha = await asyncio.to_thread(
                    world.push, {"pkg/mod_00.py": module(0, 1) + f"\n# push {i}\n"}
                )
                results.append(await review(http, "synchronize", sha))
    finally:
        if runner is not None:
            await runner.cleanup()
        await github.stop()
        await model.stop()

    pend = [r[0] for r in results]
    full = [r[1] for r in results]
    counts = [len(r[2]) for r in results]
    print(f"runs: {runs}  pending reviews posted: {len(github.reviews)}")
    print("delivery → pending review (s):", " ".join(f"{t:.3f}" for t in pend))
    print(f"  p50 {statistics.median(pend):.3f} s   p90 {percentile(pend, 0.9):.3f} s")
    print(
        f"delivery → job done: p50 {statistics.median(full):.3f} s   "
        f"p90 {percentile(full, 0.9):.3f} s"
    )
    print("GitHub API calls per review:", " ".join(map(str, counts)))

    def kinds(requests: list[dict]) -> list[str]:
        return [f"{r['method']} {template(r['path'])}" for r in requests]

    shown = counts.index(max(counts))
    calls = kinds(results[shown][2])
    print(f"\ncalls made by one review (run {shown + 1}, {len(calls)} calls), in order:")
    for n, call in enumerate(calls, 1):
        print(f"  {n:2d}. {call}")
    if len(set(counts)) > 1:
        fewest = kinds(results[counts.index(min(counts))][2])
        extra = Counter(calls) - Counter(fewest)
        print(f"runs with {min(counts)} calls lack: " + ", ".join(sorted(extra.elements())))
    print("\nby kind:")
    for call, n in sorted(Counter(calls).items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:2d}x {call}")
    ok = statistics.median(pend) <= TARGET_P50
    print(f"\ntargets (p50 <= {TARGET_P50} s):", "met" if ok else "NOT met")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--files", type=int, default=50)
    args = parser.parse_args()
    if args.runs < 10:
        parser.error("--runs must be at least 10")
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="cockpit-bench-review-"))
    try:
        return asyncio.run(bench(root, args.runs, args.files))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
