"""The review state machine: the only code that changes `reviews.state`, `reviews.stale` and
the findings' `state`. Every transition is a named compare-and-set that says whether it
happened (its SQL is `bot.records.review_state`, which nothing else calls).

    queued → running → draft → posting → posted
       ↘        ↘ failed / cancelled    ↖ (release: nothing went out)
        superseded (a newer review of the PR was queued)
                           draft ⇄ revising (send-back: the reviewer's revision is applied)
    queued / running → held (not started: a policy or the server's state says why; a
                             maintainer's `review` starts a new one); also created held
"""

from __future__ import annotations

import time
from typing import Any

from bot.records import review_state as sql
from bot.records.database import Database
from bot.records.review_state import (  # noqa: F401 - transitions of one statement, as named
    begin_revision,
    drop_findings,
    mark_stale,
    release,
    set_findings,
)
from bot.records.reviews import owns_run  # noqa: F401 - whether `owner` still owns the run
from bot.records.types import Review
from bot.texts import message

QUEUED, RUNNING, DRAFT, POSTING, POSTED = "queued", "running", "draft", "posting", "posted"
REVISING = "revising"  # a draft while its revision is written to GitHub: not approvable
FAILED, CANCELLED, SUPERSEDED, HELD = "failed", "cancelled", "superseded", "held"
ACTIVE = (QUEUED, RUNNING)
# Findings: kept (in the draft), dropped (by a person), skipped (left out of a partial approve),
# withdrawn (by the reviewer itself when it revised the draft).
KEPT, DROPPED, SKIPPED, WITHDRAWN = "kept", "dropped", "skipped", "withdrawn"


async def create(
    conn: Any,
    pull_id: int,
    head_sha: str,
    provider: str,
    *,
    reason: str | None = None,
    requested_by: str | None = None,
    held: str | None = None,
) -> int:
    """A new queued review (inside the caller's transaction), or with `held` one that is not
    started and says why; the PR's older queued or running review is superseded by it."""
    return await sql.insert(
        conn,
        pull_id,
        head_sha,
        provider,
        state=HELD if held else QUEUED,
        progress=held or message("progress", step="queued"),
        reason=reason,
        requested_by=requested_by,
        supersede=ACTIVE,
    )


async def create_held(
    db: Database, pull_id: int, head_sha: str, provider: str, why: str, *, reason: str
) -> int:
    """A review that is not started (e.g. an outside author's PR); `why` is shown on the PR."""
    async with db.transaction() as conn:
        return await create(conn, pull_id, head_sha, provider, reason=reason, held=why)


async def hold(db: Database, review_id: int, why: str) -> bool:
    """queued / running → held: it will not run (today's budget is spent, disk is low …)."""
    return await sql.move(db, review_id, HELD, ACTIVE, progress=why)


async def fail(db: Database, review_id: int, error: str) -> bool:
    return await sql.move(
        db, review_id, FAILED, ACTIVE, error=error, progress=message("progress", step="failed")
    )


async def cancel(db: Database, review_id: int, why: str) -> bool:
    return await sql.move(db, review_id, CANCELLED, ACTIVE, progress=why)


async def cancel_pull(db: Database, pull_id: int, why: str, *, queued_only: bool = False) -> int:
    """Cancel a PR's queued (and, unless `queued_only`, running) reviews."""
    return await sql.move_pull(db, pull_id, CANCELLED, (QUEUED,) if queued_only else ACTIVE, why)


async def claim_posting(
    db: Database, review_id: int, actor: str, event: str, chosen: list[int]
) -> bool:
    """draft → posting by `actor` publishing `chosen` as `event` (see `sql.claim_posting`)."""
    progress = message("progress", step="publishing")
    return await sql.claim_posting(db, review_id, actor, event, chosen, progress)


async def mark_posted(db: Database, review_id: int) -> bool:
    return await sql.move(db, review_id, POSTED, (POSTING,), posted_at=time.time())


async def end_revision(db: Database, review_id: int) -> bool:
    """revising → draft, once GitHub shows the revision (or the attempt gave up)."""
    return await sql.move(db, review_id, DRAFT, (REVISING,))


async def recover_revisions(db: Database) -> int:
    """At start-up: a revision interrupted by a crash leaves its draft approvable again
    (`approve` rebuilds the pending review from the stored findings)."""
    return await sql.move_every(db, DRAFT, REVISING)


# -- fencing: one job attempt owns a review's run ---------------------------------------------
# The job attempt that starts a review owns its run (`run_owner`). When another attempt takes it
# over (its worker was paused or cut off past the worker timeout, and the job ran again
# elsewhere), the late one changes nothing: its transitions compare the owner, and it asks
# `owns_run` before each call to GitHub.


async def take_run(db: Database, review_id: int, owner: str, *, config_error: str | None) -> bool:
    """queued / running → running, owned by `owner` (a later attempt takes it over)."""
    return await sql.move(
        db,
        review_id,
        RUNNING,
        ACTIVE,
        progress=message("progress", step="preparing"),
        config_error=config_error,
        run_owner=owner,
    )


async def end_run(
    db: Database, review_id: int, owner: str, to: str, **fields: Any
) -> Review | None:
    """running → draft / failed / cancelled, only while `owner` owns the run; the review as
    it ended (None: it did not, this attempt no longer owns it or it ended otherwise)."""
    assert to in (DRAFT, FAILED, CANCELLED)
    return await sql.move_owned(db, review_id, owner, to, **fields)
