"""Big-PR benchmark: delivery → draft for a PR of 30,000 files, each in a folder of its own.

Runs the real bot (`make_app` on 127.0.0.1) against the GitHub stand-in and a zero-latency
scripted model (the Anthropic stand-in with `scripted_reviewer` on loopback), on a repository
built by `tests/bigpr.py` (one `git fast-import`): the PR changes `calc.py` (so the draft has
findings), adds a lock file (left out as noise, so the reviewer's diff leaves a file out) and
N modules under `services/`, each in a folder of its own. Each run starts from an empty data
directory (the mirror is cloned again) and measures from just before the `pull_request.opened`
POST until the review is `draft` with no job left (delivery → draft). Prints the figure per
run, what the draft says about the files it did not review, and how long building the
repository took. No target: this is a size the bot must survive, not a latency it promises.

    python scripts/bench_big_pr.py [--files 30000] [--runs 1]
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
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.server import CONTEXT, make_app  # noqa: E402
from bot.standin import serve_local  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from handlers import router  # noqa: E402
from tests import deliveries  # noqa: E402
from tests.bigpr import import_pr, service_files  # noqa: E402
from tests.conftest import WEBHOOK_SECRET  # noqa: E402
from tests.world import BASE, HEAD, INSTALLATION, NAME, OWNER, World  # noqa: E402

TIMEOUT = 900.0  # seconds one review may take before the run is called failed


async def one_review(root: Path, world: World, github: GitHubStandin) -> tuple[float, dict]:
    """One review from an empty data directory: seconds from delivery to draft, and the row."""
    settings = github.settings(root / "data", WEBHOOK_SECRET, provider="claude", claude_model=MODEL)
    app = make_app(settings, router)
    runner: web.AppRunner | None = None
    try:
        runner, url = await serve_local(app)
        ctx = app[CONTEXT]

        async def ended() -> dict | None:
            row = await ctx.db.fetchone("SELECT * FROM reviews ORDER BY id DESC LIMIT 1")
            if row is None or row["state"] not in ("draft", "failed"):
                return None
            return dict(row) if await ctx.jobs.pending() == 0 else None

        body = json.dumps(world.pull_request_payload("opened")).encode()
        headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET)
        start = time.perf_counter()
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{url}/webhooks/github", data=body, headers=headers) as resp,
        ):
            assert resp.status in (200, 202), await resp.text()
        while (row := await ended()) is None:
            if time.perf_counter() - start > TIMEOUT:
                raise TimeoutError(f"no draft within {TIMEOUT:.0f} s")
            await asyncio.sleep(0.05)
        return time.perf_counter() - start, row
    finally:
        if runner is not None:
            await runner.cleanup()


async def bench(root: Path, files: int, runs: int) -> int:
    head = {**HEAD, **service_files(files), "package-lock.json": '{"lockfileVersion": 3}\n'}
    start = time.perf_counter()
    pr = await asyncio.to_thread(import_pr, root / "origin", base=BASE, head=head)
    built = time.perf_counter() - start
    github = GitHubStandin()
    await github.start()
    repo = github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    world = World(github, pr, repo)
    model = AnthropicStandin(scripted_reviewer)
    times = []
    try:
        os.environ["ANTHROPIC_BASE_URL"] = await model.start()
        os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-0123456789"
        print(
            f"{len(head)}-file PR ({files} in folders of their own), {len(pr.diff):,} bytes of "
            f"diff; repository built in {built:.1f} s"
        )
        for n in range(runs):
            seconds, row = await one_review(root / f"run-{n}", world, github)
            if row["state"] != "draft":
                print(f"run {n + 1}: review {row['state']}: {row['error']}")
                return 1
            skipped = json.loads(row["not_reviewed"] or "[]")
            print(
                f"run {n + 1}: delivery → draft {seconds:.1f} s (verdict {row['verdict']}, "
                f"{len(skipped)} file(s) not reviewed)"
            )
            times.append(seconds)
    finally:
        await github.stop()
        await model.stop()
    if runs > 1:
        print(f"median delivery → draft: {statistics.median(times):.1f} s over {runs} runs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="cockpit-bench-big-pr-"))
    try:
        return asyncio.run(bench(root, args.files, args.runs))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
