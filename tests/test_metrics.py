"""`/metrics` as an operator exposes it: a bearer token when one is set, a scrape whose work does
not grow with the history, statements stopped at their deadline, and review gauges that stay
what a count from scratch says (on both backends)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
from collections.abc import AsyncIterator

import aiohttp
import psycopg
import pytest

from bot.backend import open_database
from bot.config import ConfigError, Secret, load_settings
from bot.records import ledger, review_state, schema
from bot.records.database import Database, Interrupted
from bot.records.postgres import (
    PROCRASTINATE_VERSIONS,
    PgDatabase,
    procrastinate_migrations,
    step_ddl,
)
from bot.records.reviews import update_review
from bot.records.sqlite import SqliteDatabase
from bot.records.stats import model_figures, totals
from bot.server import CONTEXT, HEALTH_SECONDS, RECOUNT_PER_SCRAPE, make_app, next_recount
from handlers import router
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.schema_steps import apply_sqlite_step
from tests.serverproc import ServerProcess
from tests.test_stats import History, entries, finding

pytestmark = pytest.mark.backends

TOKEN = "metrics-token-5f2c9a81d04e"
# Never ends by itself on either backend (a recursive count with no bound).
FOREVER = (
    "WITH RECURSIVE n(i) AS (SELECT CAST(1 AS BIGINT) UNION ALL SELECT i + 1 FROM n)"
    " SELECT COUNT(*) FROM n"
)


@pytest.fixture
def pg_cluster_if_postgres(backend, request) -> str | None:
    """An empty Postgres database (None on SQLite)."""
    if backend != "postgres":
        return None
    return request.getfixturevalue("pg_cluster").create_database()


# -- the token ---------------------------------------------------------------------------------


@pytest.mark.sqlite_only("the token is the server's, whatever the database")
async def test_a_set_token_is_needed_to_scrape_and_never_logged(tmp_path, github, backend):
    env = {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "GITHUB_APP_SLUG": github.slug,
        "COCKPIT_METRICS_TOKEN": TOKEN,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",  # the reviewer's (never called)
    }
    log = tmp_path / "serve.log"
    server = ServerProcess(env, tmp_path / "data", log)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            for headers in (
                {},
                {"Authorization": "Bearer wrong-token-0000000000"},
                {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": f"Basic {TOKEN}"},
                {"Authorization": TOKEN},
            ):
                async with session.get(f"{server.url}/metrics", headers=headers) as response:
                    assert response.status == 401, headers
                    assert response.headers["WWW-Authenticate"].startswith("Bearer")
                    assert "cockpit_jobs" not in await response.text()
            good = {"Authorization": f"Bearer {TOKEN}"}
            async with session.get(f"{server.url}/metrics", headers=good) as response:
                assert response.status == 200
                assert "cockpit_jobs{" in await response.text()
            async with session.get(f"{server.url}/healthz") as response:
                assert response.status == 200  # probes need no token
    finally:
        server.terminate()
    lines = log.read_text().splitlines()
    assert lines  # the server did log
    assert not [line for line in lines if TOKEN in line]


@pytest.mark.parametrize("value", ["short", "sixteen chars\x00!", "n\u00f6t-ascii-but-long-enough"])
def test_a_token_too_short_or_unprintable_is_refused_naming_only_the_variable(value):
    with pytest.raises(ConfigError) as caught:
        load_settings({"COCKPIT_METRICS_TOKEN": value}, github=False)
    assert caught.value.variable == "COCKPIT_METRICS_TOKEN"
    assert value not in str(caught.value)


def test_the_token_is_a_secret():
    settings = load_settings({"COCKPIT_METRICS_TOKEN": TOKEN}, github=False)
    assert TOKEN in settings.secrets()  # redacted from every log line
    assert TOKEN not in repr(settings)


# -- what a scrape costs -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def opened(settings) -> AsyncIterator[Database]:
    db = await open_database(settings)
    try:
        yield db
    finally:
        await db.close()


_NUMBERS = (
    "WITH RECURSIVE n(i) AS (SELECT CAST(? AS INTEGER) UNION ALL SELECT i + 1 FROM n"
    " WHERE i < ?) SELECT i FROM n"
)
_BATCH = "SELECT id FROM pulls WHERE number BETWEEN ? AND ?"
_KS = "(SELECT 1 AS k UNION ALL SELECT 2 UNION ALL SELECT 3) ks"
# PRs `first`..`last` (the arguments of each statement) of octo/widgets, each with a published
# review by claude-x: its primary session, three findings (kept, dropped by a person,
# refuted), two runs at $0.25, and a ledger in which a push fixed F1. Written set by set, as a
# long history would be.
HISTORY = (
    "INSERT INTO pulls (installation_id, repo, number, state, updated_at)"
    f" SELECT 1, 'octo/widgets', i, 'open', 0 FROM ({_NUMBERS}) numbers",
    "INSERT INTO reviews (pull_id, head_sha, state, provider, created_at, updated_at)"
    f" SELECT id, 'a', 'posted', 'claude', 0, 0 FROM pulls WHERE id IN ({_BATCH})",
    "INSERT INTO sessions (pull_id, review_id, provider, model, created_at, updated_at)"
    f" SELECT pull_id, id, 'claude', 'claude-x', 0, 0 FROM reviews WHERE pull_id IN ({_BATCH})",
    "INSERT INTO findings (review_id, ordinal, path, severity, title, state, checked_by,"
    " verify_status) SELECT r.id, k, 'x.py', 'major', 't',"
    " CASE k WHEN 2 THEN 'dropped' ELSE 'kept' END, CASE k WHEN 2 THEN 'human' END,"
    f" CASE k WHEN 3 THEN 'refuted' END FROM reviews r CROSS JOIN {_KS}"
    f" WHERE r.pull_id IN ({_BATCH})",
    "INSERT INTO runs (kind, session_id, review_id, provider, model, status, cost_usd,"
    " started_at) SELECT 'review', s.id, s.review_id, 'claude', 'claude-x', 'ok', 0.25, 0"
    f" FROM sessions s CROSS JOIN {_KS} WHERE k < 3 AND s.pull_id IN ({_BATCH})",
    "INSERT INTO ledger (pull_id, ordinal, fingerprint, path, code_key, title_key,"
    " first_review_id, fixed_in, updated_at) SELECT r.pull_id, k, 'fp', 'x.py', '', 't', r.id,"
    f" CASE k WHEN 1 THEN 'b' END, 0 FROM reviews r CROSS JOIN {_KS}"
    f" WHERE r.pull_id IN ({_BATCH})",
)


async def add_history(db: Database, first: int, last: int) -> None:
    async with db.transaction() as conn:
        for sql in HISTORY:
            await conn.execute(sql, (first, last))


def reviews_shown(text: str) -> int:
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("cockpit_reviews{")
    )


async def scrape_until_counted(settings, aiohttp_client, reviews: int) -> None:
    """Scrape as Prometheus would until the gauges count every review and every change is
    counted (each scrape counts a bounded number of them)."""
    client = await aiohttp_client(make_app(settings, router, role="web"))
    db = client.app[CONTEXT].db

    async def counted() -> bool:
        text = await (await client.get("/metrics")).text()
        left = (await db.fetchone("SELECT COUNT(*) FROM figures_stale"))[0]
        return reviews_shown(text) == reviews and left == 0

    await wait_for(counted, timeout=120)
    await client.close()


async def pg_rows_read(url: str) -> int:
    """Rows Postgres read from the review tables so far, by every backend that has ended
    (a backend's counts reach the statistics by the time it leaves pg_stat_activity)."""

    async def quiet() -> bool:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid != pg_backend_pid()"
            )
            return (await cursor.fetchone())[0] == 0

    await wait_for(quiet, timeout=30)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT COALESCE(SUM(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)"
            " FROM pg_stat_user_tables WHERE relname IN ('pulls', 'reviews', 'findings',"
            " 'sessions', 'runs', 'run_usage', 'ledger', 'review_figures', 'figure_totals',"
            " 'figures_stale')"
        )
        return int((await cursor.fetchone())[0])


async def one_scrape_cost(settings, aiohttp_client, backend, database_url, reviews) -> int:
    """A person drops a finding, then one scrape: SQLite's virtual-machine steps for it, or
    the rows Postgres read for it (with the server's start and stop, the same for any size)."""
    async with opened(settings) as db:
        await db.execute(
            "UPDATE findings SET state = 'dropped', checked_by = 'human' WHERE ordinal = 1"
            " AND review_id = (SELECT MIN(id) FROM reviews)"
        )
    before = await pg_rows_read(database_url) if backend == "postgres" else 0
    client = await aiohttp_client(make_app(settings, router, role="web"))
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    if backend == "sqlite":
        await client.app[CONTEXT].db.conn.set_progress_handler(step, 10)
    text = await (await client.get("/metrics")).text()
    if backend == "sqlite":
        await client.app[CONTEXT].db.conn.set_progress_handler(None, 10)
    await client.close()
    assert reviews_shown(text) == reviews
    assert 'cockpit_review_findings_dropped_by_people{model="claude-x",provider="claude"}' in text
    if backend == "postgres":
        return await pg_rows_read(database_url) - before
    return steps[0]


async def test_a_scrape_does_the_same_work_whatever_the_history(
    settings, aiohttp_client, backend, database_url
):
    if database_url is not None:
        # The planner reads a few hundred rows faster than it looks them up; on a history
        # of this size it scans. Told not to, it uses an index wherever there is one, as it
        # does on a long history: rows read then say what the queries need, not what it chose.
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute(
                f"ALTER DATABASE {database_url.rsplit('/', 1)[1]} SET enable_seqscan = off"
            )
    costs = []
    for first, last in ((1, 100), (101, 1000)):  # 100 reviews, then ten times as many
        async with opened(settings) as db:
            await add_history(db, first, last)
        await scrape_until_counted(settings, aiohttp_client, last)
        costs.append(await one_scrape_cost(settings, aiohttp_client, backend, database_url, last))
    small, large = costs
    assert small > 0
    assert large <= small * 1.5, costs  # it was ~100 times as much, growing with its square


# -- deadlines -----------------------------------------------------------------------------------


async def test_a_statement_past_its_deadline_is_stopped_and_the_next_one_runs(db, backend):
    async def forever() -> None:
        async with db.transaction(timeout=0.3) as conn:
            await conn.execute(FOREVER)

    slow = asyncio.create_task(forever())
    behind = asyncio.create_task(db.fetchone("SELECT 1"))  # SQLite: queued behind it
    with pytest.raises(Interrupted):
        await slow
    assert tuple(await behind) == (1,)
    async with db.transaction(timeout=5) as conn:  # the connection is fine afterwards
        await conn.execute("INSERT INTO notices (key, sent_at) VALUES ('after', 1)")
    assert (await db.fetchone("SELECT COUNT(*) FROM notices"))[0] == 1


async def test_a_caller_that_stops_waiting_stops_the_statement(db, backend, database_url):
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):  # /metrics' bound on its answer works this way
            async with db.transaction(timeout=60) as conn:
                await conn.execute(FOREVER)
    assert tuple(await db.fetchone("SELECT 1")) == (1,)  # SQLite: not behind it any more
    if database_url is not None:

        async def stopped() -> bool:
            async with await psycopg.AsyncConnection.connect(database_url) as conn:
                cursor = await conn.execute(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE state = 'active'"
                    " AND query LIKE 'WITH RECURSIVE%%'"
                )
                return (await cursor.fetchone())[0] == 0

        await wait_for(stopped, timeout=10)


# -- the kept sums -------------------------------------------------------------------------------


def shown(figures) -> list[dict]:
    return [{**dataclasses.asdict(f), "usd": f.usd and round(f.usd, 9)} for f in figures]


async def test_the_kept_sums_are_what_a_count_from_scratch_says_after_every_change(db, backend):
    h = History(db)

    async def same() -> None:
        kept = await totals(db, recount=10**6, timeout=None)
        assert shown(kept) == shown(await model_figures(db))

    widgets = await h.pull("octo/widgets", 1, "a")
    first = [finding(1), finding(2), finding(3), finding(4, verify_status="refuted")]
    r1 = await h.draft(
        widgets, "a", list(enumerate(first, 1)), provider="claude", model="claude-x", usd=[0.3]
    )
    await same()
    assert await review_state.drop_findings(db, r1, (2,), "a style choice", by="maint")
    await same()
    kept = [(n, first[n - 1]) for n in (1, 4)]
    assert await review_state.begin_revision(db, r1, kept, [3], by="claude", texts={"summary": "s"})
    await same()
    assert await review_state.end_revision(db, r1)
    await h.publish(r1, [1])
    await same()
    async with db.transaction() as conn:
        await ledger.write(conn, entries(widgets, r1, "a", range(1, 5)))
    r2 = await h.draft(
        widgets,
        "b",
        [(5, finding(5))],
        provider="codex",
        model="gpt-y",
        usd=[None, 0.1],
        writes=ledger.LedgerWrites(widgets, 0, "b" * 40, fixed=(1,)),
    )
    await same()
    assert [(f.model, f.fixed_after_publishing) for f in await model_figures(db)] == [
        ("claude-x", 1),
        ("gpt-y", 0),
    ]
    await h.publish(r2, [5])
    await same()
    await update_review(db, r2, created_at=0.0)  # what `--since` reads
    await same()


# -- an upgrade ----------------------------------------------------------------------------------


def at_step_4(settings, database_url: str | None) -> None:
    """The database as the release before the review figures left it (steps 1 to 4)."""
    steps = schema.STEPS[:4]
    assert [step.version for step in steps] == [1, 2, 3, 4]
    if database_url is None:
        settings.db_path.parent.mkdir(parents=True)
        with sqlite3.connect(settings.db_path) as conn:
            conn.executescript(schema.VERSIONS)
            for step in steps:
                apply_sqlite_step(conn, step)
                conn.execute(
                    "INSERT INTO schema_versions VALUES (?, ?, 0)", (step.version, step.name)
                )
        return
    from procrastinate.schema import SchemaManager

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(schema.VERSIONS)
        conn.execute(PROCRASTINATE_VERSIONS)
        for step in steps:
            for statement in step_ddl(step):
                conn.execute(statement.sql)
            conn.execute(
                "INSERT INTO schema_versions VALUES (%s, %s, 0)", (step.version, step.name)
            )
        conn.execute(SchemaManager.get_schema())
        for path in procrastinate_migrations():
            conn.execute("INSERT INTO procrastinate_migrations VALUES (%s, 0)", (path.name,))


async def test_an_upgraded_database_counts_the_reviews_it_already_had(
    settings, aiohttp_client, backend, pg_cluster_if_postgres
):
    url = pg_cluster_if_postgres
    if url is not None:
        settings = dataclasses.replace(settings, database_url=Secret(url))
    at_step_4(settings, url)
    if url is None:
        with sqlite3.connect(settings.db_path) as conn:  # written by the release before
            for sql in HISTORY:
                conn.execute(sql, (1, 30))
        db: Database = await SqliteDatabase.open(settings.db_path)  # applies the figures step (6)
    else:
        db = await PgDatabase.open(url)
        await add_history(db, 1, 30)
    try:
        await db.migrate()  # `cockpit migrate` (SQLite: again, nothing new)
        assert await db.schema_version() == schema.SCHEMA_VERSION
        before = await model_figures(db)
    finally:
        await db.close()
    assert [(f.model, f.reviews, f.published) for f in before] == [("claude-x", 30, 60)]
    client = await aiohttp_client(make_app(settings, router))  # its workers count them

    async def counted() -> bool:
        return reviews_shown(await (await client.get("/metrics")).text()) == 30

    await wait_for(counted, timeout=60)
    text = await (await client.get("/metrics")).text()
    assert 'cockpit_review_findings_published{model="claude-x",provider="claude"} 60.0' in text
    assert 'cockpit_review_cost_usd{model="claude-x",provider="claude"} 15.0' in text
    db = client.app[CONTEXT].db
    assert await totals(db, recount=0, timeout=None) == before


# -- a scrape counts what fits its deadline -------------------------------------------------


@pytest.mark.parametrize(
    ("chunk", "seconds", "then"),
    [
        (200, None, 100),  # stopped at the deadline: half
        (1, None, 0),  # down to none: the sums are read as they stand
        (0, None, 0),
        (0, 0.1, 1),  # in time with none: one again
        (0, 1.0, 0),  # reading the sums alone takes half the deadline: none still
        (100, 0.1, 125),  # in time: a quarter more
        (4, 0.01, 5),  # one at least
        (200, 0.1, 200),  # never past RECOUNT_PER_SCRAPE
        (100, 1.5, 60),  # in time, but only 60 fit in half the deadline at this pace
        (1, 1.7, 1),
    ],
)
def test_the_next_scrape_counts_what_the_last_ones_pace_fits(chunk, seconds, then):
    assert next_recount(chunk, seconds) == then


@pytest.mark.parametrize("base", [0.0, 0.5, 1.5])
@pytest.mark.parametrize("per_change", [0.0001, 0.002, 0.01, 0.05, 0.5, 2.0])
def test_scrapes_stopped_at_their_deadline_count_less_until_every_scrape_fits(base, per_change):
    """Before: a chunk of 200 changes that took longer than the deadline was stopped and
    rolled back at every scrape, and the gauges stayed missing until the daily maintenance.
    Here a scrape takes `base` seconds, and `per_change` more for each change it counts."""
    chunk, stopped = RECOUNT_PER_SCRAPE, []
    for _ in range(60):
        seconds = base + per_change * chunk
        stopped.append(seconds > HEALTH_SECONDS)
        chunk = next_recount(chunk, None if stopped[-1] else seconds)
    if base + per_change > HEALTH_SECONDS:  # not even one change fits: every other scrape
        assert sum(stopped[10:]) <= len(stopped[10:]) / 2
        return
    assert not any(stopped[10:]), stopped
    if base + per_change <= HEALTH_SECONDS / 2:
        assert chunk >= 1  # changes are still counted at every scrape
