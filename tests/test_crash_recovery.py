"""Nothing lost, nothing doubled: acknowledged deliveries survive SIGKILL of the server."""

from __future__ import annotations

import json
import sqlite3

import aiohttp
import pytest

from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess

DELIVERIES = 12
# Delivery jobs still to run: once none is left and every delivery is done, nothing can
# process a delivery (and add a review job) again.
UNFINISHED_JOBS = (
    "SELECT COUNT(*) FROM jobs WHERE kind = 'delivery' AND state IN ('queued', 'running',"
    " 'waiting')"
)
PG_UNFINISHED_JOBS = (
    "SELECT COUNT(*) FROM procrastinate_jobs WHERE args->>'kind' = 'delivery'"
    " AND status IN ('todo', 'doing')"
)


def server_env(github) -> dict[str, str]:
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",  # the reviewer's (never called)
    }


def rows(db_path, sql):
    with sqlite3.connect(db_path) as conn:
        return conn.execute(sql).fetchall()


async def test_acknowledged_deliveries_are_processed_once_after_sigkill(tmp_path, github):
    github.add_repo(  # the payloads' PR author may write: every PR gets a review
        "octo",
        "widgets",
        clone_url="file:///unused",
        installation_id=7,
        permissions={"Codertocat": "write"},
    )
    data_dir = tmp_path / "data"
    server = ServerProcess(server_env(github), data_dir, tmp_path / "server.log")
    await server.start()
    github.gate.clear()  # GitHub stops answering: processing starts, then hangs
    try:
        async with aiohttp.ClientSession() as session:
            for number in range(1, DELIVERIES + 1):
                data = deliveries.payload("pull_request.opened")
                deliveries.retarget(
                    data,
                    owner="octo",
                    name="widgets",
                    clone_url="file:///unused",
                    installation_id=7,
                )
                data["pull_request"]["number"] = data["number"] = number
                body = json.dumps(data).encode()
                headers = deliveries.headers(
                    "pull_request", body, WEBHOOK_SECRET, f"crash-{number}"
                )
                async with session.post(
                    f"{server.url}/webhooks/github", data=body, headers=headers
                ) as response:
                    assert response.status == 202
        await wait_for(lambda: len(github.requests) > 0)  # workers are mid-processing
        server.kill()
    finally:
        server.kill()

    db_path = data_dir / "cockpit.sqlite3"
    assert rows(db_path, "SELECT COUNT(*) FROM deliveries")[0][0] == DELIVERIES
    assert rows(db_path, "SELECT COUNT(*) FROM deliveries WHERE status = 'done'")[0][0] == 0
    assert rows(db_path, "SELECT COUNT(*) FROM jobs WHERE state = 'running'")[0][0] > 0

    github.gate.set()
    restarted = ServerProcess(server_env(github), data_dir, tmp_path / "server.log")
    await restarted.start()
    try:
        # Settled, not only done once: every delivery processed and no delivery job left to
        # run (a duplicate would be one still queued or running when the deliveries are done).
        await wait_for(
            lambda: (
                rows(db_path, "SELECT COUNT(*) FROM deliveries WHERE status = 'done'")[0][0]
                == DELIVERIES
                and rows(db_path, UNFINISHED_JOBS)[0][0] == 0
            ),
            timeout=30,
        )
    finally:
        restarted.terminate()

    reviews = rows(db_path, "SELECT key, COUNT(*) FROM jobs WHERE kind = 'review' GROUP BY key")
    assert len(reviews) == DELIVERIES
    assert all(count == 1 for _key, count in reviews)
    delivery_jobs = rows(
        db_path, "SELECT state, COUNT(*) FROM jobs WHERE kind = 'delivery' GROUP BY state"
    )
    assert delivery_jobs == [("done", DELIVERIES)]
    assert rows(db_path, "SELECT MAX(attempts) FROM deliveries")[0][0] <= 2


def pg_rows(url, sql):
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.backends
@pytest.mark.postgres_only("separate web and worker processes on one database")
async def test_a_killed_worker_loses_nothing_when_web_and_workers_are_separate(
    tmp_path, github, backend, database_url
):
    """A web process acknowledges; a worker process dies mid-processing (SIGKILL); a new
    worker finishes every delivery, each once."""
    github.add_repo("octo", "widgets", clone_url="file:///unused", installation_id=7)
    env = {
        **server_env(github),
        "COCKPIT_DATABASE_URL": database_url,
        "COCKPIT_WORKER_TIMEOUT": "3",
    }
    web = ServerProcess(env, tmp_path / "web", tmp_path / "web.log", role="web")
    worker = ServerProcess(env, tmp_path / "w1", tmp_path / "w1.log", role="worker")
    await web.start()
    await worker.start()
    github.gate.clear()  # GitHub stops answering: processing starts, then hangs
    try:
        async with aiohttp.ClientSession() as session:
            for number in range(1, DELIVERIES + 1):
                data = deliveries.payload("pull_request.opened")
                deliveries.retarget(
                    data, owner="octo", name="widgets", clone_url="file:///unused",
                    installation_id=7,
                )  # fmt: skip
                data["pull_request"]["number"] = data["number"] = number
                body = json.dumps(data).encode()
                headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET, f"pg-{number}")
                async with session.post(
                    f"{web.url}/webhooks/github", data=body, headers=headers
                ) as response:
                    assert response.status == 202
            async with session.post(f"{worker.url}/webhooks/github", data=b"{}") as response:
                assert response.status == 404  # a worker takes no deliveries
        await wait_for(lambda: len(github.requests) > 0)  # the worker is mid-processing
        worker.kill()
        done = "SELECT COUNT(*) FROM deliveries WHERE status = 'done'"
        assert pg_rows(database_url, done)[0][0] < DELIVERIES
        github.gate.set()
        replacement = ServerProcess(env, tmp_path / "w2", tmp_path / "w2.log", role="worker")
        await replacement.start()
        try:
            await wait_for(  # settled: every delivery done and no delivery job left to run
                lambda: (
                    pg_rows(database_url, done)[0][0] == DELIVERIES
                    and pg_rows(database_url, PG_UNFINISHED_JOBS)[0][0] == 0
                ),
                timeout=60,
            )
        finally:
            replacement.terminate()
    finally:
        worker.kill()
        web.terminate()

    reviews = pg_rows(
        database_url,
        "SELECT lock, COUNT(*) FROM procrastinate_jobs WHERE args->>'kind' = 'review'"
        " GROUP BY lock",
    )
    assert len(reviews) == DELIVERIES and all(count == 1 for _lock, count in reviews)
    states = pg_rows(
        database_url,
        "SELECT status::text, COUNT(*) FROM procrastinate_jobs"
        " WHERE args->>'kind' = 'delivery' GROUP BY status",
    )
    assert states == [("succeeded", DELIVERIES)]
    assert pg_rows(database_url, "SELECT MAX(attempts) FROM deliveries")[0][0] <= 2
