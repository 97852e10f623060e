"""The job queue's behaviour on both backends (SQLite's own queue, procrastinate on Postgres),
through the public `Jobs` API, and what only several processes on Postgres can show."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from bot.queue import PermanentError
from bot.queue.sqlite import Jobs
from tests.conftest import wait_for
from tests.jobstates import job_states

pytestmark = pytest.mark.backends


@pytest.fixture
async def jobs(db, database_url):
    queue = await make_jobs(db, database_url)
    yield queue
    await queue.stop()
    if database_url:
        await queue.close()


async def make_jobs(db, database_url, **options):
    if database_url is None:
        return Jobs(db)
    from bot.queue.postgres import PgJobs

    queue = PgJobs(db, database_url, **options)
    await queue.open()
    return queue


async def test_one_running_job_per_key_in_order(jobs):
    order: list[str] = []
    release = asyncio.Event()

    async def work(job):
        order.append(f"start {job.payload['n']}")
        await release.wait()
        order.append(f"end {job.payload['n']}")

    async def other(job):
        order.append("other key")

    jobs.handlers.update(w=work, other=other)
    for n in range(3):
        await jobs.enqueue("w", "pr-1", {"n": n}, queue="q")
    jobs.start({"q": 3})
    await wait_for(lambda: order == ["start 0"])
    await jobs.enqueue("other", "pr-2", {}, queue="q")  # an idle worker takes it at once

    async def other_done():
        return await job_states(jobs, "other") == ["done"]

    await wait_for(other_done)
    # Idle workers looked for work (they took pr-2's job, queued after pr-1's next ones) and
    # left pr-1's next ones waiting.
    assert order == ["start 0", "other key"]
    release.set()

    async def all_done():
        return await job_states(jobs, "w") == ["done"] * 3

    await wait_for(all_done)
    assert order[1:] == ["other key", "end 0", "start 1", "end 1", "start 2", "end 2"]


async def test_different_keys_run_concurrently_up_to_the_pool_size(jobs):
    running: set[str] = set()
    peak = 0
    done = []
    release = asyncio.Event()

    async def work(job):
        nonlocal peak
        running.add(job.key)
        peak = max(peak, len(running))
        await release.wait()  # each holds its worker until the test lets go
        running.discard(job.key)
        done.append(job.key)

    jobs.handlers["w"] = work
    for n in range(4):
        await jobs.enqueue("w", f"pr-{n}", {}, queue="q")
    jobs.start({"q": 2})
    await wait_for(lambda: len(running) == 2)  # two keys at once, whatever the machine's load
    release.set()

    async def all_done():
        return await job_states(jobs, "w") == ["done"] * 4

    await wait_for(all_done)
    assert peak == 2 and sorted(done) == [f"pr-{n}" for n in range(4)]


async def test_supersede_cancels_queued_and_running_older_jobs(jobs):
    started = asyncio.Event()
    cancelled = []

    async def work(job):
        if job.payload["sha"] == "old":
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(job.id)
                raise

    jobs.handlers["review"] = work
    jobs.start({"q": 2})
    old = await jobs.enqueue("review", "pr-1", {"sha": "old"}, queue="q")
    await asyncio.wait_for(started.wait(), 10)
    await jobs.enqueue("review", "pr-1", {"sha": "new"}, queue="q", supersede=True)

    async def settled():
        return await job_states(jobs, "review") == ["cancelled", "done"]

    await wait_for(settled)
    assert cancelled == [old]


async def test_failures_retry_then_fail_and_permanent_errors_do_not(jobs):
    attempts: dict[str, list[int]] = {"flaky": [], "refuse": []}
    gave_up = []

    async def flaky(job):
        attempts["flaky"].append(job.attempts)
        raise RuntimeError("boom")

    async def refuse(job):
        attempts["refuse"].append(job.attempts)
        raise PermanentError("bad input")

    async def report(job, why):
        gave_up.append((job.kind, why))

    jobs.handlers.update(flaky=flaky, refuse=refuse)
    jobs.on_gave_up.update(flaky=report, refuse=report)
    await jobs.enqueue("flaky", "k1", {}, queue="q", max_attempts=2)
    await jobs.enqueue("refuse", "k2", {}, queue="q", max_attempts=5)
    jobs.start({"q": 2})

    async def failed():  # both for good: the end state, not a passing moment on the way
        return await job_states(jobs) == ["failed", "failed"] and len(gave_up) == 2

    await wait_for(failed, timeout=15)  # one backoff of 2 s
    assert attempts == {"flaky": [1, 2], "refuse": [1]}  # no attempt after the last, none more
    assert sorted(gave_up) == [
        ("flaky", "RuntimeError: boom"),
        ("refuse", "PermanentError: bad input"),
    ]
    assert await jobs.pending() == 0


async def test_cancel_reaches_a_running_job_and_drops_the_ones_behind(jobs):
    started = asyncio.Event()
    outcome = []

    async def work(job):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    jobs.handlers["turn"] = work
    jobs.start({"q": 1})
    for n in range(3):
        await jobs.enqueue("turn", "session:1", {"n": n}, queue="q")
    await asyncio.wait_for(started.wait(), 10)
    assert await jobs.busy("session:1")
    assert await jobs.cancel("session:1") == 3
    await wait_for(lambda: outcome == ["cancelled"])

    async def idle():
        return not await jobs.busy("session:1") and await jobs.pending() == 0

    await wait_for(idle)
    assert await job_states(jobs, "turn") == ["cancelled"] * 3


async def test_pending_ignores_jobs_scheduled_for_later(jobs):
    await jobs.enqueue("maintenance", "maintenance", {}, queue="q", delay=86400)
    assert await jobs.pending() == 0
    assert (await jobs.counts()).get("queued") == 1


async def test_prepare_runs_in_the_enqueue_transaction(jobs, db):
    async def prepare(conn):
        cursor = await conn.execute(
            "INSERT INTO pulls (repo, number) VALUES ('a/b', 7) RETURNING id"
        )
        return {"pull_id": (await cursor.fetchone())[0]}

    await jobs.enqueue("w", "k", {"x": 1}, queue="q", prepare=prepare)
    with pytest.raises(RuntimeError):

        async def broken(conn):
            await conn.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 8)")
            raise RuntimeError("no")

        await jobs.enqueue("w", "k", {}, queue="q", prepare=broken)
    assert [r["number"] for r in await db.fetchall("SELECT number FROM pulls")] == [7]
    assert await job_states(jobs, "w") == ["queued"]


# -- several processes on one Postgres ------------------------------------------------


@pytest.mark.postgres_only("cancellation across processes")
async def test_stop_reaches_a_job_running_in_another_process(jobs, db, database_url):
    """The web process (or any worker) cancels; the worker running the job is told through
    Postgres and cancels its task."""
    other = await make_jobs(db, database_url)  # another process's queue, same database
    started = asyncio.Event()
    cancelled = []

    async def work(job):
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(job.id)
            raise

    other.handlers["review"] = work
    other.start({"q": 1})
    try:
        job_id = await jobs.enqueue("review", "review:9", {}, queue="q")
        await asyncio.wait_for(started.wait(), 10)
        assert await jobs.cancel("review:9") == 1
        await wait_for(lambda: cancelled == [job_id], timeout=10)

        async def aborted():
            return await job_states(jobs, "review") == ["cancelled"]

        await wait_for(aborted)
    finally:
        await other.stop()
        await other.close()


@pytest.mark.postgres_only("a crashed worker process")
async def test_jobs_of_a_dead_worker_run_again_elsewhere_with_the_attempt_counted(
    jobs, db, database_url
):
    """A worker took a job and died (no more heartbeats): a survivor runs it again."""
    from bot.queue.postgres import PgJobs

    dead = await make_jobs(db, database_url)
    job_id = await jobs.enqueue("w", "pr-1", {}, queue="q", max_attempts=2)
    worker_id = await dead.app.job_manager.register_worker()
    taken = await dead.app.job_manager.fetch_job(["q"], worker_id)
    assert taken is not None and taken.id == job_id
    await dead.close()  # killed: the job stays 'doing' under a worker that went silent
    await db.execute(
        "UPDATE procrastinate_workers SET last_heartbeat = ? WHERE id = ?",
        (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5), worker_id),
    )
    ran = []

    async def work(job):
        ran.append(job.attempts)

    survivor = PgJobs(db, database_url, stalled_after=1.0)
    await survivor.open()
    survivor.handlers["w"] = work
    try:
        assert await survivor.recover() == 1
        survivor.start({"q": 1})

        async def done():
            return await job_states(survivor, "w") == ["done"]

        await wait_for(done)
        assert ran == [2]  # run once more, the lost attempt counted
    finally:
        await survivor.stop()
        await survivor.close()


@pytest.mark.postgres_only("a crashed worker process")
async def test_a_job_whose_worker_died_at_its_last_attempt_fails_and_says_so(
    jobs, db, database_url
):
    dead = await make_jobs(db, database_url)
    await jobs.enqueue("w", "pr-1", {}, queue="q", max_attempts=1)
    worker_id = await dead.app.job_manager.register_worker()
    assert await dead.app.job_manager.fetch_job(["q"], worker_id) is not None
    await dead.close()
    await db.execute(
        "UPDATE procrastinate_workers SET last_heartbeat = ? WHERE id = ?",
        (dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5), worker_id),
    )
    reasons = []

    async def report(job, reason):
        reasons.append(reason)

    jobs.on_gave_up["w"] = report
    assert await jobs.recover() == 0
    assert await job_states(jobs, "w") == ["failed"]
    assert reasons == ["the process stopped while this job ran (1 of 1 attempts)"]
