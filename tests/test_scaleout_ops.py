"""What several processes share or keep apart: command rate limits in the database, advisory
locks that hand connections back clean, publishing re-checked under its lock, and each worker
process tending its own disk."""

from __future__ import annotations

import asyncio
import subprocess

import psycopg
import pytest

from bot.ratelimit import CommandLimits, Limit
from bot.records.postgres import PgDatabase
from bot.records.pulls import pull_by_id
from bot.records.reviews import load_findings
from bot.records.vocab import ReviewState
from bot.review.approve import publish, publishing_key
from bot.review.target import Target
from bot.server import CONTEXT, make_app
from handlers import router
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.world import INSTALLATION, NAME, OWNER, build_world, comment_payload


@pytest.mark.backends
async def test_command_limits_are_one_window_for_every_process(backend, db, database_url):
    """Two processes (two pools on Postgres) count the same PR's commands together."""
    other = await PgDatabase.open(database_url) if database_url else db
    limits = [CommandLimits(per_pr=Limit(3, 3600)), CommandLimits(per_pr=Limit(3, 3600))]
    try:
        answers = [
            await limits[n % 2].check(db if n % 2 == 0 else other, "octo/widgets#1", f"u{n}")
            for n in range(4)
        ]
    finally:
        if other is not db:
            await other.close()
    assert answers[:3] == [None, None, None]
    assert answers[3] is not None and answers[3][0] == "at most 3 per hour for this PR"


@pytest.mark.backends
@pytest.mark.postgres_only("advisory locks on pooled connections")
async def test_hold_hands_its_connection_back_as_it_found_it(backend, database_url):
    """A pool of one connection: it comes back from `hold` in autocommit, as the pool made
    it, and a holder cancelled while it waits leaves no lock behind."""
    db = await PgDatabase.open(database_url, max_size=1)
    other = await PgDatabase.open(database_url)
    try:
        async with db.hold("publishing:1"):
            pass
        async with db.pool.connection() as conn:
            assert conn.autocommit
        await db.execute("INSERT INTO pulls (repo, number) VALUES ('octo/widgets', 1)")
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT COUNT(*) FROM pulls").fetchone() == (1,)

        async def wait_in_line() -> None:
            async with other.hold("publishing:2"):
                pass

        async with db.hold("publishing:2"):
            waiter = asyncio.create_task(wait_in_line())
            await wait_for(
                lambda: _waiting_for_advisory_lock(database_url), timeout=10
            )  # the waiter is queued for the lock
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        async with asyncio.timeout(10):  # nobody holds it now: taken at once
            async with other.hold("publishing:2"):
                pass
    finally:
        await other.close()
        await db.close()


def _waiting_for_advisory_lock(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        ).fetchone()
    return row[0] > 0


async def test_publishing_under_the_lock_skips_a_review_published_meanwhile(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """A recovery that waited for the publishing lock while an approve published finds the
    review posted and publishes nothing again."""
    world = build_world(github, tmp_path)
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    await world.send("issue_comment", comment_payload(world, "/cockpit approve"))
    await world.wait_review("posted")
    ctx = world.client.server.app[CONTEXT]
    [review] = await world.review_rows()
    pull = await pull_by_id(ctx.db, review["pull_id"])
    target = Target(ctx, ctx.github.installation_api(pull.installation_id), pull)
    chosen = [f.ordinal for f in await load_findings(ctx.db, review["id"])]
    async with ctx.db.hold(publishing_key(review["id"])):
        await publish(ctx, target, review["id"], chosen)
    assert len(github.calls("POST", r"/reviews/\d+/events$")) == 1
    assert (await world.review_rows())[0]["state"] == ReviewState.POSTED


@pytest.mark.backends
@pytest.mark.postgres_only("several worker processes, each with its own disk")
async def test_every_worker_process_tends_its_own_disk(tmp_path, github, backend, database_url):
    """A closed PR's head ref is dropped from the mirror of every worker, not just the one
    that happened to run the database's maintenance."""
    world = build_world(github, tmp_path)
    origin = world.pr.clone_url.removeprefix("file://")
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "INSERT INTO pulls (installation_id, repo, number, state) VALUES (%s, %s, 1, 'closed')",
            (INSTALLATION, f"{OWNER}/{NAME}"),
        )
    env = {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "COCKPIT_DATABASE_URL": database_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",  # a worker's reviewer
    }
    mirrors = []
    workers = []
    for name in ("a", "b"):
        mirror = tmp_path / name / "mirrors" / OWNER / f"{NAME}.git"
        mirror.parent.mkdir(parents=True)
        subprocess.run(["git", "clone", "--mirror", "-q", origin, str(mirror)], check=True)
        assert _has_ref(mirror, "refs/pull/1/head")
        mirrors.append(mirror)
        workers.append(ServerProcess(env, tmp_path / name, tmp_path / f"{name}.log", role="worker"))
    try:
        for worker in workers:
            await worker.start()
        await wait_for(lambda: not any(_has_ref(m, "refs/pull/1/head") for m in mirrors), 60)
    finally:
        for worker in workers:
            worker.terminate()


def _has_ref(mirror, ref: str) -> bool:
    done = subprocess.run(
        ["git", "-C", str(mirror), "show-ref", "--verify", "--quiet", ref], check=False
    )
    return done.returncode == 0
