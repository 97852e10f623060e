"""The one backend contract (`bot.records.database.Database`, `bot.queue.JobQueue`, the inbox's
`Commits`), held against both implementations as `open_backend` opens them."""

from __future__ import annotations

import asyncio
import inspect
import time

import pytest

from bot.backend import open_backend
from bot.delivery import Delivery
from bot.inbox import Commits
from bot.queue import EVENTS, JobQueue, NewJob
from bot.records.database import Database
from tests.conftest import wait_for
from tests.jobstates import job_states

pytestmark = pytest.mark.backends


@pytest.fixture
async def opened(settings):
    opened = await open_backend(settings)
    yield opened
    await opened.jobs.stop()
    await opened.close()


def members(protocol: type) -> dict[str, object]:
    """What a Protocol asks for: its methods and properties, and its annotated attributes."""
    found: dict[str, object] = {
        name: value
        for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    }
    found.update({name: None for name in getattr(protocol, "__annotations__", {})})
    return found


@pytest.mark.parametrize(
    ("part", "protocol"), [("db", Database), ("jobs", JobQueue), ("commits", Commits)]
)
async def test_each_backend_implements_all_of_the_contract(opened, part, protocol):
    implementation = getattr(opened, part)
    wanted = members(protocol)
    assert wanted  # the contract names something
    missing = [name for name in wanted if not hasattr(implementation, name)]
    assert missing == []
    for name, declared in wanted.items():
        if inspect.isfunction(declared):
            given = getattr(implementation, name)
            assert inspect.iscoroutinefunction(given) == inspect.iscoroutinefunction(declared), name


async def test_the_inbox_commits_a_delivery_with_its_job_once(opened):
    delivery = Delivery("d-1", "pull_request", b'{"action": "opened"}', "opened", 7, "o/r", 1)
    route = opened.jobs.row(NewJob("delivery", delivery.key, {"delivery_id": "d-1"}, EVENTS))
    await opened.commits.start()
    try:
        assert await opened.commits.probe()
        assert await opened.commits.commit([(delivery, route)]) == [True]
        assert await opened.commits.commit([(delivery, route)]) == [False]
    finally:
        await opened.commits.stop()
    assert await job_states(opened.jobs, key=delivery.key) == ["queued"]
    assert await opened.jobs.busy(delivery.key)


async def test_finished_jobs_are_pruned_and_jobs_in_line_stay(opened):
    jobs = opened.jobs
    done = asyncio.Event()

    async def work(job):
        done.set()

    jobs.handlers["w"] = work
    await jobs.enqueue("w", "now", {}, queue="q")
    await jobs.enqueue("w", "later", {}, queue="q", delay=3600)
    jobs.start({"q": 1})
    await asyncio.wait_for(done.wait(), 20)
    await wait_for(
        lambda: _states_are(jobs, "now", ["done"]), timeout=20, interval=0.05
    )  # its end is written just after the handler returns
    await jobs.prune(time.time() + 7200, chunk=10)
    assert await job_states(jobs, key="now") == []
    assert await job_states(jobs, key="later") == ["queued"]


async def _states_are(jobs: JobQueue, key: str, expected: list[str]) -> bool:
    return await job_states(jobs, key=key) == expected


async def test_leftovers_of_a_dead_process_are_finished_where_no_other_may_be_at_them(
    opened, backend
):
    """SQLite's one process owns everything it finds mid-way; on Postgres another process may
    be at it (and procrastinate retries a dead worker's jobs), so nothing is done."""
    ran = []

    async def work() -> None:
        ran.append(True)

    await opened.jobs.finish_leftovers(work)
    assert ran == ([True] if backend == "sqlite" else [])


async def test_a_database_with_tables_is_not_empty_and_a_new_one_is(
    opened, settings, request, tmp_path
):
    """`empty` was SQLite's alone, outside the contract."""
    assert not await opened.db.empty()
    if settings.database_url is None:
        (tmp_path / "fresh.sqlite3").touch()  # a file another process is only starting to make
        fresh = await type(opened.db).open(tmp_path / "fresh.sqlite3", migrate=False)
    else:
        url = request.getfixturevalue("pg_cluster").create_database()
        fresh = await type(opened.db).open(url)
    try:
        assert await fresh.empty()
    finally:
        await fresh.close()
