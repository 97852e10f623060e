"""The review state machine: the only code that changes `reviews.state`, `reviews.stale` and
the findings' `state`. Every transition is a named compare-and-set that says whether it
happened; the generic moves under them are private.

    queued → running → draft → posting → posted
       ↘        ↘ failed / cancelled    ↖ (release: nothing went out)
        superseded (a newer review of the PR was queued)
                           draft ⇄ revising (send-back: the reviewer's revision is applied)
    queued / running → held (not started: a policy or the server's state says why; a
                             maintainer's `review` starts a new one); also created held
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from bot.records import ledger
from bot.records.database import Database
from bot.records.database import marks as _marks
from bot.records.ledger import LedgerWrites
from bot.records.types import DraftFinding, Review
from bot.records.vocab import ACTIVE, GONE, ReviewState, sql_in
from bot.texts import PEOPLE, say

# What a draft finding stores: each of its fields is a column of `findings`.
COLUMNS = tuple(field.name for field in dataclasses.fields(DraftFinding))


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
    """The PR's older queued or running review is superseded by it (caller's transaction)."""
    now = time.time()
    await conn.execute(
        "UPDATE reviews SET state = 'superseded', updated_at = ?"
        f" WHERE pull_id = ? AND state IN {sql_in(ACTIVE)}",
        (now, pull_id),
    )
    state = ReviewState.HELD if held else ReviewState.QUEUED
    progress = held or say(PEOPLE, "progress", step="queued")
    cursor = await conn.execute(
        "INSERT INTO reviews (pull_id, head_sha, state, provider, progress, reason,"
        " requested_by, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        (pull_id, head_sha, state, provider, progress, reason, requested_by, now, now),
    )
    return (await cursor.fetchone())[0]


async def create_held(
    db: Database, pull_id: int, head_sha: str, provider: str, why: str, *, reason: str
) -> int:
    async with db.transaction() as conn:
        return await create(conn, pull_id, head_sha, provider, reason=reason, held=why)


async def hold(db: Database, review_id: int, why: str) -> bool:
    """queued / running → held: it will not run (today's budget is spent, disk is low …)."""
    return await _move(db, review_id, ReviewState.HELD, ACTIVE, progress=why)


async def fail(db: Database, review_id: int, error: str) -> bool:
    progress = say(PEOPLE, "progress", step="failed")
    return await _move(db, review_id, ReviewState.FAILED, ACTIVE, error=error, progress=progress)


async def cancel(db: Database, review_id: int, why: str) -> bool:
    return await _move(db, review_id, ReviewState.CANCELLED, ACTIVE, progress=why)


async def cancel_pull(db: Database, pull_id: int, why: str, *, queued_only: bool = False) -> int:
    sources = (ReviewState.QUEUED,) if queued_only else ACTIVE
    return await db.execute(
        "UPDATE reviews SET state = ?, progress = ?, updated_at = ?"
        f" WHERE pull_id = ? AND state IN ({_marks(sources)})",
        (ReviewState.CANCELLED, why, time.time(), pull_id, *sources),
    )


async def mark_posted(db: Database, review_id: int) -> bool:
    return await _move(
        db, review_id, ReviewState.POSTED, (ReviewState.POSTING,), posted_at=time.time()
    )


async def end_revision(db: Database, review_id: int) -> bool:
    """revising → draft, once GitHub shows the revision (or the attempt gave up)."""
    return await _move(db, review_id, ReviewState.DRAFT, (ReviewState.REVISING,))


async def recover_revisions(db: Database) -> int:
    """At start-up: a revision interrupted by a crash leaves its draft approvable again."""
    return await db.execute(
        "UPDATE reviews SET state = ?, updated_at = ? WHERE state = ?",
        (ReviewState.DRAFT, time.time(), ReviewState.REVISING),
    )


# -- fencing: one job attempt owns a review's run ---------------------------------------------
# The job attempt that starts a review owns its run (`run_owner`). When another attempt takes it
# over (its worker was paused or cut off past the worker timeout, and the job ran again
# elsewhere), the late one changes nothing: its transitions compare the owner, and it asks
# `bot.records.reviews.owns_run` before each call to GitHub.


async def take_run(db: Database, review_id: int, owner: str, *, config_error: str | None) -> bool:
    """queued / running → running, owned by `owner` (a later attempt takes it over)."""
    return await _move(
        db,
        review_id,
        ReviewState.RUNNING,
        ACTIVE,
        progress=say(PEOPLE, "progress", step="preparing"),
        config_error=config_error,
        run_owner=owner,
    )


async def end_run(
    db: Database, review_id: int, owner: str, to: ReviewState, **fields: Any
) -> Review | None:
    """running → draft / failed / cancelled, only while `owner` owns the run; the review as
    it ended (None: it did not)."""
    assert to in (ReviewState.DRAFT, ReviewState.FAILED, ReviewState.CANCELLED)
    fields = {"state": to, **fields, "updated_at": time.time()}
    return await Review.one(
        db,
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)}"
        " WHERE id = ? AND state = 'running' AND run_owner = ? RETURNING *",
        (*fields.values(), review_id, owner),
    )


async def _move(
    db: Database, review_id: int, to: ReviewState, sources: tuple[str, ...], **fields: Any
) -> bool:
    fields = {"state": to, **fields, "updated_at": time.time()}
    changed = await db.execute(
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)}"
        f" WHERE id = ? AND state IN ({_marks(sources)})",
        (*fields.values(), review_id, *sources),
    )
    return changed == 1


async def mark_stale(db: Database, pull_id: int, head_sha: str) -> int:
    return await db.execute(
        "UPDATE reviews SET stale = 1, updated_at = ?"
        " WHERE pull_id = ? AND head_sha != ? AND state = 'draft' AND stale = 0",
        (time.time(), pull_id, head_sha),
    )


async def drop_findings(
    db: Database, review_id: int, ordinals: tuple[int, ...], why: str | None = None, *, by: str
) -> bool:
    """Only while it is a draft (not being revised or published); False, and nothing changed,
    when it is not."""
    changed = await db.execute(
        "UPDATE findings SET state = 'dropped', checked_by = 'human', dropped_by = ?, why = ?"
        f" WHERE review_id = ? AND ordinal IN ({_marks(ordinals)})"
        " AND EXISTS (SELECT 1 FROM reviews WHERE id = ? AND state = 'draft')",
        (by, why, review_id, *ordinals, review_id),
    )
    return changed > 0


async def claim_posting(
    db: Database, review_id: int, actor: str, event: str, chosen: list[int]
) -> bool:
    """draft → posting, recorded in the same commit (so a crash at any point leaves enough to
    finish exactly once; findings not chosen are skipped); False when someone else got there
    first."""
    progress = say(PEOPLE, "progress", step="publishing")
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'posting', posted_by = ?, posted_event = ?,"
            " progress = ?, updated_at = ? WHERE id = ? AND state = 'draft'",
            (actor, event, progress, time.time(), review_id),
        )
        if cursor.rowcount != 1:
            return False
        await conn.execute(
            f"UPDATE findings SET checked_by = CASE WHEN ordinal IN ({_marks(chosen)})"
            " THEN 'human' ELSE checked_by END WHERE review_id = ?",
            (*chosen, review_id),
        )
        await conn.execute(
            "UPDATE findings SET state = 'skipped' WHERE review_id = ? AND state = 'kept'"
            f" AND ordinal NOT IN ({_marks(chosen)})",
            (review_id, *chosen),
        )
    return True


async def release(db: Database, review_id: int) -> bool:
    """posting → draft, when the publish provably did not happen."""
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'draft' WHERE id = ? AND state = 'posting'", (review_id,)
        )
        if cursor.rowcount != 1:
            return False
        await conn.execute(
            "UPDATE findings SET state = 'kept' WHERE review_id = ? AND state = 'skipped'",
            (review_id,),
        )
    return True


async def begin_revision(
    db: Database,
    review_id: int,
    assigned: list[tuple[int, DraftFinding]],
    withdrawn: list[int],
    *,
    by: str,
    texts: dict[str, object],
    writes: LedgerWrites | None = None,
) -> bool:
    """draft → revising, with the revised findings under their (stable) numbers, verdicts
    included, and the review's new texts (`texts`: verdict, summary, revision note, …) in the
    same commit. Returning findings are kept again, new ones are added, `withdrawn` ones are
    marked so; a finding a person dropped is left exactly as they dropped it. False, and
    nothing changed, unless this is the PR's newest review and still a draft that is not stale
    (nothing may overwrite what people approve)."""
    texts = Review.columns(texts)
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'revising', revision = revision + 1,"
            f" {', '.join(f'{k} = ?' for k in texts)}, updated_at = ?"
            " WHERE id = ? AND state = 'draft' AND stale = 0 AND NOT EXISTS (SELECT 1 FROM"
            " reviews newer WHERE newer.pull_id = reviews.pull_id AND newer.id > reviews.id"
            f" AND newer.state NOT IN {sql_in(GONE)})",
            (*texts.values(), time.time(), review_id),
        )
        if cursor.rowcount != 1:
            return False
        for ordinal, finding in assigned:
            values = _values(finding)
            cursor = await conn.execute(
                f"UPDATE findings SET {', '.join(f'{k} = ?' for k in COLUMNS)},"
                " state = 'kept', checked_by = 'auto'"
                " WHERE review_id = ? AND ordinal = ? AND state != 'dropped'",
                (*values, review_id, ordinal),
            )
            if cursor.rowcount == 0:
                await conn.execute(
                    f"INSERT INTO findings (review_id, ordinal, {', '.join(COLUMNS)},"
                    f" state, checked_by) VALUES (?, ?, {_marks(COLUMNS)}, 'kept', 'auto')"
                    " ON CONFLICT (review_id, ordinal) DO NOTHING",
                    (review_id, ordinal, *values),
                )
        await conn.execute(
            "UPDATE findings SET state = 'withdrawn', checked_by = ? WHERE review_id = ?"
            f" AND state = 'kept' AND ordinal IN ({_marks(withdrawn)})",
            (by, review_id, *withdrawn),
        )
        if writes is not None:
            await ledger.write(conn, writes)
    return True


async def set_findings(
    db: Database,
    review_id: int,
    numbered: list[tuple[int, DraftFinding]],
    writes: LedgerWrites | None = None,
) -> None:
    """A new draft's findings under their `F` numbers, all kept, and what the push did to the
    ledger, in one commit."""
    async with db.transaction() as conn:
        await conn.execute("DELETE FROM findings WHERE review_id = ?", (review_id,))
        await conn.executemany(
            f"INSERT INTO findings (review_id, ordinal, {', '.join(COLUMNS)}, state, checked_by)"
            f" VALUES (?, ?, {_marks(COLUMNS)}, 'kept', 'auto')",
            [(review_id, ordinal, *_values(finding)) for ordinal, finding in numbered],
        )
        if writes is not None:
            await ledger.write(conn, writes)


def _values(finding: DraftFinding) -> tuple[object, ...]:
    values = dataclasses.asdict(finding)
    values.update(side=finding.side or "RIGHT", in_diff=int(finding.in_diff))
    return tuple(values.values())


# -- the vetter's pending review (`vet`) and what they did with it ----------------------------


async def hand_to_vetter(
    db: Database, review_id: int, vetter: str, vetter_review_id: int, placed: dict[int, str]
) -> bool:
    """The draft's findings `placed` (ordinal → the comment put there) are now in `vetter`'s
    pending review: only while it is a draft (not being revised or published); False, and
    nothing changed, when it is not. Findings placed before keep what they were given."""
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET vetter = ?, vetter_review_id = ?, updated_at = ?"
            " WHERE id = ? AND state = 'draft'",
            (vetter, vetter_review_id, time.time(), review_id),
        )
        if cursor.rowcount != 1:
            return False
        await conn.executemany(
            "UPDATE findings SET vetted_text = ? WHERE review_id = ? AND ordinal = ?",
            [(text, review_id, ordinal) for ordinal, text in placed.items()],
        )
    return True


async def published_by_person(
    db: Database,
    review_id: int,
    by: str,
    event: str,
    published: dict[int, tuple[str, bool]],
    removed: tuple[int, ...],
    why: str,
) -> bool:
    """draft → posted by `by`, who submitted the pending review holding it (`event`: COMMENT,
    REQUEST_CHANGES or APPROVE, their choice): `published` (ordinal → its text as they
    published it, and whether they edited it) are a person's yes, `removed` a person's no
    (`why`), every other kept finding was not published (skipped). False, and nothing
    changed, unless it is a draft `by` holds."""
    now = time.time()
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE reviews SET state = 'posted', posted_by = ?, posted_event = ?,"
            " posted_at = ?, pending_review_id = NULL, updated_at = ?"
            " WHERE id = ? AND state = 'draft' AND vetter = ?",
            (by, event, now, now, review_id, by),
        )
        if cursor.rowcount != 1:
            return False
        await conn.executemany(
            "UPDATE findings SET state = 'kept', checked_by = 'human', published_text = ?,"
            " edited = ? WHERE review_id = ? AND ordinal = ? AND state = 'kept'",
            [(text, int(edited), review_id, n) for n, (text, edited) in published.items()],
        )
        await conn.executemany(
            "UPDATE findings SET state = 'dropped', checked_by = 'human', dropped_by = ?,"
            " why = ? WHERE review_id = ? AND ordinal = ? AND state = 'kept'",
            [(by, why, review_id, n) for n in removed],
        )
        await conn.execute(
            "UPDATE findings SET state = 'skipped' WHERE review_id = ? AND state = 'kept'"
            " AND published_text IS NULL",
            (review_id,),
        )
    return True
