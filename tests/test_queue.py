"""The durable job queue: serialisation keys, supersede, retries, recovery."""

from __future__ import annotations

import asyncio

import pytest

from bot import workers
from bot.queue import PermanentError, backoff_seconds
from bot.queue.sqlite import Jobs
from bot.records.sqlite import SqliteDatabase
from tests.conftest import wait_for


@pytest.fixture
async def db(tmp_path):
    database = await SqliteDatabase.open(tmp_path / "q.sqlite3")
    yield database
    await database.close()


async def states(db) -> dict[int, str]:
    return {r["id"]: r["state"] for r in await db.fetchall("SELECT id, state FROM jobs")}


# Per-key order, concurrency up to the pool size and supersede are tested on both backends
# in tests/test_queue_backends.py.


async def test_failures_retry_with_backoff_then_fail(db):
    now = [100.0]
    jobs = Jobs(db, clock=lambda: now[0])
    attempts = []

    async def flaky(job):
        attempts.append(job.attempts)
        raise RuntimeError("boom")

    jobs.handlers["f"] = flaky
    job_id = await jobs.enqueue("f", "k", {}, queue="q", max_attempts=3)
    for expected_attempt in (1, 2, 3):
        job = await jobs.claim("q")
        assert job is not None and job.attempts == expected_attempt
        await jobs._run(job)
        row = await db.fetchone("SELECT state, run_after FROM jobs WHERE id = ?", (job_id,))
        if expected_attempt < 3:
            assert row["state"] == "queued"
            assert row["run_after"] == now[0] + backoff_seconds(expected_attempt)
            assert await jobs.claim("q") is None  # not before its backoff
            now[0] = row["run_after"]
    assert (await states(db))[job_id] == "failed"
    assert attempts == [1, 2, 3]


async def test_a_retrying_job_keeps_its_place_before_later_jobs_of_its_key(db):
    now = [100.0]
    jobs = Jobs(db, clock=lambda: now[0])
    ran = []

    async def work(job):
        ran.append((job.payload["n"], job.attempts))
        if job.payload["n"] == 0 and job.attempts == 1:
            raise RuntimeError("transient")

    jobs.handlers["w"] = work
    for n in range(2):
        await jobs.enqueue("w", "pr-1", {"n": n}, queue="q")
    other = await jobs.enqueue("w", "pr-2", {"n": 9}, queue="q")
    await jobs._run(await jobs.claim("q"))  # job 0 fails: queued again, after its backoff
    job = await jobs.claim("q")
    assert job is not None and job.id == other  # another key is not held up …
    await jobs._run(job)
    assert await jobs.claim("q") is None  # … but job 1 waits behind job 0's retry
    now[0] += backoff_seconds(1)
    for _ in range(2):
        await jobs._run(await jobs.claim("q"))
    assert ran == [(0, 1), (9, 1), (0, 2), (1, 1)]


async def test_jobs_behind_a_busy_key_wait_and_move_up_in_order(db):
    jobs = Jobs(db)
    ids = [await jobs.enqueue("w", "pr-1", {"n": n}, queue="q") for n in range(3)]
    other = await jobs.enqueue("w", "pr-2", {}, queue="q")
    assert await states(db) == {ids[0]: "queued", ids[1]: "waiting", ids[2]: "waiting",
                                other: "queued"}  # fmt: skip
    first = await jobs.claim("q")
    second = await jobs.claim("q")
    assert (first.id, second.id) == (ids[0], other)
    assert await jobs.claim("q") is None  # only heads are claimable
    await jobs._finish(first, "done")
    assert (await states(db))[ids[1]] == "queued"
    await jobs._finish(await jobs.claim("q"), "failed", "boom")  # failing also moves it on
    assert (await states(db))[ids[2]] == "queued"


async def test_superseding_cancels_the_jobs_in_line_and_lets_other_kinds_move_up(db):
    jobs = Jobs(db)
    head = await jobs.enqueue("review", "pr-1", {"n": 0}, queue="q")
    behind = await jobs.enqueue("review", "pr-1", {"n": 1}, queue="q")
    status = await jobs.enqueue("status", "pr-1", {}, queue="q")
    newest = await jobs.enqueue("review", "pr-1", {"n": 2}, queue="q", supersede=True)
    found = await states(db)
    assert (found[head], found[behind]) == ("cancelled", "cancelled")
    assert (found[status], found[newest]) == ("queued", "waiting")
    await jobs._finish(await jobs.claim("q"), "done")
    assert (await states(db))[newest] == "queued"


async def test_an_old_database_gets_its_lines_at_start_up(tmp_path):
    path = tmp_path / "old.sqlite3"
    database = await SqliteDatabase.open(path)
    await database.execute("DROP TRIGGER jobs_wait_behind_key")  # as before 'waiting' existed
    jobs = Jobs(database)
    ids = [await jobs.enqueue("w", "pr-1", {"n": n}, queue="q") for n in range(3)]
    assert set((await states(database)).values()) == {"queued"}
    await database.close()
    database = await SqliteDatabase.open(path)
    try:
        assert list((await states(database)).values()) == ["queued", "waiting", "waiting"]
        assert ids[0] == (await Jobs(database).claim("q")).id
    finally:
        await database.close()


async def test_a_line_left_without_a_head_gets_one_at_start_up(tmp_path):
    path = tmp_path / "headless.sqlite3"
    database = await SqliteDatabase.open(path)
    jobs = Jobs(database)
    ids = [await jobs.enqueue("w", "pr-1", {"n": n}, queue="q") for n in range(2)]
    await database.execute("DROP TRIGGER jobs_next_of_key")  # a line broken by hand
    await database.execute("UPDATE jobs SET state = 'waiting' WHERE id = ?", (ids[0],))
    assert await jobs.claim("q") is None  # stuck: nobody would ever move it up
    await database.close()
    database = await SqliteDatabase.open(path)
    try:
        assert [j for j, s in (await states(database)).items() if s == "queued"] == [ids[0]]
    finally:
        await database.close()


async def test_permanent_errors_are_not_retried(db):
    jobs = Jobs(db)

    async def refuse(job):
        raise PermanentError("bad input")

    jobs.handlers["p"] = refuse
    job_id = await jobs.enqueue("p", "k", {}, queue="q", max_attempts=5)
    await jobs._run(await jobs.claim("q"))
    row = await db.fetchone("SELECT state, error FROM jobs WHERE id = ?", (job_id,))
    assert row["state"] == "failed" and "bad input" in row["error"]


async def test_jobs_left_running_are_requeued_at_start_up(tmp_path):
    db = await SqliteDatabase.open(tmp_path / "r.sqlite3")
    jobs = Jobs(db)
    job_id = await jobs.enqueue("w", "k", {}, queue="q")
    assert (await jobs.claim("q")).id == job_id
    await db.close()  # the process dies with the job running

    db = await SqliteDatabase.open(tmp_path / "r.sqlite3")
    jobs = Jobs(db)
    assert await jobs.recover() == 1
    job = await jobs.claim("q")
    assert job.id == job_id and job.attempts == 2  # the lost attempt still counts
    await db.close()


async def test_expired_lease_of_a_dead_worker_is_reaped(db):
    now = [0.0]
    jobs = Jobs(db, clock=lambda: now[0])
    job_id = await jobs.enqueue("w", "k", {}, queue="q")
    await jobs.claim("q")
    now[0] = 30.0
    assert await jobs.reap_expired_leases() == 0
    now[0] = 61.0
    assert await jobs.reap_expired_leases() == 1
    assert (await states(db))[job_id] == "queued"


async def test_migrate_is_idempotent(tmp_path):
    db = await SqliteDatabase.open(tmp_path / "s.sqlite3")
    await db.execute("INSERT INTO pulls (repo, number) VALUES ('a/b', 1)")
    await db.migrate()
    await db.migrate()
    await db.close()
    db = await SqliteDatabase.open(tmp_path / "s.sqlite3")
    assert (await db.fetchone("SELECT COUNT(*) FROM pulls"))[0] == 1
    await db.close()


async def test_old_history_is_pruned_in_chunks_and_live_work_is_kept(db, monkeypatch):
    monkeypatch.setattr(workers, "PRUNE_CHUNK", 2)  # several chunks with a few rows
    jobs = Jobs(db, clock=lambda: 1000.0)
    for n in range(5):
        job_id = await jobs.enqueue("w", f"k{n}", {}, queue="q")
        await db.execute(
            "UPDATE jobs SET state = 'done', finished_at = 1000 WHERE id = ?", (job_id,)
        )
    live = await jobs.enqueue("w", "live", {}, queue="q")  # queued: never pruned
    for n, (status, received) in enumerate(
        [("done", 1000), ("ignored", 1000), ("failed", 1000), ("queued", 1000), ("done", 9000)]
    ):
        await db.execute(
            "INSERT INTO deliveries (id, event, body, received_at, status)"
            " VALUES (?, 'e', x'', ?, ?)",
            (f"d{n}", received, status),
        )
    assert await workers.prune_history(db, jobs, older_than=5000) == (3, 5)
    kept = {r["id"] for r in await db.fetchall("SELECT id FROM deliveries")}
    assert kept == {"d3", "d4"}  # not yet processed, or recent
    assert list(await states(db)) == [live]


async def test_pending_ignores_jobs_scheduled_for_later(db):
    now = [100.0]
    jobs = Jobs(db, clock=lambda: now[0])
    await jobs.enqueue("maintenance", "maintenance", {}, queue="q", delay=86400)
    assert await jobs.pending() == 0
    now[0] += 86400
    assert await jobs.pending() == 1


async def test_a_job_that_kills_the_process_fails_for_good_at_its_limit(tmp_path):
    path = tmp_path / "poison.sqlite3"
    db = await SqliteDatabase.open(path)
    job_id = await Jobs(db).enqueue("w", "k", {"n": 1}, queue="q", max_attempts=2)
    claimed = []
    for _ in range(2):  # each start claims it, and the job takes the process down
        jobs = Jobs(db)
        await jobs.recover()
        job = await jobs.claim("q")
        claimed.append(job.attempts)
        await db.close()
        db = await SqliteDatabase.open(path)
    reported = []

    async def report(job, reason):
        reported.append((job.id, job.payload, reason))

    jobs = Jobs(db)
    jobs.on_gave_up["w"] = report
    assert await jobs.recover() == 0
    assert await jobs.claim("q") is None  # never a third time
    row = await db.fetchone("SELECT state, attempts, error FROM jobs WHERE id = ?", (job_id,))
    await db.close()
    assert claimed == [1, 2]
    assert (row["state"], row["attempts"]) == ("failed", 2)
    assert "process stopped while this job ran (2 of 2 attempts)" in row["error"]
    reason = "the process stopped while this job ran (2 of 2 attempts)"
    assert reported == [(job_id, {"n": 1}, reason)]


async def test_a_job_at_its_limit_is_never_claimed(db):
    jobs = Jobs(db)
    job_id = await jobs.enqueue("w", "k", {}, queue="q", max_attempts=2)
    await db.execute("UPDATE jobs SET attempts = 2 WHERE id = ?", (job_id,))
    assert await jobs.claim("q") is None


async def test_an_expired_lease_at_its_limit_fails_for_good(db):
    now = [0.0]
    jobs = Jobs(db, clock=lambda: now[0])
    reported = []

    async def report(job, reason):
        reported.append(reason)

    jobs.on_gave_up["w"] = report
    job_id = await jobs.enqueue("w", "k", {}, queue="q", max_attempts=1)
    await jobs.claim("q")
    now[0] = 61.0
    assert await jobs.reap_expired_leases() == 0
    assert (await states(db))[job_id] == "failed" and len(reported) == 1


async def test_a_failure_past_the_limit_is_reported_once(db):
    jobs = Jobs(db)
    reported = []

    async def boom(job):
        raise RuntimeError("boom")

    async def report(job, reason):
        reported.append(reason)

    jobs.handlers["w"] = boom
    jobs.on_gave_up["w"] = report
    await jobs.enqueue("w", "k", {}, queue="q", max_attempts=1)
    await jobs._run(await jobs.claim("q"))
    assert reported == ["RuntimeError: boom"]


async def test_a_stop_lets_running_jobs_finish_within_the_grace_and_requeues_the_rest(db):
    jobs = Jobs(db)
    started, seen_stopping = set(), []

    async def work(job):
        started.add(job.payload["n"])
        try:
            await asyncio.sleep(job.payload["seconds"])
        except asyncio.CancelledError:
            seen_stopping.append(jobs.stopping)
            raise

    jobs.handlers["w"] = work
    quick = await jobs.enqueue("w", "a", {"n": 0, "seconds": 0.2}, queue="q")
    slow = await jobs.enqueue("w", "b", {"n": 1, "seconds": 60}, queue="q")
    jobs.start({"q": 2})
    await wait_for(lambda: started == {0, 1})
    await jobs.stop(grace=1)
    rows = {r["id"]: r for r in await db.fetchall("SELECT * FROM jobs")}
    assert rows[quick]["state"] == "done"
    assert (rows[slow]["state"], rows[slow]["attempts"]) == ("queued", 0)  # not counted
    assert seen_stopping == [True]


async def test_maintenance_interrupted_by_a_crash_is_scheduled_once(db, tmp_path):
    """Killed while it ran: at the next start another start-up run is queued behind it;
    between them, only one run stays scheduled for tomorrow."""
    import functools
    from types import SimpleNamespace

    from bot.worktrees import Mirrors

    async def start() -> Jobs:
        jobs = Jobs(db)
        ctx = SimpleNamespace(db=db, jobs=jobs, mirrors=Mirrors(tmp_path / "data"))
        jobs.handlers["maintenance"] = functools.partial(workers.maintenance, ctx)
        await jobs.every("maintenance", cron="17 3 * * *", seconds=86400, queue="q")
        return jobs

    jobs = await start()
    first = await jobs.claim("q")  # then the process dies while it runs
    jobs = await start()
    assert await jobs.recover() == 1
    ran = []
    for _ in range(2):
        job = await jobs.claim("q")
        ran.append(job.id)
        await jobs._run(job)
    assert ran[0] == first.id
    left = await db.fetchall(
        "SELECT state FROM jobs WHERE key = 'maintenance' AND state IN ('queued', 'waiting')"
    )
    assert [r["state"] for r in left] == ["queued"]
