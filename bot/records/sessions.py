"""Sessions and cross-reviews: the only writer of a session's status and of `session_reviews`."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from bot.records.database import Database, delete_in_chunks
from bot.records.reviews import CLOSED_PULLS
from bot.records.types import CrossReview, Session
from bot.records.vocab import OPEN_SESSION, SessionRole, SessionStatus, sql_in


class OneActive(Exception):
    """The parent already has an active cross-review."""


async def create_session(
    db: Database,
    *,
    provider: str,
    model: str,
    pull_id: int | None = None,
    review_id: int | None = None,
    role: SessionRole = SessionRole.PRIMARY,
    parent_session_id: int | None = None,
) -> Session:
    """A reviewer's conversation, or (`role` VERIFY) the verify pass's, linked to the draft's
    session as its parent, which ends with its one turn; or (`role` PART) a review's group or
    later pass, linked to the review's primary session."""
    async with db.transaction() as conn:
        session_id = await _insert(
            conn, provider, model, role, pull_id, review_id, parent_session_id
        )
    return await get_session(db, session_id)


async def _insert(
    conn: Any,
    provider: str,
    model: str,
    role: str,
    pull_id: int | None,
    review_id: int | None,
    parent_session_id: int | None,
) -> int:
    """The one creation path of sessions: a child is an ordinary session whose first message
    is review context instead of a person's text."""
    now = time.time()
    cursor = await conn.execute(
        "INSERT INTO sessions (pull_id, review_id, provider, model, role, status,"
        " parent_session_id, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'active', ?, ?, ?)"
        " RETURNING id",
        (pull_id, review_id, provider, model, role, parent_session_id, now, now),
    )
    return (await cursor.fetchone())[0]


async def start_cross_review(
    db: Database,
    *,
    parent: Session,
    provider: str,
    model: str,
    anchor_message_id: str | None,
    anchor_comment_id: int | None,
    prompt: str,
    title: str,
) -> Session:
    """A child session and its `session_reviews` row, in one commit; OneActive when the
    parent already has an active cross-review (also under races)."""
    now = time.time()
    try:
        async with db.transaction() as conn:
            child_id = await _insert(
                conn, provider, model, "child", parent.pull_id, parent.review_id, parent.id
            )
            await conn.execute(
                "INSERT INTO session_reviews (parent_session_id, child_session_id, child_adapter,"
                " anchor_message_id, anchor_comment_id, review_prompt, review_title,"
                " message_count, started_at, pull_id, review_id)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
                (
                    parent.id,
                    child_id,
                    provider,
                    anchor_message_id,
                    anchor_comment_id,
                    prompt,
                    title,
                    now,
                    parent.pull_id,
                    parent.review_id,
                ),
            )
    except sqlite3.IntegrityError as exc:
        if "session_reviews" not in str(exc):
            raise
        raise OneActive from None
    return await get_session(db, child_id)


async def get_session(db: Database, session_id: int) -> Session:
    row = await db.fetchone("SELECT * FROM sessions WHERE id = ?", (session_id,))
    if row is None:
        raise LookupError(f"session {session_id} does not exist")
    return Session.from_row(row)


async def primary_of_review(db: Database, review_id: int) -> Session | None:
    return await Session.one(
        db,
        "SELECT * FROM sessions WHERE review_id = ? AND role = 'primary' ORDER BY id DESC LIMIT 1",
        (review_id,),
    )


async def active_cross_review(db: Database, parent_id: int) -> CrossReview | None:
    return await CrossReview.one(
        db,
        "SELECT * FROM session_reviews WHERE parent_session_id = ? AND ended_at IS NULL",
        (parent_id,),
    )


async def open_sessions(db: Database, pull_id: int) -> list[Session]:
    return await Session.all(
        db,
        f"SELECT * FROM sessions WHERE pull_id = ? AND status IN {sql_in(OPEN_SESSION)}",
        (pull_id,),
    )


async def part_sessions(db: Database, review_id: int) -> int:
    """How many sessions besides its primary one drafted the review (groups, passes)."""
    row = await db.fetchone(
        "SELECT COUNT(*) AS n FROM sessions WHERE review_id = ? AND role = 'part'", (review_id,)
    )
    return int(row["n"]) if row else 0


async def end_review_sessions(db: Database, review_id: int) -> None:
    await _end(db, "review_id = ?", (review_id,))


async def has_active_cross_review(db: Database, review_id: int) -> bool:
    row = await db.fetchone(
        "SELECT 1 FROM session_reviews WHERE review_id = ? AND ended_at IS NULL", (review_id,)
    )
    return row is not None


async def _set(db: Database, session_id: int, status: str) -> bool:
    """False when the session is not open."""
    changed = await db.execute(
        "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ? AND status IN (?, ?)",
        (status, time.time(), session_id, *OPEN_SESSION),
    )
    return changed == 1


async def touch(conn: Any, session_id: int, now: float) -> None:
    await conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, session_id))


async def mark_busy(db: Database, session_id: int) -> bool:
    return await _set(db, session_id, SessionStatus.BUSY)


async def mark_idle(db: Database, session_id: int) -> bool:
    return await _set(db, session_id, SessionStatus.ACTIVE)


async def end_session(db: Database, session_id: int, *, failed: str | None = None) -> None:
    await _end(db, "id = ?", (session_id,), failed)


async def end_pull_sessions(db: Database, pull_id: int, *, keep_review: int | None = None) -> None:
    """All of them when the PR closed; those of older drafts when a new draft replaces them."""
    where = "pull_id = ?" + (" AND COALESCE(review_id, 0) != ?" if keep_review else "")
    await _end(db, where, (pull_id, keep_review) if keep_review else (pull_id,))


async def _end(db: Database, where: str, args: tuple, failed: str | None = None) -> int:
    """The open sessions `where` selects and those started from them (their cross-reviews'
    children, a verify pass) end, and so do their active cross-reviews, as child or as parent,
    with their message counts; how many sessions ended."""
    now = time.time()
    status = SessionStatus.FAILED if failed else SessionStatus.ENDED
    chosen = f"SELECT id FROM sessions WHERE {where}"
    async with db.transaction() as conn:
        cursor = await conn.execute(
            "UPDATE sessions SET status = ?, error = ?, updated_at = ?"
            f" WHERE (id IN ({chosen}) OR parent_session_id IN ({chosen}))"
            f" AND status IN {sql_in(OPEN_SESSION)}",
            (status, failed, now, *args, *args),
        )
        await conn.execute(
            "UPDATE session_reviews SET ended_at = ?, message_count = (SELECT COUNT(*) FROM"
            " messages m WHERE m.session_id = session_reviews.child_session_id)"
            f" WHERE ended_at IS NULL AND (child_session_id IN ({chosen})"
            f" OR parent_session_id IN ({chosen}))",
            (now, *args, *args),
        )
    return cursor.rowcount


async def sync_message_count(db: Database, child_id: int) -> None:
    await db.execute(
        "UPDATE session_reviews SET message_count = (SELECT COUNT(*) FROM messages"
        " WHERE session_id = ?) WHERE child_session_id = ?",
        (child_id, child_id),
    )


async def settle_sessions_at_start(db: Database) -> int:
    """At start-up: sessions left mid-turn are active again (their turn's job resumes them)
    if their PR is open, and end if it is not. Returns how many ended."""
    await db.execute(
        "UPDATE sessions SET status = 'active' WHERE status = 'busy' AND pull_id IN"
        " (SELECT id FROM pulls WHERE state = 'open')"
    )
    return await _end(db, "pull_id IN (SELECT id FROM pulls WHERE state != 'open')", ())


async def delete_installation_sessions(db: Database, installation_id: int) -> None:
    sessions = (
        "SELECT id FROM sessions WHERE pull_id IN (SELECT id FROM pulls WHERE installation_id = ?)"
    )
    async with db.transaction() as conn:
        for statement in (
            f"DELETE FROM messages WHERE session_id IN ({sessions})",
            f"DELETE FROM session_reviews WHERE parent_session_id IN ({sessions})",
            f"DELETE FROM sessions WHERE id IN ({sessions})",
        ):
            await conn.execute(statement, (installation_id,))


async def prune_closed_sessions(db: Database, older_than: float, chunk: int) -> int:
    statements = (
        # By session (messages have no single-column key on Postgres), a few at a time.
        "DELETE FROM messages WHERE session_id IN (SELECT id FROM sessions WHERE pull_id IN"
        f" ({CLOSED_PULLS}) AND id IN (SELECT session_id FROM messages) LIMIT ?)",
        "DELETE FROM session_reviews WHERE id IN (SELECT r.id FROM session_reviews r JOIN"
        f" sessions s ON s.id = r.parent_session_id WHERE s.pull_id IN ({CLOSED_PULLS}) LIMIT ?)",
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions"
        f" WHERE pull_id IN ({CLOSED_PULLS}) LIMIT ?)",
    )
    closed = await delete_in_chunks(db, older_than, chunk, *statements)
    return closed + await prune_detached_sessions(db, older_than, chunk)


async def prune_detached_sessions(db: Database, older_than: float, chunk: int) -> int:
    """Sessions of no PR (eval replays make them): nobody can continue one, having no PR to
    comment on. Their runs (and what they cost) stay."""
    detached = "SELECT id FROM sessions WHERE pull_id IS NULL AND updated_at < ?"
    return await delete_in_chunks(
        db,
        older_than,
        chunk,
        f"DELETE FROM messages WHERE session_id IN ({detached}"
        " AND id IN (SELECT session_id FROM messages) LIMIT ?)",
        f"DELETE FROM sessions WHERE id IN ({detached} LIMIT ?)",
    )
