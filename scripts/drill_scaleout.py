"""Scale-out drill: `cockpit serve` processes (2 web + 3 worker) on one Postgres, 1,000
deliveries (PR events and commands on 50 PRs), scripted models that answer after a fixed 1 s,
one worker SIGKILLed mid-run. Checks every delivery processed once, no review published twice
and no job stuck; prints reviews/minute with 1 and with 3 workers (same per-worker review
concurrency) and the ingress acks/s of 2 web processes against 1.

Everything runs on 127.0.0.1 (a throwaway Postgres cluster, the GitHub and model stand-ins in
this process) and every phase is bounded in time. Exit code 0 when the checks hold.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.repo import make_pr  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from tests import deliveries  # noqa: E402
from tests.conftest import WEBHOOK_SECRET  # noqa: E402
from tests.pgserver import PgCluster  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

PRS = 50
DELIVERIES = 1000
MODEL_SECONDS = 1.0
CONCURRENCY = 4  # reviews at once per worker (COCKPIT_MAX_CONCURRENT_REVIEWS)
INSTALLATION = 7
PHASE_TIMEOUT = 240.0
REPO_IDS = 700_000
BASE = {"calc.py": "def parse(text):\n    return int(text)\n", "README.md": "# w\n"}
HEAD = {"calc.py": "def parse(text):\n    return eval(text)\n"}


class SlowModel(AnthropicStandin):
    """The scripted reviewer, answering every request after a fixed delay."""

    async def _handle(self, request: web.Request) -> web.Response:
        await asyncio.sleep(MODEL_SECONDS)
        return await super()._handle(request)


class Drill:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.github = GitHubStandin()
        self.model = SlowModel(scripted_reviewer)
        self.prs: list[Any] = []
        self.procs: list[ServerProcess] = []
        self.ids = itertools.count(1)

    async def start(self) -> None:
        await self.github.start()
        model_url = await self.model.start()
        for n in range(PRS):
            pr = await asyncio.to_thread(
                make_pr, self.root / f"origin-{n}", base=BASE, head=HEAD, number=1
            )
            self.github.add_generated_pr(
                "octo", f"w{n:02d}", pr, installation_id=INSTALLATION,
                permissions={"octocat": "admin"},
            )  # fmt: skip
            self.prs.append(pr)
        self.env = {
            "GITHUB_APP_ID": self.github.app_id,
            "GITHUB_PRIVATE_KEY": self.github.private_key_pem,
            "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GITHUB_API_URL": self.github.url,
            "GITHUB_APP_SLUG": self.github.slug,
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "sk-ant-drill-0123456789",
            "COCKPIT_CLAUDE_MODEL": MODEL,
            "COCKPIT_MAX_CONCURRENT_REVIEWS": str(CONCURRENCY),
            "COCKPIT_WORKER_TIMEOUT": "4",
        }

    async def stop(self) -> None:
        self.kill_all()
        await self.github.stop()
        await self.model.stop()

    async def spawn(self, url: str, role: str, name: str) -> ServerProcess:
        proc = ServerProcess(
            {**self.env, "COCKPIT_DATABASE_URL": url},
            self.root / f"data-{name}",
            self.root / f"{name}.log",
            role=role,
        )
        await proc.start(timeout=60)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            proc.terminate()
        self.procs.clear()

    # -- deliveries ---------------------------------------------------------

    def pr_event(self, n: int, action: str) -> tuple[str, dict]:
        pr = self.prs[n]
        known = action in ("opened", "synchronize", "closed", "reopened")
        data = deliveries.payload(f"pull_request.{action if known else 'opened'}")
        data["action"] = action
        deliveries.retarget(
            data, owner="octo", name=f"w{n:02d}", clone_url=pr.clone_url,
            installation_id=INSTALLATION,
        )  # fmt: skip
        data["repository"]["id"] = REPO_IDS + n  # one repository each (PRs are keyed by its id)
        data["number"] = data["pull_request"]["number"] = 1
        data["pull_request"]["head"]["sha"] = pr.head_sha
        data["pull_request"]["base"]["ref"] = pr.base_ref
        data["pull_request"]["base"]["sha"] = pr.base_sha
        data["pull_request"]["draft"] = False
        data["pull_request"]["state"] = "open"
        # A maintainer's PRs: an outside author's get 3 automatic reviews a day, by policy.
        data["pull_request"]["user"] = {"login": "octocat", "id": 1, "type": "User"}
        data["sender"] = {"login": "octocat", "id": 1, "type": "User"}
        return "pull_request", data

    def command(self, n: int, text: str) -> tuple[str, dict]:
        pr = self.prs[n]
        data = deliveries.payload("issue_comment.created")
        deliveries.retarget(
            data, owner="octo", name=f"w{n:02d}", clone_url=pr.clone_url,
            installation_id=INSTALLATION,
        )  # fmt: skip
        data["repository"]["id"] = REPO_IDS + n  # one repository each (PRs are keyed by its id)
        deliveries.as_pr_comment(data, 1)
        data["comment"]["id"] = next(self.ids) + 100000
        data["comment"]["body"] = text
        data["comment"]["user"] = data["sender"] = {"login": "octocat", "id": 2, "type": "User"}
        return "issue_comment", data

    async def post(
        self, http: aiohttp.ClientSession, url: str, event: str, data: dict, delivery: str
    ) -> int:
        body = json.dumps(data).encode()
        headers = deliveries.headers(event, body, WEBHOOK_SECRET, delivery)
        async with http.post(f"{url}/webhooks/github", data=body, headers=headers) as response:
            return response.status


def migrated(cluster: PgCluster) -> str:
    """A new database with the schema applied as an operator does it: `cockpit migrate`."""
    url = cluster.create_database()
    subprocess.run(
        [sys.executable, "-m", "bot", "migrate"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COCKPIT_DATABASE_URL": url},
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return url


def rows(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()


async def until(check, timeout: float, what: str) -> float:
    started = time.monotonic()
    while not await asyncio.to_thread(check):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.25)
    return time.monotonic() - started


def drafts(url: str) -> int:
    return rows(url, "SELECT COUNT(*) FROM reviews WHERE state = 'draft'")[0][0]


def idle(url: str) -> bool:
    busy = rows(
        url,
        "SELECT COUNT(*) FROM procrastinate_jobs WHERE status = 'doing'"
        " OR (status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now()))",
    )
    return busy[0][0] == 0


async def review_rate(drill: Drill, cluster: PgCluster, workers: int) -> float:
    """Reviews per minute with `workers` workers: 16 PRs per worker, opened at once."""
    url = migrated(cluster)
    web_proc = await drill.spawn(url, "web", f"rate{workers}-web")
    for w in range(workers):
        await drill.spawn(url, "worker", f"rate{workers}-w{w}")
    count = min(PRS, 16 * workers)
    async with aiohttp.ClientSession() as http:
        started = time.monotonic()
        for n in range(count):
            event, data = drill.pr_event(n, "opened")
            assert await drill.post(http, web_proc.url, event, data, f"rate{workers}-{n}") == 202
        await until(lambda: drafts(url) == count, PHASE_TIMEOUT, f"{count} drafts")
        elapsed = time.monotonic() - started
    drill.kill_all()
    rate = count / elapsed * 60
    print(f"  {workers} worker(s) x {CONCURRENCY} reviews at once: {count} reviews in "
          f"{elapsed:.1f} s = {rate:.0f} reviews/minute")  # fmt: skip
    return rate


async def ack_rate(drill: Drill, cluster: PgCluster, webs: int, total: int = 3000) -> float:
    """Acks/s of `webs` web processes (no workers: ingress only), 64 connections."""
    url = migrated(cluster)
    procs = [await drill.spawn(url, "web", f"ack{webs}-{n}") for n in range(webs)]
    event, data = drill.pr_event(0, "edited")  # stored, acknowledged, never worked on
    body = json.dumps(data).encode()
    counter = itertools.count()
    statuses: list[int] = []
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def client() -> None:
            while (n := next(counter)) < total:
                proc = procs[n % webs]
                headers = deliveries.headers(event, body, WEBHOOK_SECRET, f"ack{webs}-{n}")
                async with http.post(
                    f"{proc.url}/webhooks/github", data=body, headers=headers
                ) as response:
                    statuses.append(response.status)

        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*(client() for _ in range(64))), PHASE_TIMEOUT)
        elapsed = time.monotonic() - started
    stored = rows(url, "SELECT COUNT(*) FROM deliveries")[0][0]
    drill.kill_all()
    rate = total / elapsed
    ok = statuses.count(202) == total == stored
    print(f"  {webs} web process(es): {total} deliveries in {elapsed:.1f} s = {rate:.0f} acks/s"
          f" ({statuses.count(202)} acknowledged, {stored} stored)")  # fmt: skip
    if not ok:
        raise AssertionError("an acknowledged delivery is missing")
    return rate


def mix(drill: Drill) -> list[tuple[int, str, dict, str]]:
    """1,000 deliveries on 50 PRs: each PR opens, then gets commands and events in an order
    shuffled across PRs (kept within a PR), with redeliveries of earlier ids."""
    rng = random.Random(13)
    per_pr: list[list[tuple[int, str, dict, str]]] = []
    for n in range(PRS):
        items = [(n, *drill.pr_event(n, "opened"), f"main-{n}-0")]
        choices = ["/cockpit status", "/cockpit help", "/cockpit review", "synchronize",
                   "edited", "redeliver"]  # fmt: skip
        for k in range(1, DELIVERIES // PRS):
            pick = rng.choice(choices)
            if pick == "redeliver":
                items.append(rng.choice(items[:k]))
            elif pick in ("synchronize", "edited"):
                items.append((n, *drill.pr_event(n, pick), f"main-{n}-{k}"))
            else:
                items.append((n, *drill.command(n, pick), f"main-{n}-{k}"))
        per_pr.append(items)
    order: list[tuple[int, str, dict, str]] = []
    while any(per_pr):
        line = rng.choice([p for p in per_pr if p])
        order.append(line.pop(0))
    return order


async def main_run(drill: Drill, cluster: PgCluster) -> bool:
    url = migrated(cluster)
    webs = [await drill.spawn(url, "web", f"main-web{n}") for n in range(2)]
    workers = [await drill.spawn(url, "worker", f"main-w{n}") for n in range(3)]
    plan = mix(drill)
    unique = len({d for *_, d in plan})
    async with aiohttp.ClientSession() as http:
        started = time.monotonic()
        killed_at = None
        for i, (_n, event, data, delivery) in enumerate(plan):
            status = await drill.post(http, webs[i % 2].url, event, data, delivery)
            assert status in (200, 202), status
            if killed_at is None and i >= len(plan) // 3:
                workers[0].kill()  # SIGKILL mid-run: its running jobs are lost with it
                killed_at = time.monotonic() - started
        sent = time.monotonic() - started
        print(f"  {len(plan)} deliveries ({unique} distinct ids) sent in {sent:.1f} s through "
              f"2 web processes; worker 1 SIGKILLed at {killed_at:.1f} s")  # fmt: skip
        waited = await until(lambda: idle(url), PHASE_TIMEOUT, "every job finished")
        print(f"  all jobs finished {waited:.1f} s after the last delivery")
        # Every PR's draft is approved twice at once, through both web processes.
        approvals = []
        for n in range(PRS):
            for w in range(2):
                event, data = drill.command(n, "/cockpit approve")
                approvals.append(drill.post(http, webs[w].url, event, data, f"approve-{n}-{w}"))
        assert set(await asyncio.gather(*approvals)) == {202}
        await until(lambda: idle(url), PHASE_TIMEOUT, "approvals finished")
    processed = rows(url, "SELECT status, COUNT(*), MAX(attempts) FROM deliveries GROUP BY status")
    jobs = rows(
        url,
        "SELECT args->>'kind', status::text, COUNT(*) FROM procrastinate_jobs"
        " GROUP BY 1, 2 ORDER BY 1, 2",
    )
    per_delivery = rows(
        url,
        "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM procrastinate_jobs"
        " WHERE args->>'kind' = 'delivery' GROUP BY args->'payload'->>'delivery_id') AS c",
    )[0][0]
    stuck = rows(url, "SELECT COUNT(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")
    posted = rows(url, "SELECT COUNT(*) FROM reviews WHERE state = 'posted'")[0][0]
    submits: dict[str, int] = {}
    for r in drill.github.requests:
        if r["method"] == "POST" and r["path"].endswith("/events"):
            submits[r["path"]] = submits.get(r["path"], 0) + 1
    print("  deliveries by status (count, max attempts):",
          ", ".join(f"{s} {c} ({a})" for s, c, a in processed))  # fmt: skip
    print("  jobs by kind and status:", ", ".join(f"{k} {s} {c}" for k, s, c in jobs))
    checks = {
        f"every distinct delivery stored once ({unique})": sum(c for _, c, _ in processed)
        == unique + 2 * PRS,
        "every delivery processed (none left queued)": all(s != "queued" for s, *_ in processed),
        "one job per delivery": per_delivery == 1,
        "no job stuck (todo or doing)": stuck[0][0] == 0,
        f"each PR published once ({posted} posted reviews)": posted == PRS,
        "no review published twice": bool(submits)
        and max(submits.values()) == 1
        and len(submits) == PRS,
    }
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    return all(checks.values())


async def drill(root: Path, skip_rates: bool) -> int:
    cluster = PgCluster(durable=True).start()
    the = Drill(root)
    try:
        await the.start()
        print(f"Postgres {cluster.url.rsplit('@', 1)[1]}; {PRS} PRs; model answers after "
              f"{MODEL_SECONDS:.0f} s; {CONCURRENCY} reviews at once per worker")  # fmt: skip
        ratio = ack_ratio = None
        if not skip_rates:
            print("review throughput (web + N workers):")
            one = await review_rate(the, cluster, 1)
            three = await review_rate(the, cluster, 3)
            ratio = three / one
            print(f"  3 workers / 1 worker = {ratio:.2f}x (goal >= 2.4x)")
            print("ingress (64 connections, 3,000 deliveries, fsync on):")
            single = await ack_rate(the, cluster, 1)
            double = await ack_rate(the, cluster, 2)
            ack_ratio = double / single
            print(f"  2 web / 1 web = {ack_ratio:.2f}x")
        print("main run: 2 web + 3 workers, one worker SIGKILLed:")
        ok = await main_run(the, cluster)
        if ratio is not None:
            print(
                f"throughput goal (3 workers >= 2.4x one): {'met' if ratio >= 2.4 else 'NOT met'}"
            )
        return 0 if ok else 1
    finally:
        await the.stop()
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip-rates", action="store_true", help="only the main run")
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="cockpit-drill-"))
    os.chmod(root, 0o755)
    try:
        return asyncio.run(asyncio.wait_for(drill(root, args.skip_rates), 1500))
    finally:
        if args.keep:
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
