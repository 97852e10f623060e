"""Webhook ingress: verification, status codes, durable storage before the ack."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import zlib
from pathlib import Path

import pytest

from bot.inbox import Delivery, MalformedBody
from bot.server import CONTEXT, MAX_BODY_BYTES, make_app
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for

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
    client = await aiohttp_client(make_app(settings))
    headers = signed(body)
    if tamper:
        tamper(headers)
    response = await client.post("/webhooks/github", data=body, headers=headers)
    assert response.status == status
    assert "Traceback" not in await response.text()
    assert await delivery_rows(client) == 0


async def test_verified_delivery_is_stored_before_the_202(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY))
    assert response.status == 202
    row = await client.app[CONTEXT].db.fetchone(
        "SELECT event, body FROM deliveries WHERE id = 'd-1'"
    )
    assert row["event"] == "pull_request"
    assert zlib.decompress(row["body"]) == BODY  # the exact raw bytes, as signed


async def test_redelivery_is_acknowledged_and_not_processed_again(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    first = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="same"))
    second = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="same"))
    assert (first.status, second.status) == (202, 200)
    db = client.app[CONTEXT].db
    jobs = await db.fetchone("SELECT COUNT(*) FROM jobs WHERE kind = 'delivery'")
    assert jobs[0] == 1
    assert await delivery_rows(client) == 1


async def test_concurrent_duplicates_store_one_row(aiohttp_client, settings):
    import asyncio

    client = await aiohttp_client(make_app(settings))
    responses = await asyncio.gather(
        *[
            client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="racy"))
            for _ in range(10)
        ]
    )
    assert sorted(r.status for r in responses) == [200] * 9 + [202]
    assert await delivery_rows(client) == 1


async def test_ping_answers_200_and_stores_nothing(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    body = json.dumps(deliveries.payload("ping")).encode()
    response = await client.post("/webhooks/github", data=body, headers=signed(body, "ping"))
    assert response.status == 200
    assert await delivery_rows(client) == 0


async def test_unknown_event_is_accepted_then_ignored(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
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
    client = await aiohttp_client(make_app(settings))
    body = b"{" + b" " * (MAX_BODY_BYTES - 1) + b"}"  # 25 MiB + 1 byte
    assert len(body) == MAX_BODY_BYTES + 1
    response = await client.post("/webhooks/github", data=body, headers=signed(body))
    assert response.status == 413
    assert await delivery_rows(client) == 0


async def test_chunked_body_over_25_mib_is_cut_off_while_reading(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))

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
    client = await aiohttp_client(make_app(settings))
    padding = MAX_BODY_BYTES - len(b'{"action": "created", "pad": ""}')
    body = b'{"action": "created", "pad": "' + b"x" * padding + b'"}'
    assert len(body) == MAX_BODY_BYTES
    response = await client.post("/webhooks/github", data=body, headers=signed(body, "star"))
    assert response.status == 202


async def test_bot_sender_starts_no_work(aiohttp_client, settings, github):
    client = await aiohttp_client(make_app(settings))
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
    jobs = await db.fetchone("SELECT COUNT(*) FROM jobs WHERE kind = 'review'")
    assert jobs[0] == 0


async def test_healthz_reports_db_queue_and_workers(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    response = await client.get("/healthz")
    assert response.status == 200
    body = await response.json()
    assert body["db"] is True and body["queue_depth"] == 0
    assert body["workers"]["alive"] == body["workers"]["total"] > 0


async def test_healthz_is_503_when_the_database_is_gone(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    await client.app[CONTEXT].db.conn.close()
    response = await client.get("/healthz")
    assert response.status == 503
    assert (await response.json())["db"] is False


async def test_metrics_count_deliveries_by_event_and_outcome(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="m-1"))
    await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="m-1"))
    await client.post("/webhooks/github", data=BODY, headers={})
    text = await (await client.get("/metrics")).text()
    assert 'cockpit_deliveries_total{event="pull_request",outcome="accepted"} 1.0' in text
    assert 'cockpit_deliveries_total{event="pull_request",outcome="duplicate"} 1.0' in text
    assert 'cockpit_deliveries_total{event="unknown",outcome="bad_signature"} 1.0' in text
    assert "cockpit_jobs{" in text


async def test_racing_redeliveries_are_stored_once(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    posts = [
        client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="race-1"))
        for _ in range(8)
    ]
    statuses = sorted(r.status for r in await asyncio.gather(*posts))
    assert statuses == [200] * 7 + [202]
    assert await delivery_rows(client) == 1
    jobs = await client.app[CONTEXT].db.fetchone("SELECT COUNT(*) FROM jobs WHERE kind='delivery'")
    assert jobs[0] == 1


async def test_the_inbox_writer_holds_no_secrets(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    pid = client.app[CONTEXT].inbox.writer_pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert WEBHOOK_SECRET.encode() not in environ
    assert b"GITHUB_" not in environ and b"PRIVATE KEY" not in environ


async def test_a_dead_inbox_writer_fails_loudly_and_comes_back(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    inbox = client.app[CONTEXT].inbox
    os.kill(inbox.writer_pid, signal.SIGKILL)
    await wait_for(lambda: not inbox.alive)
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="x"))
    assert response.status == 503  # not acknowledged: nothing was stored
    assert "redeliver" in (await response.json())["message"]
    assert (await client.get("/healthz")).status == 503
    await wait_for(lambda: inbox.alive, timeout=10)  # started again
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="x"))
    assert response.status == 202
    assert await delivery_rows(client) == 1


async def test_a_body_only_the_ack_could_read_fails_once_and_clearly(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
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


async def test_stopping_lets_the_writer_answer_what_it_was_sent(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    inbox = client.app[CONTEXT].inbox
    stores = [
        asyncio.create_task(inbox.store(Delivery.from_body(f"s-{n}", "pull_request", BODY)))
        for n in range(50)
    ]
    await asyncio.sleep(0)  # every frame is written before the stop
    await inbox.stop()
    assert await asyncio.gather(*stores) == [True] * 50  # answered, not failed with 503
    assert await delivery_rows(client) == 50


async def test_a_frame_that_cannot_be_built_takes_no_place_in_line(aiohttp_client, settings):
    client = await aiohttp_client(make_app(settings))
    inbox = client.app[CONTEXT].inbox
    unencodable = Delivery("odd", "issues", b"{}", installation_id=2**64)
    with pytest.raises(MalformedBody):
        await inbox.store(unencodable)
    # the next request gets its own answer, not the one meant for the request before it
    assert await inbox.store(Delivery.from_body("next", "pull_request", BODY)) is True
    assert await inbox.store(Delivery.from_body("next", "pull_request", BODY)) is False


async def test_a_stalled_writer_fails_requests_in_time_and_keeps_answers_in_line(
    aiohttp_client, settings
):
    client = await aiohttp_client(make_app(settings))
    inbox = client.app[CONTEXT].inbox
    inbox.ANSWER_TIMEOUT = 0.3
    os.kill(inbox.writer_pid, signal.SIGSTOP)  # e.g. a disk that stopped answering
    try:
        response = await client.post(
            "/webhooks/github", data=BODY, headers=signed(BODY, delivery="a")
        )
        assert response.status == 503
    finally:
        os.kill(inbox.writer_pid, signal.SIGCONT)
    # the late answer for "a" is consumed in its place; "b" gets its own answer
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="b"))
    assert response.status == 202
    response = await client.post("/webhooks/github", data=BODY, headers=signed(BODY, delivery="a"))
    assert response.status == 200  # it was committed after all: a redelivery is a no-op
