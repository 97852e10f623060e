"""Review requests and their lifecycle in the database (queued → running → draft → posted)."""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Any

import aiosqlite

from bot.repo_config import RepoConfig
from bot.storage import Database

if TYPE_CHECKING:
    from bot.context import Context

REVIEWS_QUEUE = "reviews"
ACTIVE_STATES = ("queued", "running")
DRAFT_STATES = ("draft", "posting", "posted")


def review_key(pull_id: int) -> str:
    """Serialisation key: one running review per PR."""
    return f"review:{pull_id}"


async def enqueue_review(
    ctx: Context,
    pull_id: int,
    head_sha: str,
    *,
    provider: str | None,
    verify: bool,
    config: RepoConfig,
    reason: str,
    requested_by: str | None = None,
) -> int:
    """Queue a review of `head_sha`, superseding any queued or running review of the PR."""
    provider = provider or ctx.settings.provider

    async def create_review(conn: aiosqlite.Connection) -> dict:
        now = time.time()
        await conn.execute(
            "UPDATE reviews SET state = 'superseded', updated_at = ?"
            " WHERE pull_id = ? AND state IN ('queued', 'running')",
            (now, pull_id),
        )
        cursor = await conn.execute(
            "INSERT INTO reviews (pull_id, head_sha, state, provider, progress, created_at,"
            " updated_at) VALUES (?, ?, 'queued', ?, 'queued', ?, ?)",
            (pull_id, head_sha, provider, now, now),
        )
        return {"review_id": cursor.lastrowid}

    return await ctx.jobs.enqueue(
        "review",
        review_key(pull_id),
        {
            "pull_id": pull_id,
            "head_sha": head_sha,
            "provider": provider,
            "verify": verify,
            "config": config.to_payload(),
            "reason": reason,
            "requested_by": requested_by,
        },
        queue=REVIEWS_QUEUE,
        supersede=True,
        max_attempts=2,
        prepare=create_review,
    )


async def has_draft_for(db: Database, pull_id: int, head_sha: str) -> bool:
    """A head that is already reviewed (or being reviewed) is not reviewed again unasked."""
    row = await db.fetchone(
        "SELECT 1 FROM reviews WHERE pull_id = ? AND head_sha = ? AND state IN"
        " ('queued', 'running', 'draft', 'posting', 'posted') LIMIT 1",
        (pull_id, head_sha),
    )
    return row is not None


async def mark_older_drafts_stale(ctx: Context, pull_id: int, head_sha: str) -> int:
    return await ctx.db.execute(
        "UPDATE reviews SET stale = 1, updated_at = ?"
        " WHERE pull_id = ? AND head_sha != ? AND state = 'draft' AND stale = 0",
        (time.time(), pull_id, head_sha),
    )


async def refresh_status(ctx: Context, pull_id: int) -> None:
    """Queue a re-render of the PR's status comment (GitHub calls happen in the job)."""
    await ctx.jobs.enqueue(
        "refresh_status",
        f"status:{pull_id}",
        {"pull_id": pull_id},
        queue=REVIEWS_QUEUE,
        supersede=True,
    )


async def cancel_pull_work(ctx: Context, pull_id: int) -> None:
    """PR closed: cancel its review, end its sessions, and queue removal of its worktrees."""
    await ctx.jobs.cancel(review_key(pull_id))
    now = time.time()
    await ctx.db.execute(
        "UPDATE reviews SET state = 'cancelled', progress = 'cancelled: PR closed',"
        " updated_at = ? WHERE pull_id = ? AND state IN ('queued', 'running')",
        (now, pull_id),
    )
    await ctx.db.execute(
        "UPDATE sessions SET status = 'ended', updated_at = ?"
        " WHERE pull_id = ? AND status != 'ended'",
        (now, pull_id),
    )
    await ctx.db.execute(
        "UPDATE session_reviews SET ended_at = ? WHERE ended_at IS NULL AND parent_session_id IN"
        " (SELECT id FROM sessions WHERE pull_id = ?)",
        (now, pull_id),
    )
    await ctx.jobs.enqueue(
        "cleanup_pull", f"cleanup:{pull_id}", {"pull_id": pull_id}, queue=REVIEWS_QUEUE
    )


async def forget_installation(ctx: Context, installation_id: int) -> None:
    """App uninstalled: cancel its work, delete its rows, and queue removal of its mirrors."""
    rows = await ctx.db.fetchall(
        "SELECT id, repo FROM pulls WHERE installation_id = ?", (installation_id,)
    )
    for row in rows:
        await ctx.jobs.cancel(review_key(row["id"]))
    repos = sorted({row["repo"] for row in rows})
    async with ctx.db.transaction() as conn:
        pulls = "SELECT id FROM pulls WHERE installation_id = ?"
        reviews = f"SELECT id FROM reviews WHERE pull_id IN ({pulls})"
        sessions = f"SELECT id FROM sessions WHERE pull_id IN ({pulls})"
        for statement in (
            f"DELETE FROM findings WHERE review_id IN ({reviews})",
            f"DELETE FROM messages WHERE session_id IN ({sessions})",
            f"DELETE FROM session_reviews WHERE parent_session_id IN ({sessions})",
            f"DELETE FROM sessions WHERE pull_id IN ({pulls})",
            f"DELETE FROM reviews WHERE pull_id IN ({pulls})",
            "DELETE FROM pulls WHERE installation_id = ?",
            "DELETE FROM deliveries WHERE installation_id = ? AND status != 'queued'",
        ):
            await conn.execute(statement, (installation_id,))
    ctx.github.forget_installation(installation_id)
    await ctx.jobs.enqueue(
        "cleanup_installation",
        f"cleanup-installation:{installation_id}",
        {"installation_id": installation_id, "repos": repos},
        queue=REVIEWS_QUEUE,
    )


async def get_review(db: Database, review_id: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM reviews WHERE id = ?", (review_id,))


async def latest_review(db: Database, pull_id: int) -> sqlite3.Row | None:
    return await db.fetchone(
        "SELECT * FROM reviews WHERE pull_id = ? ORDER BY id DESC LIMIT 1", (pull_id,)
    )


async def latest_draft(db: Database, pull_id: int) -> sqlite3.Row | None:
    """The newest review that produced a draft (draft, posting or posted)."""
    return await db.fetchone(
        "SELECT * FROM reviews WHERE pull_id = ? AND state IN ('draft', 'posting', 'posted')"
        " ORDER BY id DESC LIMIT 1",
        (pull_id,),
    )


async def update_review(db: Database, review_id: int, **fields: Any) -> None:
    fields["updated_at"] = time.time()
    await db.execute(
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
        (*fields.values(), review_id),
    )


async def load_findings(db: Database, review_id: int) -> list[sqlite3.Row]:
    return await db.fetchall(
        "SELECT * FROM findings WHERE review_id = ? ORDER BY ordinal", (review_id,)
    )


async def save_findings(db: Database, review_id: int, rows: list[dict[str, Any]]) -> None:
    """Replace the review's findings; `ordinal` numbers them F1…Fn as shown on the PR."""
    async with db.transaction() as conn:
        await conn.execute("DELETE FROM findings WHERE review_id = ?", (review_id,))
        for ordinal, row in enumerate(rows, start=1):
            await conn.execute(
                "INSERT INTO findings (review_id, ordinal, path, line, end_line, side, severity,"
                " title, body, suggestion, in_diff, verify_status, verify_note, state, checked_by)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'kept', 'auto')",
                (
                    review_id,
                    ordinal,
                    row["path"],
                    row.get("line"),
                    row.get("end_line"),
                    row.get("side", "RIGHT"),
                    row["severity"],
                    row["title"],
                    row.get("body", ""),
                    row.get("suggestion"),
                    int(row.get("in_diff", 0)),
                    row.get("verify_status"),
                    row.get("verify_note"),
                ),
            )


async def review_cost(db: Database, review_id: int) -> tuple[float | None, int]:
    """Total USD of the review's runs (None if any run's cost is unknown) and its run count."""
    rows = await db.fetchall("SELECT cost_usd FROM runs WHERE review_id = ?", (review_id,))
    if not rows:
        return 0.0, 0
    costs = [r["cost_usd"] for r in rows]
    return (None if any(c is None for c in costs) else sum(costs)), len(rows)
