"""Reviews and their findings as records; their state changes only in `review_state`."""

from __future__ import annotations

import time
from typing import Any

from bot.records.database import Database, delete_in_chunks
from bot.records.types import Finding, Review
from bot.records.vocab import ACTIVE, DRAFTED, STOPPED, sql_in

# PRs closed before a time whose conversations retention forgets; a PR whose figures are
# still to be counted waits (bot.records.stats).
CLOSED_PULLS = (
    "SELECT id FROM pulls WHERE state = 'closed' AND updated_at < ?"
    " AND id NOT IN (SELECT pull_id FROM figures_stale)"
)


async def get_review(db: Database, review_id: int) -> Review | None:
    return await Review.one(db, "SELECT * FROM reviews WHERE id = ?", (review_id,))


async def latest_review(db: Database, pull_id: int) -> Review | None:
    return await Review.one(
        db, "SELECT * FROM reviews WHERE pull_id = ? ORDER BY id DESC LIMIT 1", (pull_id,)
    )


async def latest_draft(db: Database, pull_id: int) -> Review | None:
    return await Review.one(
        db,
        f"SELECT * FROM reviews WHERE pull_id = ? AND state IN {sql_in(DRAFTED)}"
        " ORDER BY id DESC LIMIT 1",
        (pull_id,),
    )


async def held_by(db: Database, pull_id: int, login: str) -> Review | None:
    """The PR's newest review whose draft `login`'s pending review holds (`vet`)."""
    return await Review.one(
        db,
        "SELECT * FROM reviews WHERE pull_id = ? AND vetter = ? ORDER BY id DESC LIMIT 1",
        (pull_id, login),
    )


async def vetter_before(db: Database, pull_id: int, before: int) -> Review | None:
    """The newest earlier draft of the PR that a vetter's pending review holds, still
    unpublished (a push made a new draft: the bot's again)."""
    return await Review.one(
        db,
        "SELECT * FROM reviews WHERE pull_id = ? AND id < ? AND vetter IS NOT NULL"
        " AND state = 'draft' ORDER BY id DESC LIMIT 1",
        (pull_id, before),
    )


async def newest_state(db: Database) -> str | None:
    row = await db.fetchone("SELECT state FROM reviews ORDER BY id DESC LIMIT 1")
    return row["state"] if row else None


async def head_handled(db: Database, pull_id: int, head_sha: str, since: float) -> bool:
    """Whether the head has a review under way or a draft, or one that was stopped, failed or
    held since `since`."""
    row = await db.fetchone(
        "SELECT 1 FROM reviews WHERE pull_id = ? AND head_sha = ?"
        f" AND (state IN {sql_in(ACTIVE + DRAFTED)}"
        f" OR (state IN {sql_in(STOPPED)} AND updated_at >= ?)) LIMIT 1",
        (pull_id, head_sha, since),
    )
    return row is not None


async def automatic_reviews_since(
    conn: Any, installation_id: int | None, author: str, since: float
) -> int:
    """Reviews started without anyone asking, of this author's PRs in the installation."""
    cursor = await conn.execute(
        "SELECT COUNT(*) FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        " WHERE COALESCE(p.installation_id, 0) = COALESCE(?, 0) AND p.author = ?"
        " AND r.requested_by IS NULL"
        " AND r.state != 'held' AND r.created_at >= ?",
        (installation_id, author, since),
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def owns_run(db: Database, review_id: int, owner: str) -> bool:
    row = await db.fetchone(
        "SELECT 1 FROM reviews WHERE id = ? AND run_owner = ?", (review_id, owner)
    )
    return row is not None


async def status_comment_of(db: Database, pull_id: int) -> int | None:
    row = await db.fetchone(
        "SELECT status_comment_id FROM reviews WHERE pull_id = ? AND status_comment_id"
        " IS NOT NULL ORDER BY id DESC LIMIT 1",
        (pull_id,),
    )
    return int(row[0]) if row else None


async def mid_publish(db: Database) -> list[int]:
    rows = await db.fetchall("SELECT id FROM reviews WHERE state IN ('posting', 'revising')")
    return [int(row["id"]) for row in rows]


async def conversations_of(db: Database, pull_id: int) -> list[tuple[int, int | None]]:
    """(review id, session id or None) of each review and session of the PR: what their
    worktrees are named after."""
    rows = await db.fetchall(
        "SELECT r.id AS review_id, s.id AS session_id FROM reviews r"
        " LEFT JOIN sessions s ON s.review_id = r.id WHERE r.pull_id = ?",
        (pull_id,),
    )
    return [(int(row["review_id"]), row["session_id"]) for row in rows]


async def update_review(db: Database, review_id: int, **fields: Any) -> Review | None:
    """Write a review's details and hand back the review as it is now."""
    assert not {"state", "stale"} & fields.keys(), "use bot.records.review_state"
    fields = Review.columns({**fields, "updated_at": time.time()})
    return await Review.one(
        db,
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ? RETURNING *",
        (*fields.values(), review_id),
    )


async def load_findings(db: Database, review_id: int) -> list[Finding]:
    return await Finding.all(
        db, "SELECT * FROM findings WHERE review_id = ? ORDER BY ordinal", (review_id,)
    )


async def prune_closed_reviews(db: Database, older_than: float, chunk: int) -> int:
    """What they counted for stays in `review_figures`, their runs until `prune_runs`."""
    statements = (
        "DELETE FROM findings WHERE id IN (SELECT f.id FROM findings f JOIN reviews r"
        f" ON r.id = f.review_id WHERE r.pull_id IN ({CLOSED_PULLS}) LIMIT ?)",
        "DELETE FROM reviews WHERE id IN (SELECT id FROM reviews"
        f" WHERE pull_id IN ({CLOSED_PULLS}) LIMIT ?)",
        "DELETE FROM ledger WHERE pull_id IN (SELECT DISTINCT pull_id FROM ledger"
        f" WHERE pull_id IN ({CLOSED_PULLS}) LIMIT ?)",
    )
    return await delete_in_chunks(db, older_than, chunk, *statements)
