"""Durable inbox: a verified delivery and its processing job are committed before the ack,
and later routed to the handlers once.

Requests that arrive while a commit runs wait for the next one (group commit): one fsync
acknowledges many deliveries. The commit runs on a worker thread with its own connection, so
the event loop keeps answering while SQLite and zlib work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import msgspec
import orjson
from gidgethub import routing, sansio

from bot.logs import log_context
from bot.queue import EVENTS, JobQueue
from bot.records import deliveries
from bot.records.sqlite import BUSY_TIMEOUT_MS
from bot.records.types import Job, StoredDelivery
from bot.records.vocab import DeliveryStatus
from bot.texts import PEOPLE, say

if TYPE_CHECKING:
    from bot.context import Context
    from bot.queue.postgres import PgJobs
    from bot.records.postgres import PgDatabase

log = logging.getLogger(__name__)

MAX_ID = 2**63 - 1
# Postgres: a commit's statements, and the whole commit with its wait for a connection.
PG_STATEMENT_SECONDS = 4
PG_COMMIT_SECONDS = 7.0


class MalformedBody(ValueError):
    """The body is not a UTF-8 JSON object of GitHub's shape."""


class InboxUnavailable(RuntimeError):
    """The delivery was not committed (the server answers 503; it can be redelivered)."""


# GitHub's ids and numbers are positive 64-bit integers (SQLite's INTEGER).
Id = Annotated[int, msgspec.Meta(ge=0, le=MAX_ID)]


class _Id(msgspec.Struct):
    id: Id | None = None


class _Repository(msgspec.Struct):
    full_name: str | None = None


class _Numbered(msgspec.Struct):
    number: Id | None = None


class _Envelope(msgspec.Struct):
    """The fields the inbox needs: decoding validates the whole document but builds only these."""

    action: str | None = None
    installation: _Id | None = None
    repository: _Repository | None = None
    pull_request: _Numbered | None = None
    issue: _Numbered | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)


@dataclass(frozen=True)
class Delivery:
    id: str
    event: str
    body: bytes
    action: str | None = None
    installation_id: int | None = None
    repo: str | None = None
    pr_number: int | None = None

    @classmethod
    def from_body(cls, delivery_id: str, event: str, body: bytes) -> Delivery:
        """Check the body is a UTF-8 JSON object and read its envelope; MalformedBody if not."""
        try:
            body.decode("utf-8")  # JSON is UTF-8 (RFC 8259), also in strings nobody reads
            envelope = _ENVELOPE.decode(body)
        except UnicodeDecodeError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="utf8")) from None
        except RecursionError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="deep")) from None
        except msgspec.ValidationError as exc:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="shape", error=exc)) from None
        except msgspec.DecodeError:
            raise MalformedBody(say(PEOPLE, "malformed_body", why="json")) from None
        holders = (envelope.pull_request, envelope.issue)
        number = next((h.number for h in holders if h and h.number is not None), None)
        return cls(
            delivery_id,
            event,
            body,
            envelope.action,
            envelope.installation.id if envelope.installation else None,
            envelope.repository.full_name if envelope.repository else None,
            number,
        )

    @property
    def key(self) -> str:
        """Deliveries about one PR are processed one at a time, in arrival order."""
        if self.repo and self.pr_number is not None:
            return f"events:{self.repo}#{self.pr_number}"
        return f"delivery:{self.id}"


def _rows(batch: list[tuple[Delivery, Any]], now: float) -> tuple[dict[str, tuple], dict]:
    """The batch's deliveries as rows (compressed) and their jobs, by id: a repeat within one
    batch is the same delivery, its first request's."""
    rows: dict[str, tuple] = {}
    routes: dict[str, Any] = {}
    for d, job in batch:
        if d.id not in rows:
            rows[d.id] = (d.id, d.event, d.action, d.installation_id, d.repo,
                          zlib.compress(d.body, 1), now)  # fmt: skip
            routes[d.id] = job
    return rows, routes


def _stored(batch: list[tuple[Delivery, Any]], fresh: set[str]) -> list[bool]:
    """True for each request whose delivery was stored now (a repeat within one batch is
    stored once, for its first request)."""
    stored, fresh = [], set(fresh)
    for d, _ in batch:
        stored.append(d.id in fresh)
        fresh.discard(d.id)
    return stored


def commit(conn: sqlite3.Connection, batch: list[tuple[Delivery, tuple]]) -> list[bool]:
    """SQLite, on a worker thread (the event loop keeps answering while zlib and SQLite work):
    each new delivery stored with its job row in one transaction; True where it was new."""
    return _stored(batch, deliveries.store_new(conn, *_rows(batch, time.time())))


class Commits(Protocol):
    """How a backend commits a batch of deliveries with their jobs (`open_backend` gives the
    configured one)."""

    @property
    def open(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        """Store each new delivery with its job in one transaction; True where it was new."""
        ...

    async def probe(self) -> bool:
        """Whether a commit could go through now."""
        ...


class SqliteCommits:
    """Group commits on the inbox's own sqlite3 connection, on a worker thread."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None

    @property
    def open(self) -> bool:
        return self._conn is not None

    async def start(self) -> None:
        self._conn = await asyncio.to_thread(deliveries.connect, self.path, self.busy_timeout_ms)

    async def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.to_thread(conn.close)

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        if self._conn is None:
            raise sqlite3.OperationalError("inbox is closed")
        return await asyncio.to_thread(commit, self._conn, batch)

    async def probe(self) -> bool:
        """Whether a commit could take the write lock now."""
        if self._conn is None:
            return False
        try:
            await asyncio.to_thread(deliveries.probe, self._conn)
        except sqlite3.Error:
            return False
        return True


class PgCommits:
    """Group commits in one Postgres transaction: the deliveries (a repeated id is skipped by
    its primary key, also when another web process stored it) and their procrastinate jobs,
    deferred on the same connection, so both commit before the ack or neither does."""

    def __init__(self, db: PgDatabase, jobs: PgJobs) -> None:
        self.db = db
        self.jobs = jobs
        self.open = False

    async def start(self) -> None:
        self.open = True

    async def stop(self) -> None:
        self.open = False

    async def probe(self) -> bool:
        return self.open and await self.db.ping()

    async def commit(self, batch: list[tuple[Delivery, Any]]) -> list[bool]:
        """Bounded, so a delivery gets its 503 well within GitHub's 10 s when Postgres is
        away or a lock holds the tables (an acknowledged delivery is always committed)."""
        try:
            async with asyncio.timeout(PG_COMMIT_SECONDS):
                rows, routes = _rows(batch, time.time())
                async with self.db.transaction() as conn:
                    fresh = await deliveries.insert_new(conn, rows, PG_STATEMENT_SECONDS)
                    await self.jobs.insert_in(conn, [routes[i] for i in rows if i in fresh])
        except TimeoutError:
            raise OSError(f"the commit took over {PG_COMMIT_SECONDS:g} s") from None
        except (sqlite3.Error, OSError):
            raise
        except Exception as exc:  # procrastinate's own: the delivery was not stored either way
            raise OSError(f"{exc.__class__.__name__}: {exc}") from exc
        return _stored(batch, fresh)


class Inbox:
    def __init__(self, commits: Commits, jobs: JobQueue) -> None:
        self.commits = commits
        self.jobs = jobs
        self._waiting: list[tuple[Delivery, Any, asyncio.Future[bool]]] = []
        self._committing: asyncio.Task | None = None
        self._failing = False  # the last commit failed (e.g. disk full): unhealthy until one works
        self._closing = False

    async def start(self) -> None:
        self._closing = False
        await self.commits.start()

    async def stop(self) -> None:
        """Finish the commits under way (their requests get answers), then close; requests
        that come after are refused (503: GitHub may redeliver)."""
        self._closing = True
        if self._committing is not None:
            with contextlib.suppress(Exception):
                await self._committing
        await self.commits.stop()

    @property
    def alive(self) -> bool:
        return self.commits.open and not self._failing

    async def recover(self) -> bool:
        """After a failed commit: whether a probe of the commit path works again (then the
        inbox is alive again without waiting for a delivery to get through)."""
        if self.commits.open and not self._closing and await self.commits.probe():
            self._failing = False
        return self.alive

    async def store(self, delivery: Delivery) -> bool:
        """Commit the delivery; True if it is new, False if this id was stored before."""
        if not self.commits.open or self._closing:
            raise InboxUnavailable("inbox is not open")
        job = self.jobs.row(
            "delivery", delivery.key, {"delivery_id": delivery.id}, queue=EVENTS, max_attempts=5
        )
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((delivery, job, future))
        if self._committing is None:
            self._committing = asyncio.create_task(self._commit_waiting(), name="inbox-commit")
        return await future

    async def _commit_waiting(self) -> None:
        try:
            while self._waiting and self.commits.open:
                batch, self._waiting = self._waiting, []
                try:
                    stored = await self.commits.commit([(d, job) for d, job, _ in batch])
                except (sqlite3.Error, OverflowError, OSError) as exc:
                    self._failing = True
                    log.error("inbox commit failed", extra={"fields": {"reason": str(exc)}})
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(InboxUnavailable(f"inbox commit failed: {exc}"))
                    continue
                self._failing = False
                for (_, _, future), new in zip(batch, stored, strict=True):
                    if not future.done():  # a request that went away still counts as stored
                        future.set_result(new)
                if any(stored):
                    self.jobs.wake(EVENTS)
        finally:
            self._committing = None


def ignore_reason(event: sansio.Event, bot_login: str | None) -> str | None:
    """Why an event must not start work (bots, including this app, never trigger anything)."""
    sender = event.data.get("sender")
    if not isinstance(sender, dict):
        return None
    login = sender.get("login")
    if sender.get("type") == "Bot" or (isinstance(login, str) and login.endswith("[bot]")):
        return "sender is a bot"
    if bot_login and login == bot_login:
        return "sender is this app"
    return None


def _pr_number(data: dict) -> int | None:
    for holder in ("pull_request", "issue"):
        number = (data.get(holder) or {}).get("number")
        if isinstance(number, int):
            return number
    return None


async def process_delivery(ctx: Context, router: routing.Router, job: Job) -> None:
    """Route a stored delivery to its handlers once (the body is parsed here, and only here)."""
    stored = await deliveries.queued_delivery(ctx.db, job.payload["delivery_id"])
    if stored is None:
        return
    try:
        data = orjson.loads(zlib.decompress(stored.body))
    except orjson.JSONDecodeError as exc:  # valid at the ack, which reads only the envelope
        await _record(ctx, stored, job, DeliveryStatus.FAILED, f"body cannot be parsed: {exc}")
        log.error("delivery body cannot be parsed", extra={"fields": {"delivery": stored.id}})
        return
    event = sansio.Event(data, event=stored.event, delivery_id=stored.id)
    with log_context(
        delivery=stored.id, gh_event=stored.event, repo=stored.repo, pr=_pr_number(data)
    ):
        reason = ignore_reason(event, ctx.settings.app_slug and f"{ctx.settings.app_slug}[bot]")
        if reason is None and not router.fetch(event):
            reason = "no handler"
        if reason:
            await _record(ctx, stored, job, DeliveryStatus.IGNORED, reason)
            return
        installation_id = stored.installation_id
        gh = ctx.github.installation_api(installation_id) if installation_id else None
        try:
            await router.dispatch(event, gh, ctx=ctx)
        except Exception as exc:
            if job.attempts >= job.max_attempts:
                reason = f"{exc.__class__.__name__}: {exc}"
                await _record(ctx, stored, job, DeliveryStatus.FAILED, reason)
            raise
        await _record(ctx, stored, job, DeliveryStatus.DONE, "processed")
        log.info("delivery processed")


async def delivery_gave_up(ctx: Context, job: Job, reason: str) -> None:
    """A delivery's job failed for good without recording it (the process died each time)."""
    stored = await deliveries.queued_delivery(ctx.db, job.payload["delivery_id"])
    if stored is not None:
        await _record(ctx, stored, job, DeliveryStatus.FAILED, reason)


async def _record(
    ctx: Context, stored: StoredDelivery, job: Job, status: str, outcome: str
) -> None:
    await deliveries.record(ctx.db, stored.id, status, outcome, job.attempts, time.time())
    ctx.metrics.deliveries.labels(event=stored.event, outcome=status).inc()
