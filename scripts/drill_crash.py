"""Crash drill: the load drill's 1,000 deliveries while `cockpit serve` is SIGKILLed at
random moments (at least 5) and started again; unacknowledged deliveries are sent again
with the same id, as GitHub redelivers.

Holds when nothing acknowledged is lost, no review is published twice, no job is stuck,
and no job runs past its attempts (no poison loop). Exit 1 on a violation.

    python scripts/drill_crash.py [--prs 50] [--kills 6] [--seed 2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time

import aiohttp
from drill_kit import Lab, lab_dir, load_mix, remove

PACE = 0.012  # seconds between deliveries: 1,000 over ~12 s


async def drill(prs: int, kills: int, seed: int) -> int:
    rng = random.Random(seed)
    root = lab_dir("drill-crash-")
    try:
        async with Lab(root, prs) as lab:
            server = await lab.start(COCKPIT_MAX_CONCURRENT_REVIEWS="4")
            mix = load_mix(lab, seed)
            print(f"drill_crash: {len(mix)} deliveries on {prs} PRs, {kills} SIGKILLs")
            acknowledged: set[str] = set()
            resent = 0
            started = time.monotonic()
            moments = sorted(rng.uniform(0.2, 16.0) for _ in range(kills))
            down = asyncio.Event()

            async def deliver(session, gate, n, event, data, delivery_id) -> None:
                nonlocal resent
                await asyncio.sleep(n * PACE)  # spread over the kills, not one burst
                async with gate:
                    while True:
                        status, _ = await lab.send(session, event, data, delivery_id)
                        if status in (200, 202):
                            acknowledged.add(delivery_id)
                            return
                        resent += 1
                        await asyncio.sleep(0.2)

            async def killer() -> None:
                for moment in moments:
                    await asyncio.sleep(max(0.0, moment - (time.monotonic() - started)))
                    server.kill()
                    down.set()
                    busy = lab.busy_jobs()
                    print(
                        f"  SIGKILL at {time.monotonic() - started:5.1f}s"
                        f" ({len(acknowledged)} acknowledged, {busy} jobs with work)"
                    )
                    await asyncio.sleep(rng.uniform(0.1, 0.8))
                    await server.start(timeout=60)
                    down.clear()

            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                gate = asyncio.Semaphore(32)
                kill_task = asyncio.create_task(killer())
                sends = [deliver(session, gate, n, *item) for n, item in enumerate(mix)]
                await asyncio.wait_for(asyncio.gather(*sends), timeout=100)
                await kill_task
                sent = time.monotonic() - started
                drain = await lab.drained(timeout=100)
                status, health = await lab.health(session)
            print(
                f"  all {len(mix)} acknowledged after {sent:.1f}s ({resent} sends repeated while"
                f" the server was down); drained {drain:.1f}s later"
            )
            stored = dict(lab.rows("SELECT id, status FROM deliveries"))
            lost = [d for d in acknowledged if d not in stored]
            lab.check(not lost, f"nothing acknowledged lost ({len(lost)} missing)")
            unprocessed = [d for d in acknowledged if stored.get(d) == "queued"]
            lab.check(
                not unprocessed, f"every acknowledged delivery processed ({len(unprocessed)} not)"
            )
            outcomes: dict[str, int] = {}
            for value in stored.values():
                outcomes[value] = outcomes.get(value, 0) + 1
            print(f"  deliveries by outcome: {outcomes}")

            posted = lab.rows("SELECT id, pending_review_id FROM reviews WHERE state = 'posted'")
            submitted = [r for r in lab.github.reviews.values() if r["state"] != "PENDING"]
            events = lab.github.calls("POST", r"/reviews/\d+/events$")
            per_review = {}
            for call in events:
                review = call["path"].split("/reviews/")[1].split("/")[0]
                per_review[review] = per_review.get(review, 0) + 1
            lab.check(
                len(submitted) == len(posted)
                and {r["id"] for r in submitted} == {p for _, p in posted},
                f"no review published twice ({len(posted)} posted drafts, {len(submitted)}"
                f" published reviews on GitHub, {len(events)} submit calls)",
            )
            left = lab.rows(
                "SELECT id, kind, state, attempts, max_attempts, key, run_after - ?, error"
                " FROM jobs WHERE state IN ('running', 'waiting')"
                " OR (state = 'queued' AND run_after <= ?)",
                (time.time(), time.time()),
            )
            lab.check(not left, f"no job stuck (jobs with work left: {left})")
            stuck = lab.one(
                "SELECT COUNT(*) FROM reviews WHERE state IN ('queued', 'running', 'posting')"
            )
            lab.check(stuck == 0, f"no review left queued, running or posting ({stuck})")
            over = lab.one("SELECT COUNT(*) FROM jobs WHERE attempts > max_attempts")
            lab.check(over == 0, f"no job ran past its attempts: no poison loop ({over})")
            gave_up = lab.rows(
                "SELECT kind, COUNT(*) FROM jobs WHERE state = 'failed' AND error LIKE"
                " 'the process stopped%' GROUP BY kind"
            )
            attempts = dict(lab.rows("SELECT attempts, COUNT(*) FROM jobs GROUP BY attempts"))
            print(f"  jobs by attempts: {attempts}; failed for good after kills: {dict(gave_up)}")
            reviews = dict(lab.rows("SELECT state, COUNT(*) FROM reviews GROUP BY state"))
            print(f"  reviews by state: {reviews}; published: {len(submitted)}")
            failed_checks = sum(
                1 for c in lab.github.check_runs.values() if c.get("conclusion") == "failure"
            )
            lab.check(
                failed_checks >= reviews.get("failed", 0),
                f"every failed review shows a failed check run ({failed_checks} failure(s))",
            )
            lab.check(status == 200 and health.get("status") == "ok", f"healthy after: {health}")
            return lab.finish("drill_crash")
    finally:
        remove(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prs", type=int, default=50)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    if args.kills < 5:
        parser.error("the drill kills the server at least 5 times")
    return asyncio.run(drill(args.prs, args.kills, args.seed))


if __name__ == "__main__":
    sys.exit(main())
