"""Durable inbox: verified deliveries are committed (with their processing job) before the ack.

Concurrent requests are written in one transaction (group commit), so each acknowledgement
is durable without paying one fsync per delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import orjson
from gidgethub import routing, sansio

from bot.logs import log_context
from bot.queue import Job, Jobs

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

EVENTS_QUEUE = "events"


class MalformedBody(ValueError):
    """The body is not a UTF-8 JSON object."""


class _Id(msgspec.Struct):
    id: int | None = None


class _Repository(msgspec.Struct):
    full_name: str | None = None


class _Numbered(msgspec.Struct):
    number: int | None = None


class _Envelope(msgspec.Struct):
    """The fields the inbox needs. Decoding validates the whole document but builds only
    these: a 14 KB delivery costs ~10 µs instead of ~40 µs for a full parse (and no garbage
    for the collector), which is ~20% more acknowledgements per second."""

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
            raise MalformedBody("body is not UTF-8") from None
        except msgspec.ValidationError:  # an object with odd field types, or not an object
            try:
                payload = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise MalformedBody("body is not JSON") from None
            if not isinstance(payload, dict):
                raise MalformedBody("body is not a JSON object") from None
            return cls.from_payload(delivery_id, event, body, payload)
        except msgspec.DecodeError:
            raise MalformedBody("body is not JSON") from None
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

    @classmethod
    def from_payload(
        cls, delivery_id: str, event: str, body: bytes, payload: dict[str, Any]
    ) -> Delivery:
        """The same fields read leniently from a parsed payload (wrong types count as absent)."""

        def field(holder: Any, name: str, kind: type) -> Any:
            value = holder.get(name) if isinstance(holder, dict) else None
            return value if isinstance(value, kind) else None

        number = next(
            (
                n
                for h in ("pull_request", "issue")
                if (n := field(payload.get(h), "number", int)) is not None
            ),
            None,
        )
        return cls(
            delivery_id,
            event,
            body,
            field(payload, "action", str),
            field(payload.get("installation"), "id", int),
            field(payload.get("repository"), "full_name", str),
            number,
        )

    @property
    def key(self) -> str:
        """Deliveries about one PR are processed one at a time, in arrival order."""
        if self.repo and self.pr_number is not None:
            return f"events:{self.repo}#{self.pr_number}"
        return f"delivery:{self.id}"


class Inbox:
    """Group commit on a dedicated connection: one thread hop per batch, synced at commit.

    The write runs entirely in one executor call (dedupe, inserts, COMMIT with
    `synchronous=FULL`), so a busy event loop does not stretch the commit over many
    round-trips. Bodies are stored zlib-compressed: a commit costs the bytes it syncs.
    """

    def __init__(self, path: Path, jobs: Jobs) -> None:
        self.path = path
        self.jobs = jobs
        self._conn: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inbox")
        self._pending: list[tuple[Delivery, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task | None = None

    async def start(self) -> None:
        self._conn = await self._call(self._connect)
        self._writer = asyncio.create_task(self._write_loop(), name="inbox-writer")

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")  # a 202 survives power loss, not just a crash
        conn.execute("PRAGMA busy_timeout=5000")
        # Checkpoints (copying the WAL into the database file) happen on the main
        # connection, never inside an acknowledgement's commit.
        conn.execute("PRAGMA wal_autocheckpoint=0")
        return conn

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def stop(self) -> None:
        if self._writer:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        for _delivery, future in self._pending:
            if not future.done():
                future.set_exception(RuntimeError("inbox stopped"))
        self._pending.clear()
        if self._conn is not None:
            await self._call(self._conn.close)
        self._executor.shutdown(wait=True)

    @property
    def alive(self) -> bool:
        return self._writer is not None and not self._writer.done()

    async def store(self, delivery: Delivery) -> bool:
        """Commit the delivery; True if it is new, False if this id was stored before."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((delivery, future))
        self._wake.set()
        return await future

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            job_rows = [
                self.jobs.row(
                    "delivery", d.key, {"delivery_id": d.id}, queue=EVENTS_QUEUE, max_attempts=5
                )
                for d, _ in batch
            ]
            try:
                results = await self._call(self._commit, [d for d, _ in batch], job_rows)
            except Exception as exc:
                log.exception("inbox commit failed", extra={"fields": {"batch": len(batch)}})
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), is_new in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(is_new)
            if any(results):
                self.jobs.wake(EVENTS_QUEUE)

    def _commit(self, batch: list[Delivery], job_rows: list[tuple]) -> list[bool]:
        """Runs in the inbox thread: which ids are new, then two bulk inserts, one COMMIT."""
        assert self._conn is not None
        conn = self._conn
        now = time.time()
        ids = list({d.id for d in batch})
        conn.execute("BEGIN IMMEDIATE")
        try:
            seen = {
                row[0]
                for row in conn.execute(
                    f"SELECT id FROM deliveries WHERE id IN ({','.join('?' * len(ids))})", ids
                )
            }
            results, fresh, fresh_jobs = [], [], []
            for delivery, job_row in zip(batch, job_rows, strict=True):
                is_new = delivery.id not in seen
                seen.add(delivery.id)
                results.append(is_new)
                if is_new:
                    fresh.append(delivery)
                    fresh_jobs.append(job_row)
            conn.executemany(
                "INSERT INTO deliveries (id, event, action, installation_id, repo, body,"
                " received_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        d.id,
                        d.event,
                        d.action,
                        d.installation_id,
                        d.repo,
                        zlib.compress(d.body, 1),
                        now,
                    )
                    for d in fresh
                ],
            )
            conn.executemany(self.jobs.INSERT_SQL, fresh_jobs)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return results


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


async def process_delivery(ctx: Context, router: routing.Router, job: Job) -> None:
    delivery_id = job.payload["delivery_id"]
    row = await ctx.db.fetchone(
        "SELECT id, event, body, status FROM deliveries WHERE id = ?", (delivery_id,)
    )
    if row is None or row["status"] != "queued":
        return
    body = zlib.decompress(row["body"])
    event = sansio.Event(orjson.loads(body), event=row["event"], delivery_id=row["id"])
    delivery = Delivery.from_payload(row["id"], row["event"], body, event.data)
    with log_context(
        delivery=delivery.id, gh_event=delivery.event, repo=delivery.repo, pr=delivery.pr_number
    ):
        reason = ignore_reason(event, ctx.settings.app_slug and f"{ctx.settings.app_slug}[bot]")
        if reason is None and not router.fetch(event):
            reason = "no handler"
        if reason:
            await _record(ctx, delivery, job, "ignored", reason)
            return
        gh = (
            ctx.github.installation_api(delivery.installation_id)
            if (delivery.installation_id)
            else None
        )
        try:
            await router.dispatch(event, gh, ctx=ctx)
        except Exception as exc:
            if job.attempts >= job.max_attempts:
                await _record(ctx, delivery, job, "failed", f"{exc.__class__.__name__}: {exc}")
            raise
        await _record(ctx, delivery, job, "done", "processed")
        log.info("delivery processed")


async def _record(ctx: Context, delivery: Delivery, job: Job, status: str, outcome: str) -> None:
    await ctx.db.execute(
        "UPDATE deliveries SET status = ?, outcome = ?, attempts = ?, processed_at = ?"
        " WHERE id = ?",
        (status, outcome[:1000], job.attempts, time.time(), delivery.id),
    )
    ctx.metrics.deliveries.labels(event=delivery.event, outcome=status).inc()
