"""gidgethub routers combined into one `router`, and a stored delivery routed to them."""

from __future__ import annotations

import logging
import time
import zlib
from typing import TYPE_CHECKING

import orjson
from gidgethub import routing, sansio

from bot.logs import log_context
from bot.records import deliveries
from bot.records.types import Job, StoredDelivery
from bot.records.vocab import DeliveryStatus
from handlers import comments, installation, pull_request

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

router = routing.Router(pull_request.router, comments.router, installation.router)


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
    """Once; the body is parsed here, and only here."""
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
