"""Load drill: 1,000 signed deliveries in one burst (PR events and commands on 50 PRs)
against the real `cockpit serve` and the GitHub and model stand-ins on 127.0.0.1.

Holds when every delivery is acknowledged in under 10 s, every one is processed exactly
once, no PR ever has more than one pending review, and no job is left queued or running.
Prints acks/s, ack latency p50/p99 and the time to drain. Exit 1 on a violation.

    python scripts/drill_load.py [--prs 50] [--connections 64] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp
from drill_kit import Lab, lab_dir, load_mix, remove, summary

ACK_LIMIT = 10.0


async def drill(prs: int, connections: int, seed: int) -> int:
    root = lab_dir("drill-load-")
    try:
        async with Lab(root, prs) as lab:
            await lab.start(COCKPIT_MAX_CONCURRENT_REVIEWS="4")
            mix = load_mix(lab, seed)
            print(f"drill_load: {len(mix)} deliveries on {prs} PRs, {connections} connections")
            pending_peak: dict[int, int] = {}

            async def watch_pending() -> None:
                while True:
                    for number, count in lab.pending_per_pr().items():
                        pending_peak[number] = max(pending_peak.get(number, 0), count)
                    await asyncio.sleep(0.05)

            watcher = asyncio.create_task(watch_pending())
            connector = aiohttp.TCPConnector(limit=connections)
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                started = time.monotonic()
                results = await asyncio.gather(
                    *[lab.send(session, event, data, delivery) for event, data, delivery in mix]
                )
                burst = time.monotonic() - started
                drain = await lab.drained(timeout=110)
                total = time.monotonic() - started
                status, health = await lab.health(session)
            watcher.cancel()
            for number, count in lab.pending_per_pr().items():
                pending_peak[number] = max(pending_peak.get(number, 0), count)

            statuses = [s for s, _ in results]
            latencies = [t for _, t in results]
            print(f"  burst: {len(mix)} deliveries in {burst:.2f}s = {len(mix) / burst:.0f} acks/s")
            print(f"  ack latency: {summary(latencies)}")
            print(f"  drained {drain:.1f}s after the burst ({total:.1f}s from the first delivery)")
            other = len(statuses) - statuses.count(202) - statuses.count(200)
            lab.check(
                other == 0,
                f"every delivery acknowledged ({statuses.count(202)} x 202, "
                f"{statuses.count(200)} x 200, {other} other)",
            )
            lab.check(max(latencies) < ACK_LIMIT, f"every ack in < {ACK_LIMIT:.0f}s")
            stored = lab.rows("SELECT status, COUNT(*) FROM deliveries GROUP BY status")
            print(f"  deliveries by outcome: {dict(stored)}")
            lab.check(
                sum(n for _, n in stored) == len(mix)
                and all(s in ("done", "ignored") for s, _ in stored),
                "every delivery stored once and processed (done or ignored)",
            )
            twice = lab.one("SELECT COUNT(*) FROM jobs WHERE kind = 'delivery' AND attempts != 1")
            lab.check(twice == 0, f"every delivery's job ran exactly once ({twice} did not)")
            worst = max(pending_peak.values(), default=0)
            lab.check(worst <= 1, f"at most one pending review per PR (peak seen: {worst})")
            busy = lab.busy_jobs()
            lab.check(busy == 0, f"no job left queued or running ({busy})")
            reviews = dict(lab.rows("SELECT state, COUNT(*) FROM reviews GROUP BY state"))
            runs = lab.one("SELECT COUNT(*) FROM runs")
            published = sum(1 for r in lab.github.reviews.values() if r["state"] != "PENDING")
            print(f"  reviews by state: {reviews}; model runs: {runs}; published: {published}")
            print(
                f"  GitHub API calls: {len(lab.github.requests)}; server peak RSS "
                f"{lab.rss_mib():.0f} MiB"
            )
            lab.check(status == 200 and health.get("status") == "ok", f"healthy after: {health}")
            return lab.finish("drill_load")
    finally:
        remove(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prs", type=int, default=50)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    return asyncio.run(drill(args.prs, args.connections, args.seed))


if __name__ == "__main__":
    sys.exit(main())
