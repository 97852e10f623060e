"""The review pipeline's own work stays off the event loop."""

from __future__ import annotations

import asyncio
import time

from bot.diff import parse_diff
from bot.review.pipeline import pr_diff
from bot.standin.repo import make_pr
from bot.worktrees import Mirrors
from tests.conftest import wait_for

FILES, LINES = 10, 20_000  # each file under git's 1 MB big-file threshold (else "binary")


async def test_a_huge_diff_is_parsed_off_the_event_loop(tmp_path):
    big = "".join(f"line {n} {'x' * 30}\n" for n in range(LINES))
    head = {f"big{n}.txt": big for n in range(FILES)}
    pr = make_pr(tmp_path / "origin", base={"a.txt": "a\n"}, head=head, number=2)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/big", pr.clone_url, ["refs/heads/main", "refs/pull/2/head"])
    tree = await mirrors.add_worktree(
        "octo/big", name="b", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    started = time.monotonic()
    parse_diff(pr.diff)  # how long the parse holds whoever runs it
    parse_seconds = time.monotonic() - started

    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        diff = await pr_diff(tree)
        seen = len(gaps)
        await wait_for(lambda: len(gaps) > seen)  # the tick that measures the last stretch
    finally:
        ticker.cancel()
    assert sum(f.added for f in diff.files.values()) == FILES * LINES
    assert max(gaps) < parse_seconds / 2, (max(gaps), parse_seconds)
