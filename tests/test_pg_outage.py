"""Postgres restarts and goes away under real `cockpit serve` processes: workers process again,
readiness comes back without traffic, requests fail fast while it is away, a review in flight
is interrupted (not cancelled) and finishes, and a paused worker's late work is fenced off."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import psycopg
import pytest

from bot.records.postgres import PgDatabase
from bot.standin.models import AnthropicStandin
from bot.standin.scripted import scripted_reviewer
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.world import build_world, comment_payload

GITHUB_LIMIT = aiohttp.ClientTimeout(total=10)  # GitHub gives up on a delivery after 10 s
PROBE_LIMIT = aiohttp.ClientTimeout(total=5)  # a probe that hangs past its period is a failure


@pytest.fixture(scope="module")
def outage_cluster():
    """A cluster of this module's own, since its tests stop and restart it."""
    from tests.pgserver import PgCluster, Unavailable

    cluster = PgCluster()
    try:
        cluster.start()
    except Unavailable as exc:
        cluster.stop()
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Postgres: {exc}")
        pytest.skip(f"no Postgres server could be started here ({exc})")
    yield cluster
    cluster.stop()


@pytest.fixture
async def database(outage_cluster) -> str:
    url = outage_cluster.create_database()
    db = await PgDatabase.open(url)
    await db.migrate()
    await db.close()
    return url


@pytest.fixture
async def model():
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    yield standin
    standin.gate.set()
    await standin.stop()


def env(github, model, url: str) -> dict[str, str]:
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "COCKPIT_DATABASE_URL": url,
        "COCKPIT_WORKER_TIMEOUT": "4",
    }


def rows(url: str, sql: str) -> list[tuple]:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            return conn.execute(sql).fetchall()
    except psycopg.OperationalError:
        return []  # the server is away: nothing to read yet


async def post(session, server, event: str, data: dict, delivery_id: str, **kwargs) -> int:
    body = json.dumps(data).encode()
    headers = deliveries.headers(event, body, WEBHOOK_SECRET, delivery_id)
    async with session.post(
        f"{server.url}/webhooks/github", data=body, headers=headers, **kwargs
    ) as response:
        return response.status


async def get(session, server, path: str) -> tuple[int, dict]:
    async with session.get(f"{server.url}{path}", timeout=PROBE_LIMIT) as response:
        return response.status, await response.json()


def ended(log: str) -> bool:
    """procrastinate logged the end of the review job in this process."""
    return any("key='review:" in line and "ended with status" in line for line in log.splitlines())


def concluded(github, conclusion: str) -> list[dict]:
    return [
        r
        for r in github.requests
        if r["path"].split("/")[-2:-1] == ["check-runs"]
        and (r["body"] or {}).get("conclusion") == conclusion
    ]


async def test_a_review_in_flight_survives_a_postgres_restart_and_workers_process_again(
    tmp_path, github, model, database, outage_cluster
):
    world = build_world(github, tmp_path)
    web = ServerProcess(env(github, model, database), tmp_path / "web", tmp_path / "web.log",
                        role="web")  # fmt: skip
    worker = ServerProcess(env(github, model, database), tmp_path / "w", tmp_path / "w.log",
                           role="worker")  # fmt: skip
    await web.start()
    await worker.start()
    model.gate.clear()  # the review is waiting for the model when Postgres goes
    try:
        async with aiohttp.ClientSession() as session:
            opened = world.pull_request_payload("opened")
            assert await post(session, web, "pull_request", opened, "o-1") == 202
            await wait_for(lambda: model.requests, timeout=60)
            await asyncio.to_thread(outage_cluster.stop_server, "immediate")
            await asyncio.to_thread(outage_cluster.start_server)
            model.gate.set()
            await wait_for(
                lambda: rows(database, "SELECT state FROM reviews") == [("draft",)], timeout=90
            )
            # Interrupted, not failed: only the attempt that ran to the end is counted.
            attempts = (
                "SELECT status::text, attempts FROM procrastinate_jobs"
                " WHERE args->>'kind' = 'review'"
            )
            await wait_for(lambda: rows(database, attempts)[:1] != [("doing", 0)], timeout=30)
            assert rows(database, attempts) == [("succeeded", 1)]
            # The worker takes new work again, without being restarted.
            status = comment_payload(world, "/cockpit status", comment_id=9101)
            assert await post(session, web, "issue_comment", status, "c-1") == 202
            await wait_for(
                lambda: (
                    rows(database, "SELECT status FROM deliveries WHERE id = 'c-1'") == [("done",)]
                ),
                timeout=60,
            )
            code, health = await get(session, worker, "/healthz")
            assert code == 200 and health["workers"]["alive"] == health["workers"]["total"]
            assert health["workers"]["restarts"] >= 1
    finally:
        web.terminate()
        worker.terminate()
    assert concluded(github, "cancelled") == []
    assert worker.proc.returncode == 0  # it was never the process that had to go


async def test_readiness_comes_back_without_traffic_and_an_outage_fails_fast(
    tmp_path, github, model, database, outage_cluster
):
    world = build_world(github, tmp_path)
    web = ServerProcess(env(github, model, database), tmp_path / "web", tmp_path / "web.log",
                        role="web")  # fmt: skip
    await web.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert (await get(session, web, "/healthz/ready"))[0] == 200
            await asyncio.to_thread(outage_cluster.stop_server, "immediate")
            opened = world.pull_request_payload("opened")
            # Within GitHub's 10 s: a 503, so GitHub may redeliver (no hanging request).
            status = await post(session, web, "pull_request", opened, "o-2", timeout=GITHUB_LIMIT)
            assert status == 503
            code, ready = await get(session, web, "/healthz/ready")
            assert code == 503 and ready["db"] is False
            assert (await get(session, web, "/healthz"))[0] == 503
            assert (await get(session, web, "/healthz/live"))[0] == 200  # no reason to restart
            await asyncio.to_thread(outage_cluster.start_server)

            async def ready_again() -> bool:
                return (await get(session, web, "/healthz/ready"))[0] == 200

            await wait_for(ready_again, timeout=30)  # no delivery was sent meanwhile
            code, summary = await get(session, web, "/healthz")
            assert code == 200 and summary["inbox"] is True
            assert await post(session, web, "pull_request", opened, "o-2") == 202
    finally:
        if outage_cluster.root and not (outage_cluster.root / "data/postmaster.pid").exists():
            outage_cluster.start_server()
        web.terminate()


async def test_a_paused_worker_changes_nothing_on_github_when_it_resumes(
    tmp_path, github, model, database
):
    """Worker A is paused (SIGSTOP) past the worker timeout with a review in flight; B runs
    it again and publishes the draft; A resumes: it must not touch the PR's check run,
    pending review or status comment."""
    world = build_world(github, tmp_path)
    web = ServerProcess(env(github, model, database), tmp_path / "web", tmp_path / "web.log",
                        role="web")  # fmt: skip
    first = ServerProcess(env(github, model, database), tmp_path / "a", tmp_path / "a.log",
                          role="worker")  # fmt: skip
    second = ServerProcess(env(github, model, database), tmp_path / "b", tmp_path / "b.log",
                           role="worker")  # fmt: skip
    await web.start()
    await first.start()
    model.gate.clear()
    try:
        async with aiohttp.ClientSession() as session:
            opened = world.pull_request_payload("opened")
            assert await post(session, web, "pull_request", opened, "o-3") == 202
            await wait_for(lambda: model.requests, timeout=60)
            await second.start()
            first.proc.send_signal(signal.SIGSTOP)
            await wait_for(lambda: len(model.requests) >= 2, timeout=60)  # B runs it again
            model.gate.set()
            job = "SELECT status::text FROM procrastinate_jobs WHERE args->>'kind' = 'review'"
            # B's job is over: its last call to GitHub was made.
            await wait_for(lambda: rows(database, job) == [("succeeded",)], timeout=90)
            drafted = len(github.requests)
            first.proc.send_signal(signal.SIGCONT)
            # A gets the answer that waited for it and runs its job to the end.
            await wait_for(lambda: ended(first.log_path.read_text()), timeout=60)
    finally:
        first.proc.send_signal(signal.SIGCONT)
        for proc in (web, first, second):
            proc.terminate()
    late = [r for r in github.requests[drafted:] if r["method"] != "GET"]
    assert late == []
    assert concluded(github, "cancelled") == []
    assert rows(database, "SELECT state FROM reviews") == [("draft",)]
    pending = [r for r in github.reviews.values() if r["state"] == "PENDING"]
    assert len(pending) == 1
