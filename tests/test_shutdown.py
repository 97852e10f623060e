"""SIGTERM: 503 to new deliveries, running jobs get a bounded grace, the rest are re-queued
without counting an attempt, the database closes cleanly, exit 0 (the real `cockpit serve`)."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

import aiohttp
import pytest

from bot.standin.models import AnthropicStandin
from bot.standin.scripted import scripted_reviewer
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.world import build_world

GRACE = 2.0


@pytest.fixture
async def model():
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    yield standin
    standin.gate.set()
    await standin.stop()


def server_env(github, model) -> dict[str, str]:
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "COCKPIT_SHUTDOWN_GRACE_SECONDS": str(GRACE),
    }


def rows(db_path, sql):
    with sqlite3.connect(db_path) as conn:
        return conn.execute(sql).fetchall()


async def post(session, server, world, data, delivery_id):
    body = json.dumps(data).encode()
    headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET, delivery_id)
    async with session.post(f"{server.url}/webhooks/github", data=body, headers=headers) as r:
        return r.status


async def test_sigterm_stops_gracefully_and_the_review_resumes_at_the_next_start(
    tmp_path, github, model
):
    world = build_world(github, tmp_path)
    data_dir, log_path = tmp_path / "data", tmp_path / "server.log"
    server = ServerProcess(server_env(github, model), data_dir, log_path)
    await server.start()
    model.gate.clear()  # the model is thinking when the signal comes
    try:
        async with aiohttp.ClientSession() as session:
            opened = world.pull_request_payload("opened")
            assert await post(session, server, world, opened, "d-1") == 202
            await wait_for(lambda: model.requests, timeout=30)
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()

            async def stopping() -> bool:
                async with session.get(f"{server.url}/healthz") as response:
                    return (
                        response.status == 503 and "stopping" in (await response.json())["reasons"]
                    )

            await wait_for(stopping, timeout=10)
            closed = world.pull_request_payload("closed")
            assert await post(session, server, world, closed, "d-2") == 503
            await wait_for(lambda: server.proc.poll() is not None, timeout=GRACE + 15)
        assert server.proc.returncode == 0
        assert time.monotonic() - signalled >= GRACE * 0.9  # the running job had its grace
    finally:
        server.kill()
    db_path = data_dir / "cockpit.sqlite3"
    assert rows(db_path, "PRAGMA integrity_check") == [("ok",)]
    assert (
        not (data_dir / "cockpit.sqlite3-wal").exists()
        or rows(db_path, "PRAGMA wal_checkpoint(TRUNCATE)")[0][0] == 0
    )
    assert rows(db_path, "SELECT state, attempts FROM jobs WHERE kind = 'review'") == [
        ("queued", 0)  # re-queued, the attempt not counted
    ]
    assert rows(db_path, "SELECT id FROM deliveries") == [("d-1",)]  # d-2 was refused

    model.gate.set()
    restarted = ServerProcess(server_env(github, model), data_dir, log_path)
    await restarted.start()
    try:
        await wait_for(
            lambda: (
                rows(db_path, "SELECT state, attempts FROM jobs WHERE kind = 'review'")
                == [("done", 1)]
            ),  # the attempt it ran to the end is the only one counted
            timeout=60,
        )
    finally:
        restarted.terminate()
    assert rows(db_path, "SELECT state FROM reviews") == [("draft",)]
