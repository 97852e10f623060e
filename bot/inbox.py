"""Durable inbox: deliveries and their jobs committed before the ack, many per commit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from bot.commits import Commits
from bot.delivery import Delivery
from bot.queue import EVENTS, JobQueue, NewJob, failure

log = logging.getLogger(__name__)


class InboxUnavailable(RuntimeError):
    """The delivery was not committed (the server answers 503; it can be redelivered)."""


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
        """Finish the commits under way (their requests get answers), then close."""
        self._closing = True
        if self._committing is not None:
            with contextlib.suppress(Exception):
                await self._committing
        await self.commits.stop()

    @property
    def alive(self) -> bool:
        return self.commits.open and not self._failing

    async def recover(self) -> bool:
        """After a failed commit: alive again once a probe works, without waiting for a delivery."""
        if self.commits.open and not self._closing and await self.commits.probe():
            self._failing = False
        return self.alive

    async def store(self, delivery: Delivery) -> bool:
        """True if the delivery is new, False if this id was stored before."""
        if not self.commits.open or self._closing:
            raise InboxUnavailable("inbox is not open")
        job = self.jobs.row(
            NewJob("delivery", delivery.key, {"delivery_id": delivery.id}, EVENTS, max_attempts=5)
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
                except Exception as exc:  # whatever it was, the batch is not stored: 503s
                    self._failing = True
                    reason = failure(exc)
                    log.error("inbox commit failed", extra={"fields": {"reason": reason}})
                    for _, _, future in batch:
                        if not future.done():
                            future.set_exception(InboxUnavailable(f"inbox commit failed: {reason}"))
                    continue
                self._failing = False
                for (_, _, future), new in zip(batch, stored, strict=True):
                    if not future.done():  # a request that went away still counts as stored
                        future.set_result(new)
                if any(stored):
                    self.jobs.wake(EVENTS)
        finally:
            self._committing = None
