"""Webhook ingress: verification, status codes, durable storage before the ack."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import zlib

import pytest

from bot.delivery import Delivery
from bot.server import CONTEXT, INBOX, MAX_BODY_BYTES, make_app
from handlers import router
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.jobstates import job_states

pytestmark = pytest.mark.backends

BODY = json.dumps(deliveries.payload("pull_request.opened")).encode()


async def delivery_rows(client) -> int:
    row = await client.app[CONTEXT].db.fetchone("SELECT COUNT(*) FROM deliveries")
    return row[0]


def signed(body: bytes, event: str = "pull_request", delivery: str = "d-1") -> dict:
    return deliveries.headers(event, body, WEBHOOK_SECRET, delivery)


BAD_REQUESTS = [
    ("no signature", BODY, lambda h: h.pop("X-Hub-Signature-256"), 401),
    (
        "wrong signature",
        BODY,
        lambda h: h.update({"X-Hub-Signature-256": "sha256=" + "0" * 64}),
        401,
    ),
    (
        "signature for another body",
        BODY,
        lambda h: h.update({"X-Hub-Signature-256": deliveries.sign(b"{}", WEBHOOK_SECRET)}),
        401,
    ),
    (
        "sha1 only",
        BODY,
        lambda h: h.update({"X-Hub-Signature-256": "", "X-Hub-Signature": "sha1=" + "0" * 40}),
        401,
    ),
    (
        "sha1 in the sha256 header",
        BODY,
        lambda h: h.update({"X-Hub-Signature-256": "sha1=" + "0" * 40}),
        401,
    ),
    ("missing event header", BODY, lambda h: h.pop("X-GitHub-Event"), 400),
    ("missing delivery header", BODY, lambda h: h.pop("X-GitHub-Delivery"), 400),
    ("non-JSON body", b"action=opened&number=1", None, 400),
    ("truncated JSON", BODY[: len(BODY) // 2], None, 400),
    ("JSON array", b'[{"action": "opened"}]', None, 400),
    ("JSON string", b'"hello"', None, 400),
    ("invalid UTF-8", b'{"action": "\xff\xfe"}', None, 400),
]


@pytest.mark.parametrize(
    ("name", "body", "tamper", "status"), BAD_REQUESTS, ids=[case[0] for case in BAD_REQUESTS]
)
async def test_bad_delivery_is_refused_and_stores_nothing(
    aiohttp_client, settings, name, body, tamper, status
):
    client = await aiohttp_client(make_app(settings, router))
    headers = signed(body)
    if tamper:
        tamper(headers)
    response = await client.post("/webhooks/github", data=body, headers=headers)
    assert response.status == status
    assert "Traceback" not in await response.text()
    assert await delivery_rows(client) == 0


async def test_verified_delivery_is_stored_before_the_202(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY))
    assert response.status == 202
    row = await client.app[CONTEXT].db.fetchone(
        "SELECT event, body FROM deliveries WHERE id = 'd-1'"
    )
    assert row["event"] == "pull_request"
    assert zlib.decompress(row["body"]) == BODY  # the exact raw bytes, as signed


async def test_redelivery_is_acknowledged_and_not_processed_again(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    first = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="same"))
    second = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="same"))
    assert (first.status, second.status) == (202, 200)
    assert len(await job_states(client.app[CONTEXT].jobs, "delivery")) == 1
    assert await delivery_rows(client) == 1


async def test_concurrent_duplicates_store_one_row(aiohttp_client, settings):
    import asyncio

    client = await aiohttp_client(make_app(settings, router))
    responses = await asyncio.gather(
        *[
            client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="racy"))
            for _ in range(10)
        ]
    )
    assert sorted(r.status for r in responses) == [200] * 9 + [202]
    assert await delivery_rows(client) == 1


async def test_ping_answers_200_and_stores_nothing(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    body = json.dumps(deliveries.payload("ping")).encode()
    response = await client.post("/webhooks/github", data=body, headers=signed(body, "ping"))
    assert response.status == 200
    assert await delivery_rows(client) == 0


async def test_unknown_event_is_accepted_then_ignored(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    body = b'{"action": "created", "sender": {"login": "octocat", "type": "User"}}'
    response = await client.post(
        "/webhooks/github", data=body, headers=signed(body, "sponsorship", "unknown-1")
    )
    assert response.status == 202
    db = client.app[CONTEXT].db

    async def processed():
        row = await db.fetchone("SELECT status, outcome FROM deliveries WHERE id = 'unknown-1'")
        return row["status"] == "ignored" and row["outcome"] == "no handler"

    await wait_for(processed)


async def test_body_over_25_mib_is_413(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    body = b"{" + b" " * (MAX_BODY_BYTES - 1) + b"}"  # 25 MiB + 1 byte
    assert len(body) == MAX_BODY_BYTES + 1
    response = await client.post("/webhooks/github", data=body, headers=signed(body))
    assert response.status == 413
    assert await delivery_rows(client) == 0


async def test_chunked_body_over_25_mib_is_cut_off_while_reading(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))

    async def chunks():  # no Content-Length: the limit must hold while streaming
        yield b"{"
        for _ in range(26):
            yield b" " * (1024 * 1024)
        yield b"}"

    headers = signed(b"irrelevant")
    response = await client.post("/webhooks/github", data=chunks(), headers=headers)
    assert response.status == 413
    assert await delivery_rows(client) == 0


async def test_body_of_exactly_25_mib_is_accepted(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    padding = MAX_BODY_BYTES - len(b'{"action": "created", "pad": ""}')
    body = b'{"action": "created", "pad": "' + b"x" * padding + b'"}'
    assert len(body) == MAX_BODY_BYTES
    response = await client.post("/webhooks/github", data=body, headers=signed(body, "star"))
    assert response.status == 202


async def test_bot_sender_starts_no_work(aiohttp_client, settings, github):
    client = await aiohttp_client(make_app(settings, router))
    data = deliveries.payload("pull_request.opened")
    data["sender"] = {"login": "dependabot[bot]", "type": "Bot"}
    body = json.dumps(data).encode()
    await client.post("/webhooks/github", data=body, headers=signed(body, delivery="bot-1"))
    db = client.app[CONTEXT].db

    async def ignored():
        row = await db.fetchone("SELECT status, outcome FROM deliveries WHERE id = 'bot-1'")
        return row["status"] == "ignored"

    await wait_for(ignored)
    row = await db.fetchone("SELECT outcome FROM deliveries WHERE id = 'bot-1'")
    assert row["outcome"] == "sender is a bot"
    assert github.requests == []
    jobs = [len(await job_states(client.app[CONTEXT].jobs, "review"))]
    assert jobs[0] == 0


async def test_healthz_reports_db_queue_and_workers(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    response = await client.get("/healthz")
    assert response.status == 200
    body = await response.json()
    assert body["db"] is True and body["queue_depth"] == 0
    assert body["workers"]["alive"] == body["workers"]["total"] > 0


async def test_healthz_is_503_when_the_database_is_gone(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    await client.app[CONTEXT].db.close()
    response = await client.get("/healthz")
    assert response.status == 503
    assert (await response.json())["db"] is False


async def test_metrics_count_deliveries_by_event_and_outcome(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="m-1"))
    await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="m-1"))
    await client.post("/webhooks/github", data=BODY, headers={})
    text = await (await client.get("/metrics")).text()
    assert 'cockpit_deliveries_total{event="pull_request",outcome="accepted"} 1.0' in text
    assert 'cockpit_deliveries_total{event="pull_request",outcome="duplicate"} 1.0' in text
    assert 'cockpit_deliveries_total{event="unknown",outcome="bad_signature"} 1.0' in text
    assert "cockpit_jobs{" in text


async def test_racing_redeliveries_are_stored_once(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    posts = [
        client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="race-1"))
        for _ in range(8)
    ]
    statuses = sorted(r.status for r in await asyncio.gather(*posts))
    assert statuses == [200] * 7 + [202]
    assert await delivery_rows(client) == 1
    jobs = [len(await job_states(client.app[CONTEXT].jobs, "delivery"))]
    assert jobs[0] == 1


@pytest.mark.sqlite_only("holds SQLite's write lock from another connection")
async def test_a_failing_commit_answers_503_and_health_recovers(aiohttp_client, settings):
    app = make_app(settings, router)
    client = await aiohttp_client(app)
    inbox = app[INBOX]
    inbox.commits.busy_timeout_ms = 100
    await inbox.stop()
    await inbox.start()  # reopened with a short wait for the write lock
    # the app's start-up housekeeping may hold the lock for a moment: wait for it
    other = sqlite3.connect(settings.db_path, isolation_level=None, timeout=60)
    other.execute("BEGIN IMMEDIATE")  # someone holds the write lock past the inbox's patience
    try:
        response = await client.post(
            "/webhooks/github", data=BODY, headers=signed(BODY, delivery="x")
        )
        assert (await client.get("/healthz")).status == 503  # while the lock is held
        assert (await client.get("/healthz/ready")).status == 503
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert response.status == 503  # not acknowledged: nothing was stored
    assert "redeliver" in (await response.json())["message"]
    # Ready again by itself once a commit could work, before any delivery gets through.
    assert (await client.get("/healthz/ready")).status == 200
    assert (await client.get("/healthz")).status == 200
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="x"))
    assert response.status == 202
    assert await delivery_rows(client) == 1


async def test_a_body_only_the_ack_could_read_fails_once_and_clearly(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings, router))
    body = b'{"action": "labeled", "size": 1e400}'  # the envelope is fine; a full parse is not
    response = await client.post("/webhooks/github", data=body, headers=signed(body, "issues", "x"))
    assert response.status == 202
    db = client.app[CONTEXT].db

    async def recorded():
        row = await db.fetchone("SELECT status, outcome FROM deliveries WHERE id = 'x'")
        return (
            row is not None and row["status"] == "failed" and "cannot be parsed" in row["outcome"]
        )

    await wait_for(recorded)


async def test_stopping_answers_every_delivery_it_was_given(aiohttp_client, settings):
    app = make_app(settings, router)
    client = await aiohttp_client(app)
    inbox = app[INBOX]
    stores = [
        asyncio.create_task(inbox.store(Delivery.from_body(f"s-{n}", "pull_request", BODY)))
        for n in range(50)
    ]
    await asyncio.sleep(0)  # every request is waiting for a commit before the stop
    await inbox.stop()
    assert await asyncio.gather(*stores) == [True] * 50  # answered, not failed with 503
    await inbox.start()
    assert await delivery_rows(client) == 50


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "identity"])
async def test_a_compressed_body_is_refused_unread(aiohttp_client, settings, encoding):
    client = await aiohttp_client(make_app(settings, router))
    bomb = zlib.compress(b"{" + b" " * 25_000_000 + b"}")
    headers = {**signed(bomb), "Content-Encoding": encoding}
    response = await client.post("/webhooks/github", data=bomb, headers=headers)
    assert response.status == 415
    assert await delivery_rows(client) == 0
