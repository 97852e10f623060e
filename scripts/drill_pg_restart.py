"""Postgres restart drill: web + 2 workers (`cockpit serve` processes) on one Postgres under a
steady trickle of deliveries, with a slow model so reviews are always in flight. Postgres is
restarted with `-m immediate` twice and stopped once for 30 s; one worker is SIGSTOPped past
the worker timeout and resumed. No product process is restarted by the drill.

Checks: every acknowledged delivery processed, once; each PR's review published (a pending
review) once, none twice, none lost or cancelled; web ready again within 10 s of Postgres being
back, and workers processing again within 10 s. Prints the figures; exit code 0 when every
check holds. Everything runs on 127.0.0.1 (a throwaway cluster from Debian's `postgresql`,
the GitHub and model stand-ins in this process).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from drill_kit import Lab  # noqa: E402

from bot.standin.models import AnthropicStandin  # noqa: E402
from tests.pgserver import PgCluster  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

PRS = 36  # one opened PR per tick of the trickle (1.2 s): reviews keep starting throughout
TICK = 1.2
MODEL_SECONDS = 1.5  # every model request: a review waits on the model most of its time
WORKER_TIMEOUT = 4
PAUSE_SECONDS = 12  # SIGSTOP, past the worker timeout
STOPPED_SECONDS = 30
BOUND = 10.0  # seconds to ready / to processing again after Postgres is back
PROBE = 0  # the PR whose `/cockpit status` commands probe that work is processed again


class SlowModel(AnthropicStandin):
    """The scripted reviewer, answering every request after MODEL_SECONDS."""

    async def _handle(self, request: web.Request) -> web.Response:
        await asyncio.sleep(MODEL_SECONDS)
        return await super()._handle(request)


def rows(url: str, sql: str, args: tuple = ()) -> list[tuple]:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute(sql, args).fetchall()
    except psycopg.OperationalError:
        return []


class Drill:
    def __init__(self, root: Path, lab: Lab, cluster: PgCluster, url: str) -> None:
        self.root = root
        self.lab = lab
        self.cluster = cluster
        self.url = url
        self.web: ServerProcess | None = None
        self.workers: list[ServerProcess] = []
        self.acked: dict[str, str] = {}  # delivery id -> event
        self.refused: list[str] = []
        self.opened: list[int] = []
        self.figures: list[str] = []
        self.violations: list[str] = []
        self.trickling = True
        self.all_opened = asyncio.Event()

    async def spawn(self, role: str, name: str) -> ServerProcess:
        env = self.lab.env(
            COCKPIT_DATABASE_URL=self.url,
            COCKPIT_WORKER_TIMEOUT=str(WORKER_TIMEOUT),
            COCKPIT_MAX_CONCURRENT_REVIEWS="3",
        )
        proc = ServerProcess(env, self.root / f"data-{name}", self.root / f"{name}.log", role=role)
        await proc.start(timeout=60)
        return proc

    def check(self, ok: bool, message: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {message}", flush=True)
        if not ok:
            self.violations.append(message)

    # -- traffic ------------------------------------------------------------------------

    async def send(self, http: aiohttp.ClientSession, event: str, data: dict) -> str | None:
        delivery = str(uuid.uuid4())
        assert self.web is not None
        self.lab.server = self.web
        status, _ = await self.lab.send(http, event, data, delivery)
        if status in (200, 202):
            self.acked[delivery] = event
            return delivery
        self.refused.append(delivery)  # GitHub may redeliver it: not the drill's concern
        return None

    async def trickle(self, http: aiohttp.ClientSession) -> None:
        """A PR opened per tick (until PRS), and a `/cockpit status` on an open PR."""
        tick = 0
        while self.trickling:
            number = len(self.opened) + 1
            opened = self.lab.pull_request("opened", number)
            if number <= PRS and await self.send(http, "pull_request", opened):
                self.opened.append(number)
                if number == PRS:
                    self.all_opened.set()
            if self.opened:
                target = self.opened[tick % len(self.opened)]
                await self.send(http, "issue_comment", self.lab.comment(target, "/cockpit status"))
            tick += 1
            await asyncio.sleep(TICK)

    # -- outages -------------------------------------------------------------------------

    async def back(self, http: aiohttp.ClientSession, what: str, back_at: float) -> None:
        """After Postgres is back: time until web is ready, and until a new command is
        processed (through web and a worker)."""
        assert self.web is not None
        ready_in = None
        deadline = back_at + 60
        while time.monotonic() < deadline:
            try:
                async with http.get(
                    f"{self.web.url}/healthz/ready", timeout=aiohttp.ClientTimeout(total=3)
                ) as response:
                    if response.status == 200:
                        ready_in = time.monotonic() - back_at
                        break
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
        processed_in = None
        while time.monotonic() < deadline and processed_in is None:
            probe = await self.send(http, "issue_comment", self.lab.comment(1, "/cockpit status"))
            while probe and time.monotonic() < deadline:
                state = rows(self.url, "SELECT status FROM deliveries WHERE id = %s", (probe,))
                if state and state[0][0] != "queued":
                    processed_in = time.monotonic() - back_at
                    break
                await asyncio.sleep(0.1)
            if probe is None:
                await asyncio.sleep(0.2)
        shown = [f"{s:.1f} s" if s is not None else "never" for s in (ready_in, processed_in)]
        self.figures.append(f"{what}: web ready {shown[0]}, processing again {shown[1]}")
        print(f"  {self.figures[-1]} after Postgres was back", flush=True)
        self.check(ready_in is not None and ready_in <= BOUND, f"{what}: web ready within 10 s")
        self.check(
            processed_in is not None and processed_in <= BOUND,
            f"{what}: workers processing again within 10 s",
        )

    async def restart(self, http: aiohttp.ClientSession, what: str, down_for: float) -> None:
        print(f"{what}:", flush=True)
        await asyncio.to_thread(self.cluster.stop_server, "immediate")
        if down_for:
            await asyncio.sleep(down_for)
        await asyncio.to_thread(self.cluster.start_server)
        await self.back(http, what, time.monotonic())

    async def pause_worker(self, http: aiohttp.ClientSession) -> None:
        print(f"worker 1 SIGSTOPped for {PAUSE_SECONDS} s (worker timeout {WORKER_TIMEOUT} s):")
        worker = self.workers[0]
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(PAUSE_SECONDS)
        worker.proc.send_signal(signal.SIGCONT)
        print("  resumed", flush=True)

    # -- the run ----------------------------------------------------------------------------

    async def run(self) -> int:
        self.web = await self.spawn("web", "web")
        self.workers = [await self.spawn("worker", f"worker{n}") for n in (1, 2)]
        print(f"web + 2 workers on Postgres; {PRS} PRs opened one per {TICK} s with commands;"
              f" model answers after {MODEL_SECONDS} s", flush=True)  # fmt: skip
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http:
            traffic = asyncio.create_task(self.trickle(http))
            await asyncio.sleep(6)
            await self.restart(http, "restart 1 (-m immediate)", 0)
            await asyncio.sleep(6)
            await self.restart(http, "restart 2 (-m immediate)", 0)
            await asyncio.sleep(6)
            await self.restart(http, f"stopped for {STOPPED_SECONDS} s", STOPPED_SECONDS)
            await asyncio.sleep(4)
            await self.pause_worker(http)
            await self.all_opened.wait()
            self.trickling = False
            await traffic
        started = time.monotonic()
        drained = await self.drained(240)
        print(f"traffic stopped; all work done {time.monotonic() - started:.1f} s later"
              if drained else "traffic stopped; work NOT done within 240 s")  # fmt: skip
        return self.verdict(drained)

    async def drained(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            busy = rows(
                self.url,
                "SELECT COUNT(*) FROM procrastinate_jobs WHERE status = 'doing'"
                " OR (status = 'todo' AND (scheduled_at IS NULL OR scheduled_at <= now()))",
            )
            if busy and busy[0][0] == 0:
                return True
            await asyncio.sleep(0.5)
        return False

    def verdict(self, drained: bool) -> int:
        url = self.url
        statuses = dict(rows(url, "SELECT id, status FROM deliveries"))
        acked = list(self.acked)
        processed = [d for d in acked if statuses.get(d) in ("done", "ignored")]
        jobs = dict(
            rows(
                url,
                "SELECT args->'payload'->>'delivery_id', COUNT(*) FROM procrastinate_jobs"
                " WHERE args->>'kind' = 'delivery' GROUP BY 1",
            )
        )
        reviews = rows(
            url,
            "SELECT p.number, r.state FROM reviews r JOIN pulls p ON p.id = r.pull_id"
            " ORDER BY p.number, r.id",
        )
        by_pr: dict[int, list[str]] = {}
        for number, state in reviews:
            by_pr.setdefault(number, []).append(state)
        pending = self.lab.pending_per_pr()
        published = [n for n in self.opened if pending.get(n, 0) >= 1]
        duplicates = [n for n, count in pending.items() if count > 1]
        lost = [n for n in self.opened if "draft" not in by_pr.get(n, [])]
        cancelled = [
            r
            for r in self.lab.github.requests
            if "/check-runs/" in r["path"] and (r["body"] or {}).get("conclusion") == "cancelled"
        ]
        restarts = [
            (p.role, p.proc.poll() if p.proc else None) for p in [self.web, *self.workers] if p
        ]
        print("figures:")
        for line in self.figures:
            print(f"  {line}")
        print(f"  deliveries: {len(acked)} acknowledged, {len(processed)} processed,"
              f" {len(self.refused)} refused with 503 while Postgres was away (not acknowledged:"
              " they can be redelivered)")  # fmt: skip
        print(f"  reviews: {len(self.opened)} PRs opened, {len(published)} published,"
              f" {len(duplicates)} duplicates, {len(lost)} lost,"
              f" {len(cancelled)} check runs cancelled")  # fmt: skip
        print("checks:")
        self.check(drained, "every job finished (none left todo or doing)")
        self.check(len(processed) == len(acked), "every acknowledged delivery processed")
        self.check(all(jobs.get(d) == 1 for d in acked), "one job per acknowledged delivery (once)")
        self.check(not duplicates, "no review published twice")
        self.check(not lost and len(published) == len(self.opened), "no review lost")
        self.check(not cancelled, "no review cancelled")
        self.check(
            all(code is None for _, code in restarts), "no product process exited or restarted"
        )
        if self.violations:
            print(f"\npg restart drill: FAILED, {len(self.violations)} violation(s)")
            return 1
        print("\npg restart drill: passed")
        return 0


def migrate(url: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "bot", "migrate"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "COCKPIT_DATABASE_URL": url},
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )


async def main_async(root: Path) -> int:
    cluster = PgCluster(durable=True).start()
    drill: Drill | None = None
    try:
        url = cluster.create_database()
        migrate(url)
        async with Lab(root, PRS) as lab:
            await lab.model.stop()
            lab.model = SlowModel(lab.faults)
            await lab.model.start()
            drill = Drill(root, lab, cluster, url)
            try:
                return await drill.run()
            finally:
                for proc in [drill.web, *drill.workers]:
                    if proc is not None:
                        if proc.proc is not None:
                            proc.proc.send_signal(signal.SIGCONT)
                        proc.terminate()
    finally:
        cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="cockpit-pg-drill-"))
    os.chmod(root, 0o755)
    try:
        return asyncio.run(asyncio.wait_for(main_async(root), 900))
    finally:
        if args.keep:
            print(f"logs kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
