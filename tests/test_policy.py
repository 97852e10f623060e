"""Who and what may spend the installation's money: outside authors' PRs, the daily model
budget, repeated runs of one head (close/reopen loops) and the disk watermark."""

from __future__ import annotations

import dataclasses

import pytest

from bot.server import make_app
from handlers import router
from tests.conftest import wait_for
from tests.world import build_world, comment_payload

PEOPLE = {"octocat": "admin", "maint": "maintain", "stranger": "none"}


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin):
    world = build_world(github, tmp_path, permissions=PEOPLE)
    world.model = anthropic_standin
    world.settings = settings

    async def start(**overrides):
        world.client = await aiohttp_client(
            make_app(dataclasses.replace(settings, **overrides), router)
        )

    world.start = start
    return world


def model_runs(world) -> int:
    """Model conversations started (each review's first request holds no tool result)."""
    return sum(1 for r in world.model.requests if len(r["messages"]) == 1)


async def command(world, body, *, user="maint", comment_id=9001):
    await world.send(
        "issue_comment", comment_payload(world, body, user=user, comment_id=comment_id)
    )
    await world.wait_idle()


async def test_an_outside_authors_prs_are_reviewed_up_to_a_few_a_day(world):
    await world.start()
    await world.send("pull_request", world.pull_request_payload("opened", author="stranger"))
    await world.wait_review("draft")
    for n in range(3):
        head = world.push({"calc.py": f"x = {n}\n"})
        data = world.pull_request_payload("synchronize", head_sha=head, author="stranger")
        await world.send("pull_request", data)
        await world.wait_idle()
    states = [r["state"] for r in await world.review_rows()]
    assert states == ["draft", "draft", "draft", "held"]
    assert model_runs(world) == 3
    status = world.status_body()
    assert "already had 3 automatic reviews today" in status
    assert "a maintainer can start it with `/cockpit review`" in status


async def test_on_command_policy_waits_for_a_maintainer(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = 'outside_prs = "on-command"\n'
    await world.start()
    await world.send("pull_request", world.pull_request_payload("opened", author="stranger"))
    await world.wait_review("held")
    await world.wait_idle()
    assert model_runs(world) == 0
    assert "a maintainer can start it with `/cockpit review`" in world.status_body()
    await command(world, "/cockpit review")
    await world.wait_review("draft")
    assert model_runs(world) == 1


async def test_a_maintainers_pr_is_reviewed_whatever_the_policy(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = 'outside_prs = "on-command"\n'
    await world.start()
    await world.send("pull_request", world.pull_request_payload("opened", author="maint"))
    await world.wait_review("draft")


async def test_a_close_reopen_loop_runs_the_model_once(world):
    await world.start()
    world.model.gate.clear()  # the first review is still running when the PR closes
    await world.send("pull_request", world.pull_request_payload("opened"))
    await wait_for(lambda: world.model.requests)
    for _ in range(4):
        await world.send("pull_request", world.pull_request_payload("closed"))
        await world.send("pull_request", world.pull_request_payload("reopened"))
    world.model.gate.set()
    await world.wait_idle()
    assert model_runs(world) == 1
    assert [r["state"] for r in await world.review_rows()] == ["cancelled"]
    await command(world, "/cockpit review")  # a maintainer may still ask
    await world.wait_review("draft")


async def test_the_daily_budget_holds_new_reviews_with_a_clear_status(world):
    await world.start(daily_max_runs=1)
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    head = world.push({"calc.py": "x = 2\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=head))
    await world.wait_review("held")
    await world.wait_idle()
    assert model_runs(world) == 1
    status = world.status_body()
    assert "today's model budget for this installation is used up (1 model run(s) of 1" in status
    assert "resets at 00:00 UTC" in status
    await command(world, "/cockpit review")
    assert model_runs(world) == 1
    assert any(
        "model budget for this installation is used up" in c["body"]
        for c in world.github.issue_comments.values()
        if "pr-cockpit:status" not in c["body"]
    )


async def test_the_budget_counts_dollars_too(world):
    await world.start(daily_max_usd=0.000001)
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    head = world.push({"calc.py": "x = 2\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=head))
    await world.wait_review("held")


async def test_below_the_disk_watermark_no_review_starts_and_health_says_why(world):
    await world.start(min_free_mb=10**9)  # more than any disk has
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("held")
    await world.wait_idle()
    assert model_runs(world) == 0
    assert "the server is low on disk space" in world.status_body()
    response = await world.client.get("/healthz")
    health = await response.json()
    assert response.status == 200 and health["status"] == "degraded"
    assert "free" in health["reasons"][0]
