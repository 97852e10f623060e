"""Attacks on large PRs in groups and `passes = N` (issue 32), end to end: the server, the
GitHub stand-in and the Anthropic stand-in, rows read back from the database."""

from __future__ import annotations

import pytest

from bot.server import make_app
from handlers import router
from tests.test_review_groups import CONFIG, PASSES_HEAD, by_order, sessions_told
from tests.world import build_world

pytestmark = pytest.mark.backends


@pytest.mark.parametrize("value", ["9", "0"])
async def test_passes_out_of_range_says_the_range_it_takes(
    value, github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """`passes = 9` was told "must be at least 1": true of 9, and no help; it says 1 to 5."""
    anthropic_standin.policy = by_order
    world = build_world(github, tmp_path, head=PASSES_HEAD, files={CONFIG: f"passes = {value}\n"})
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    status = world.status_body()
    assert "`passes` must be from 1 to 5 (the default applies)" in status
    assert "independent passes" not in status and len(sessions_told(anthropic_standin)) == 1
