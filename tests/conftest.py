"""Shared fixtures: the GitHub stand-in, settings, a signed-delivery helper, and the two
storage backends (modules marked `backends` run every test on SQLite and on Postgres)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bot.config import Secret, Settings
from bot.standin.github import GitHubStandin
from bot.standin.openapi import OpenAPIValidator
from bot.texts import strict_templates
from tests import deliveries
from tests.models import (  # noqa: F401 - shared fixtures
    anthropic_standin,
    chat_standin,
    openai_standin,
)

WEBHOOK_SECRET = "test-webhook-secret-123"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): a worker per core, at most four. Each worker starts
    its own Postgres cluster and stand-ins; past four the machine, not the suite, is the
    limit."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


def pytest_configure(config: pytest.Config) -> None:
    """Every template the suite renders reads only values it was given (production renders
    a missing one empty and logs it)."""
    strict_templates(True)


@pytest.fixture
async def github():
    standin = GitHubStandin(
        validator=OpenAPIValidator.from_file(deliveries.OPENAPI),
        graphql_schema=deliveries.GRAPHQL_SCHEMA,
    )
    await standin.start()
    yield standin
    await standin.stop()


BACKENDS = ("sqlite", "postgres")
TEMPLATE = "cockpit_template"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `backends` (or in a marked module) run once per storage backend."""
    if metafunc.definition.get_closest_marker("backends") and "backend" in metafunc.fixturenames:
        chosen = [
            name
            for name in BACKENDS
            if not metafunc.definition.get_closest_marker(f"{BACKENDS[name == 'sqlite']}_only")
        ]
        metafunc.parametrize("backend", chosen, indirect=True)


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway Postgres for the session, with a template database holding the schema
    (each test gets a copy). No server here: the Postgres tests skip, saying why, except
    in CI (CI=true), where that is an error."""
    import psycopg

    from tests.pgserver import PgCluster, Unavailable

    cluster = PgCluster()
    try:
        cluster.start()
        url = cluster.create_database()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _prepare_template(url)).result()
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE {url.rsplit('/', 1)[1]} RENAME TO {TEMPLATE}")
    except Unavailable as exc:
        cluster.stop()
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs Postgres for the Postgres half of the suite: {exc}")
        pytest.skip(f"Postgres tests skipped: no server could be started here ({exc})")
    yield cluster
    cluster.stop()


async def _prepare_template(url: str) -> None:
    from bot.records.postgres import PgDatabase

    db = await PgDatabase.open(url)
    await db.migrate()
    await db.close()


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend under test: SQLite unless the test is marked `backends`."""
    return getattr(request, "param", "sqlite")


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh Postgres database for this test (None on SQLite)."""
    if backend != "postgres":
        return None
    return request.getfixturevalue("pg_cluster").create_database(TEMPLATE)


@pytest.fixture
def settings(tmp_path: Path, github: GitHubStandin, database_url: str | None) -> Settings:
    found = github.settings(tmp_path / "data", WEBHOOK_SECRET)
    if database_url is not None:
        found = dataclasses.replace(found, database_url=Secret(database_url))
    return found


@pytest.fixture
async def db(tmp_path: Path, database_url: str | None):
    """The SqliteDatabase of the backend under test, schema applied."""
    from bot.records.sqlite import SqliteDatabase

    if database_url is not None:
        from bot.records.postgres import PgDatabase

        database = await PgDatabase.open(database_url)
    else:
        database = await SqliteDatabase.open(tmp_path / "q.sqlite3")
    yield database
    await database.close()


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
