"""The daily model budget holds for every model run, whatever starts it: a review, its verify
pass, a critique, an ask, a revision. A command that would start a run says at once that the
budget is spent; a queued turn that finds it spent says so on the PR instead of running; two
runs racing for the last slot cannot both take it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os

import pytest

from bot.agents.base import Budget
from bot.agents.budget import DailyBudgetSpent
from bot.agents.loop import AgentRun, Answer
from bot.agents.providers import ModelClients
from bot.agents.toolbox import Toolbox
from bot.config import Settings
from bot.records.pulls import upsert_pull
from bot.records.sessions import create_session
from bot.server import make_app
from bot.skills import load_skill
from bot.standin.models import say
from bot.standin.repo import make_pr
from bot.worktrees import Mirrors
from handlers import router
from tests import deliveries
from tests.conftest import wait_for
from tests.slowgit import slow_git
from tests.test_sessions import PEOPLE, answers, bodies, rows, say_on_pr, start_world
from tests.world import build_world

pytestmark = pytest.mark.backends

SPENT = "today's model budget for this installation is used up"
RACERS = 10  # Postgres pools up to 10 connections: every racer has its own
INSTALLATIONS = (7, 8, 9)  # one round of the race each


async def budget_world(github, settings, tmp_path, aiohttp_client, anthropic, openai, runs):
    settings = dataclasses.replace(settings, daily_max_runs=runs)
    return await start_world(github, settings, tmp_path, aiohttp_client, anthropic, openai)


async def run_count(world) -> int:
    return len(await rows(world, "SELECT id FROM runs"))


def refused(world, command: str) -> list[str]:
    return [b for b in bodies(world) if f"`/cockpit {command}` did not work: {SPENT}" in b]


async def test_with_one_run_a_day_only_the_review_runs(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """The issue's scenario: a review, then a critique, two asks and a revision."""
    world = await budget_world(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin, 1
    )
    requests = len(anthropic_standin.requests) + len(openai_standin.requests)
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit ask is F1 reachable?")
    await say_on_pr(world, "/cockpit ask and F2?")
    await say_on_pr(world, "/cockpit send-back")
    assert await run_count(world) == 1
    assert len(anthropic_standin.requests) + len(openai_standin.requests) == requests
    assert len(refused(world, "codex-review")) == 1 and len(refused(world, "ask")) == 2
    assert "(1 model run(s) of 1, $" in refused(world, "ask")[0]
    assert "resets at 00:00 UTC" in refused(world, "ask")[0]
    assert await rows(world, "SELECT id FROM sessions WHERE role = 'child'") == []


async def test_with_two_runs_a_day_the_critique_runs_then_asks_and_send_back_are_refused(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    world = await budget_world(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin, 2
    )
    await say_on_pr(world, "/cockpit codex-review")
    assert len(answers(world, "Codex")) == 1
    requests = len(anthropic_standin.requests) + len(openai_standin.requests)
    await say_on_pr(world, "/cockpit ask is F1 reachable?")
    await say_on_pr(world, "/cockpit ask and F2?")
    await say_on_pr(world, "/cockpit send-back")
    assert await run_count(world) == 2
    assert len(anthropic_standin.requests) + len(openai_standin.requests) == requests
    assert len(refused(world, "ask")) == 2 and len(refused(world, "send-back")) == 1
    assert "(2 model run(s) of 2, $" in refused(world, "send-back")[0]
    [review] = await world.review_rows()
    assert review["revision"] == 1


async def test_a_queued_turn_that_finds_the_budget_spent_says_so_instead_of_running(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin, monkeypatch
):
    """Both commands are accepted while one run of two is spent; the critique takes the last
    run, so the ask queued behind it is refused where every run starts."""
    world = await budget_world(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin, 2
    )
    slow = slow_git(tmp_path / "git", "worktree")  # the critique waits for its worktree
    monkeypatch.setenv("PATH", f"{slow.bin_dir}{os.pathsep}{os.environ['PATH']}")
    await say_on_pr(world, "/cockpit codex-review\n/cockpit ask is F1 reachable?", wait=False)
    await wait_for(lambda: any("Asked Codex" in b for b in bodies(world)), timeout=30)
    await wait_for(slow.started.exists, timeout=30)
    assert await run_count(world) == 1  # both commands were accepted before any turn ran
    slow.release()
    await world.wait_idle()
    assert len(answers(world, "Codex")) == 1  # the critique
    [not_run] = [b for b in bodies(world) if "Codex did not answer" in b]
    assert f"{SPENT} (2 model run(s) of 2, $" in not_run and "resets at 00:00 UTC" in not_run
    assert await run_count(world) == 2
    [child] = await rows(world, "SELECT status FROM sessions WHERE role = 'child'")
    assert child["status"] == "active"  # its critique stands; ask again tomorrow


async def test_the_verify_pass_is_a_run_the_budget_refuses_too(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    config = {".github/cockpit.toml": 'verify = true\nverify_provider = "codex"\n'}
    world = build_world(github, tmp_path, permissions=PEOPLE, files=config)
    settings = dataclasses.replace(settings, daily_max_runs=1)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")  # the draft stands, unverified
    assert await run_count(world) == 1 and openai_standin.requests == []
    assert review["verify_error"].startswith(SPENT)
    assert f"The verify pass (codex) did not run: {SPENT} (1 model run(s) of 1" in (
        world.status_body()
    )


# -- the race for the last run ------------------------------------------------


@pytest.fixture
async def runs_env(tmp_path, db, anthropic_standin):
    pr = make_pr(tmp_path / "origin", base={"a.py": "x = 1\n"}, head={"a.py": "x = 2\n"})
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("o/r", pr.clone_url, ["refs/heads/main", "refs/pull/1/head"])
    tree = await mirrors.add_worktree(
        "o/r", name="a", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    pull_ids = {}  # a PR per installation: each round of the race is for another one
    for installation in INSTALLATIONS:
        data = deliveries.payload("pull_request.opened")
        repo = {**data["repository"], "id": installation, "full_name": f"o/r{installation}"}
        pull_ids[installation] = await upsert_pull(db, installation, repo, data["pull_request"])
    clients = ModelClients(Settings(data_dir=tmp_path, claude_model="claude-sonnet-5-5"))
    anthropic_standin.policy = lambda conversation: say("An answer.")
    yield db, tree, clients, pull_ids
    await clients.close()


async def test_concurrent_runs_cannot_both_take_the_last_slot(runs_env, database_url):
    """Racers for one installation's last run. On Postgres each has a connection of its own
    and they start at one moment: a lock on `runs` held by the test stops every one of them
    at its first step, until all are waiting (SQLite has one writer at a time anyway)."""
    db, tree, clients, pull_ids = runs_env
    skill = await load_skill(db)
    budget = Budget(daily_max_runs=1)

    async def one_run(session):
        run = AgentRun(
            db=db,
            provider=clients.provider("claude"),
            session=session,
            toolbox=Toolbox(tree),
            system=skill.text,
            kind="session",
            budget=budget,
            answer=Answer.NONE,
        )
        return await run.turn("What changed?")

    for installation, pull_id in pull_ids.items():
        sessions = [
            await create_session(db, provider="claude", model="claude-sonnet-5-5", pull_id=pull_id)
            for _ in range(RACERS)
        ]
        async with starting_together(database_url):
            racers = [asyncio.create_task(one_run(session)) for session in sessions]
        outcomes = await asyncio.gather(*racers, return_exceptions=True)
        assert sum(not isinstance(o, BaseException) for o in outcomes) == 1, installation
        assert all(
            isinstance(o, DailyBudgetSpent) for o in outcomes if isinstance(o, BaseException)
        ), outcomes
    ledger = await db.fetchall("SELECT installation_id, status FROM runs ORDER BY id")
    assert [tuple(r) for r in ledger] == [(i, "done") for i in INSTALLATIONS]  # refused: no row


@contextlib.asynccontextmanager
async def starting_together(database_url):
    """Postgres: hold `runs` locked while the racers start, until each waits on a lock."""
    if database_url is None:
        yield
        return
    import psycopg

    async with await psycopg.AsyncConnection.connect(database_url) as blocker:
        await blocker.execute("LOCK TABLE runs IN EXCLUSIVE MODE")
        yield
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as probe:

            async def all_waiting():
                cursor = await probe.execute(
                    "SELECT COUNT(DISTINCT pid) FROM pg_locks WHERE NOT granted"
                )
                return (await cursor.fetchone())[0] >= RACERS

            await wait_for(all_waiting, timeout=30)
        await blocker.rollback()
