"""Nothing lost, nothing doubled: acknowledged deliveries survive SIGKILL of the server."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import aiohttp

from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess

DELIVERIES = 12


def server_env(github) -> dict[str, str]:
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
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
        await wait_for(
            lambda: (
                rows(db_path, "SELECT COUNT(*) FROM deliveries WHERE status = 'done'")[0][0]
                == DELIVERIES
            ),
            timeout=30,
        )
        await asyncio.sleep(0.3)  # give any duplicate processing a chance to show itself
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
