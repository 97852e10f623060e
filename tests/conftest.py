"""Shared fixtures: the GitHub stand-in, settings, and a signed-delivery helper."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bot.config import Settings
from bot.standin.github import GitHubStandin
from bot.standin.openapi import OpenAPIValidator
from tests import deliveries
from tests.models import anthropic_standin, openai_standin  # noqa: F401 - shared fixtures

WEBHOOK_SECRET = "test-webhook-secret-123"


@pytest.fixture
async def github():
    standin = GitHubStandin(validator=OpenAPIValidator.from_file(deliveries.OPENAPI))
    await standin.start()
    yield standin
    await standin.stop()


@pytest.fixture
def settings(tmp_path: Path, github: GitHubStandin) -> Settings:
    return github.settings(tmp_path / "data", WEBHOOK_SECRET)


Poster = Callable[..., Awaitable]


@pytest.fixture
def deliver(client_factory=None) -> Callable:
    """`await deliver(client, event, data)` posts a signed delivery; returns the response."""

    async def post(
        client,
        event: str,
        data: dict | bytes,
        *,
        delivery_id: str | None = None,
        secret: str = WEBHOOK_SECRET,
    ):
        body = data if isinstance(data, bytes) else json.dumps(data).encode()
        return await client.post(
            "/webhooks/github",
            data=body,
            headers=deliveries.headers(event, body, secret, delivery_id),
        )

    return post


async def wait_for(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float = 10.0, interval: float = 0.02
) -> None:
    """Poll until `predicate` is true; fail the test with a clear message on timeout."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
