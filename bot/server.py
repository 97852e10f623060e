"""The aiohttp app: webhook ingress, health and metrics. Built by `make_app`, never at import."""

from __future__ import annotations

import asyncio
import functools
import gc
import hmac
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
import orjson
from aiohttp import web
from gidgethub import routing

from bot.agents.providers import ModelClients
from bot.auth.tokens import UserTokens
from bot.auth.web import SignInRoutes
from bot.backend import open_backend
from bot.config import Secret, Settings
from bot.context import Context
from bot.delivery import Delivery, MalformedBody
from bot.github import GitHubApp
from bot.inbox import Inbox, InboxUnavailable
from bot.logs import log_context
from bot.metrics import Metrics
from bot.queue import EVENTS, REVIEWS, JobQueue
from bot.records.database import Database, Interrupted
from bot.records.stats import totals
from bot.records.vocab import JobState
from bot.redaction import environment_secrets, register_all
from bot.stats import gauges, summarise
from bot.texts import PEOPLE, say
from bot.web import add_page
from bot.worktrees import Mirrors, disk

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 25 * 1024 * 1024
EVENT_WORKERS = 4
HEALTH_SECONDS = 1.8  # every health answer comes within 2 s, whatever the database does
# Changes a scrape counts into the review figures at most (a backlog waits for the next
# scrapes and the daily maintenance), so a scrape's work never depends on the history; fewer
# while scrapes run past their deadline (`next_recount`).
RECOUNT_PER_SCRAPE = 200
# What one `cockpit serve` process does: `web` stores deliveries and their jobs, `worker`
# runs jobs, `all` both. Separate roles need a database several processes share (Postgres).
ROLES = ("all", "web", "worker")


def next_recount(chunk: int, seconds: float | None) -> int:
    """How many changes the next scrape counts into the review figures, after one that
    counted `chunk` in `seconds`. None: its deadline stopped it and it was rolled back (the
    same chunk would be stopped at every scrape, the gauges missing until the daily
    maintenance): half as many, down to none (the sums are read as they stand). Else a
    quarter more (one at least), up to RECOUNT_PER_SCRAPE, but no more than what this one's
    pace fits in half the deadline."""
    if seconds is None:
        return chunk // 2
    if chunk == 0:
        return 1 if seconds <= HEALTH_SECONDS / 2 else 0
    more = min(RECOUNT_PER_SCRAPE, chunk + max(1, chunk // 4))
    fits = int(chunk * HEALTH_SECONDS / 2 / seconds) if seconds > 0 else more
    return max(1, min(more, fits))


CONTEXT = web.AppKey("context", Context)
INBOX = web.AppKey("inbox", Inbox)
METRICS = web.AppKey("metrics", Metrics)
ROLE = web.AppKey("role", str)


def signature_matches(body: bytes, header: str, secret: str) -> bool:
    """`X-Hub-Signature-256` check over the exact raw bytes, in constant time (sha256 only)."""
    if not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.digest(secret.encode(), body, "sha256").hex()
    return hmac.compare_digest(header.encode(), expected.encode())


def valid_delivery_id(value: str) -> bool:
    return 0 < len(value) <= 128 and value.isprintable() and value.isascii()


def _reply(status: int, text: str) -> web.Response:
    body = orjson.dumps({"message": text})
    return web.Response(body=body, status=status, content_type="application/json")


def _answer(
    request: web.Request, outcome: str, status: int, event: str = "unknown", why: str = ""
) -> web.Response:
    request.app[METRICS].deliveries.labels(event=event, outcome=outcome).inc()
    return _reply(status, _answer_text(why or outcome))


@functools.cache
def _answer_text(why: str) -> str:
    return say(PEOPLE, "webhook_answer", why=why)


async def webhook(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    if ctx.jobs.stopping:  # a graceful stop began: GitHub redelivers
        return _answer(request, "stopping", 503)
    if request.headers.get("Content-Encoding"):
        # GitHub never compresses deliveries; inflating before the signature check would let
        # anyone make the server hash (and hold) far more than they sent.
        return _answer(request, "encoded", 415)
    too_large = request.content_length is not None and request.content_length > MAX_BODY_BYTES
    try:
        body = b"" if too_large else await request.read()  # aiohttp stops at client_max_size
    except web.HTTPRequestEntityTooLarge:
        too_large = True
    if too_large:
        return _answer(request, "too_large", 413)
    secret = ctx.settings.webhook_secret
    signature = request.headers.get("X-Hub-Signature-256", "")
    if secret is None or not signature_matches(body, signature, secret.reveal()):
        return _answer(request, "bad_signature", 401)
    event = request.headers.get("X-GitHub-Event", "")
    delivery_id = request.headers.get("X-GitHub-Delivery", "")
    if not event or not valid_delivery_id(delivery_id):
        return _answer(request, "bad_request", 400, event or "unknown", why="no_headers")
    try:
        delivery = Delivery.from_body(delivery_id, event, body)
    except MalformedBody:
        return _answer(request, "bad_request", 400, event, why="malformed")
    if event == "ping":
        return _answer(request, "pong", 200, event)
    with log_context(delivery=delivery_id, gh_event=event):
        try:
            is_new = await request.app[INBOX].store(delivery)
        except InboxUnavailable as exc:
            log.error("delivery not stored", extra={"fields": {"reason": str(exc)}})
            return _answer(request, "not_stored", 503, event)
    if not is_new:
        return _answer(request, "duplicate", 200, event)
    return _answer(request, "accepted", 202, event)


@dataclass
class Health:
    db: bool = False
    inbox: bool = False
    workers: bool = False
    stopping: bool = False
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.db and self.inbox and not self.stopping


async def _health(request: web.Request, *, probe: bool = True, counts: bool = False) -> Health:
    """Within HEALTH_SECONDS, whatever the database does. A successful ping lets the inbox
    clear a failed commit by itself (a probe of its own connection), so readiness comes back
    when the database does, with or without traffic."""
    app, jobs = request.app, request.app[CONTEXT].jobs
    health = Health(
        workers=app[ROLE] == "web" or jobs.workers_alive == jobs.workers_total > 0,
        stopping=jobs.stopping,
        inbox=app[ROLE] == "worker",
    )
    if not probe:
        return health
    try:
        async with asyncio.timeout(HEALTH_SECONDS):
            health.db = await app[CONTEXT].db.ping()
            if app[ROLE] != "worker":
                inbox = app[INBOX]
                health.inbox = inbox.alive or (health.db and await inbox.recover())
            if counts and health.db:
                health.counts = await jobs.counts()
    except TimeoutError:
        health.db = health.inbox = False
    except sqlite3.Error:  # the database went away between the ping and the count
        health.db = False
    return health


async def healthz_live(request: web.Request) -> web.Response:
    """The process works (its loops run): a failure here means restart it. A database
    outage is not one: the process waits it out and recovers by itself."""
    ok = (await _health(request, probe=False)).workers
    return web.json_response({"status": "ok" if ok else "dead"}, status=200 if ok else 503)


async def healthz_ready(request: web.Request) -> web.Response:
    health = await _health(request)
    body = {"status": "ready" if health.ready else "not ready", "db": health.db}
    body |= {"inbox": health.inbox, "stopping": health.stopping}
    return web.json_response(body, status=200 if health.ready else 503)


async def healthz(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    health = await _health(request, counts=True)
    healthy = health.ready and health.workers
    reasons = ["stopping"] if health.stopping else []
    space = disk(ctx.settings.data_dir, ctx.settings.min_free_mb)
    if space.low:  # the inbox still accepts; only new reviews wait
        reasons.append(say(PEOPLE, "low_disk", free=space.free_mb, min=space.min_mb))
    counts = health.counts
    body = {
        "status": "unhealthy" if not healthy else "degraded" if reasons else "ok",
        "reasons": reasons,
        "db": health.db,
        "inbox": health.inbox,
        "queue_depth": counts.get(JobState.QUEUED, 0) + counts.get(JobState.WAITING, 0),
        "running": counts.get(JobState.RUNNING, 0),
        "workers": {
            "alive": ctx.jobs.workers_alive,
            "total": ctx.jobs.workers_total,
            "restarts": ctx.jobs.restarts,
        },
        "role": request.app[ROLE],
    }
    return web.json_response(body, status=200 if healthy else 503)


def metrics_allowed(request: web.Request, token: Secret | None) -> bool:
    """No token set: anyone may scrape."""
    if token is None:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    expected = token.reveal().encode()
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected)


async def metrics_view(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    metrics = request.app[METRICS]
    if not metrics_allowed(request, ctx.settings.metrics_token):
        return web.Response(
            status=401,
            text=say(PEOPLE, "metrics_unauthorized"),
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    if await ctx.db.ping():
        metrics.set_job_counts(await ctx.jobs.counts())
        await _review_figures(ctx, metrics)
    return web.Response(body=metrics.render(), content_type="text/plain", charset="utf-8")


async def _review_figures(ctx: Context, metrics: Metrics) -> None:
    """`cockpit stats`' figures of every review so far (their sums, after counting what
    changed since the last scrape); when the database cannot give them in time, they are left
    out, the statement is stopped, the next scrape counts fewer changes (`next_recount`), and
    the rest of /metrics is served."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(HEALTH_SECONDS):
            found = await totals(ctx.db, recount=metrics.recount, timeout=HEALTH_SECONDS)
        metrics.recount = next_recount(metrics.recount, time.monotonic() - started)
        figures = gauges(summarise(found))
    except Exception as exc:
        if isinstance(exc, Interrupted | TimeoutError):
            metrics.recount = next_recount(metrics.recount, None)
        log.warning("review figures for /metrics could not be read", exc_info=True)
        figures = {}
    metrics.set_review_figures(figures)


@web.middleware
async def errors_middleware(request: web.Request, handler: Callable) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception:
        log.exception("request failed", extra={"fields": {"path": request.path}})
        return _reply(500, say(PEOPLE, "webhook_answer", why="internal"))


def make_app(settings: Settings, router: routing.Router, *, role: str = "all") -> web.Application:
    """Databases, sessions and workers start with the app, not here."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}")
    app = web.Application(
        client_max_size=MAX_BODY_BYTES,
        middlewares=[errors_middleware],
        handler_args={"auto_decompress": False},  # nothing is ever inflated (see `webhook`)
    )
    app[METRICS] = Metrics(recount=RECOUNT_PER_SCRAPE)
    app[ROLE] = role
    if role != "worker":
        app.router.add_post("/webhooks/github", webhook)
        SignInRoutes(settings, functools.partial(_sign_in_context, app)).add_to(app)
        add_page(app, lambda: app[CONTEXT])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/healthz/live", healthz_live)
    app.router.add_get("/healthz/ready", healthz_ready)
    app.router.add_get("/metrics", metrics_view)
    app.cleanup_ctx.append(functools.partial(_lifecycle, settings, router))
    return app


def _sign_in_context(app: web.Application) -> tuple[Database, JobQueue, UserTokens]:
    ctx = app[CONTEXT]
    assert ctx.user_tokens is not None
    return ctx.db, ctx.jobs, ctx.user_tokens


async def stop_gracefully(app: web.Application) -> None:
    """SIGTERM: answer 503 to new deliveries (the queue's `stopping`), give running jobs the
    configured grace."""
    ctx = app[CONTEXT]
    started = time.monotonic()
    grace = ctx.settings.shutdown_grace
    found = {"running_jobs": ctx.jobs.running, "grace_seconds": grace}
    log.info("stopping", extra={"fields": found})
    await ctx.jobs.stop(grace=grace)
    seconds = round(time.monotonic() - started, 2)
    log.info("jobs stopped", extra={"fields": {"seconds": seconds}})


async def _lifecycle(
    settings: Settings, router: routing.Router, app: web.Application
) -> AsyncIterator[None]:
    register_all([*settings.secrets(), *environment_secrets(os.environ)])
    metrics = app[METRICS]
    role = app[ROLE]
    backend = await open_backend(settings)
    jobs = backend.jobs
    inbox = Inbox(backend.commits, jobs)
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
    ctx = Context(
        settings=settings,
        db=backend.db,
        jobs=jobs,
        github=GitHubApp(settings, http, metrics=metrics),
        metrics=metrics,
        http=http,
        mirrors=Mirrors(settings.data_dir),
        models=ModelClients(settings),
        user_tokens=UserTokens(backend.db, settings, http),
    )
    app[CONTEXT] = ctx
    app[INBOX] = inbox
    runs_jobs = role != "web"
    if runs_jobs:
        from bot.workers import setup_workers

        await setup_workers(ctx, router)
    if role != "worker":
        await inbox.start()
    # Everything loaded so far (SDKs, templates, schema) lives as long as the process: move it
    # out of the cyclic GC's scans, so full collections stay short on the webhook path.
    gc.freeze()
    if runs_jobs:
        jobs.start({EVENTS: EVENT_WORKERS, REVIEWS: settings.max_concurrent_reviews})
    try:
        yield
    finally:
        await inbox.stop()
        await jobs.stop()
        await ctx.models.close()
        await http.close()
        await backend.close()
