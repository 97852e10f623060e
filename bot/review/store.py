"""What the bot knows about each PR, its reviews and their findings (state lives in `state`)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from bot.storage import Database


async def upsert_pull(db: Database, installation_id: int | None, repo: dict, pr: dict) -> int:
    """Record the PR as the payload shows it; returns the `pulls.id`."""
    values: dict[str, Any] = {
        "installation_id": installation_id,
        "repo": repo["full_name"],
        "number": pr["number"],
        "head_sha": pr["head"]["sha"],
        "base_ref": pr["base"]["ref"],
        "clone_url": repo.get("clone_url"),
        "html_url": pr.get("html_url"),
        "title": pr.get("title") or "",
        "body": pr.get("body") or "",
        "author": (pr.get("user") or {}).get("login"),
        "state": pr.get("state", "open"),
        "draft": int(bool(pr.get("draft"))),
        "updated_at": time.time(),
    }
    row = await db.fetchone(
        f"INSERT INTO pulls ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})"
        " ON CONFLICT (repo, number) DO UPDATE SET "
        + ", ".join(f"{k} = excluded.{k}" for k in values if k not in ("repo", "number"))
        + " RETURNING id",
        tuple(values.values()),
    )
    assert row is not None
    return int(row[0])


async def get_pull(db: Database, repo: str, number: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM pulls WHERE repo = ? AND number = ?", (repo, number))


async def pull_by_id(db: Database, pull_id: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM pulls WHERE id = ?", (pull_id,))


async def get_review(db: Database, review_id: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM reviews WHERE id = ?", (review_id,))


async def latest_review(db: Database, pull_id: int) -> sqlite3.Row | None:
    return await db.fetchone(
        "SELECT * FROM reviews WHERE pull_id = ? ORDER BY id DESC LIMIT 1", (pull_id,)
    )


async def latest_draft(db: Database, pull_id: int) -> sqlite3.Row | None:
    """The newest review that produced a draft (draft, revising, posting or posted)."""
    return await db.fetchone(
        "SELECT * FROM reviews WHERE pull_id = ?"
        " AND state IN ('draft', 'revising', 'posting', 'posted')"
        " ORDER BY id DESC LIMIT 1",
        (pull_id,),
    )


async def has_draft_for(db: Database, pull_id: int, head_sha: str) -> bool:
    """A head that is already reviewed (or being reviewed) is not reviewed again unasked."""
    row = await db.fetchone(
        "SELECT 1 FROM reviews WHERE pull_id = ? AND head_sha = ? AND state IN"
        " ('queued', 'running', 'draft', 'revising', 'posting', 'posted') LIMIT 1",
        (pull_id, head_sha),
    )
    return row is not None


async def update_review(db: Database, review_id: int, **fields: Any) -> None:
    """Write a review's details (progress, ids of its GitHub objects, …); its state and
    staleness change only through `bot.review.state`."""
    assert not {"state", "stale"} & fields.keys(), "use bot.review.state"
    fields["updated_at"] = time.time()
    await db.execute(
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
        (*fields.values(), review_id),
    )


async def load_findings(db: Database, review_id: int) -> list[sqlite3.Row]:
    return await db.fetchall(
        "SELECT * FROM findings WHERE review_id = ? ORDER BY ordinal", (review_id,)
    )


async def review_costs(db: Database, review_id: int) -> list[tuple[str, int, float | None]]:
    """Per provider, in first-use order: the review's model runs (its own, its verify pass,
    cross-review turns and revisions) and their USD (None when any run's cost is unknown)."""
    rows = await db.fetchall(
        "SELECT provider, cost_usd FROM runs WHERE review_id = ? ORDER BY id", (review_id,)
    )
    by_provider: dict[str, list[float | None]] = {}
    for row in rows:
        by_provider.setdefault(row["provider"], []).append(row["cost_usd"])
    return [
        (provider, len(costs), None if None in costs else sum(c for c in costs if c is not None))
        for provider, costs in by_provider.items()
    ]


async def delete_installation(db: Database, installation_id: int) -> list[str]:
    """Delete the installation's PRs, reviews and findings (its sessions go first, through
    their own store); returns its repositories."""
    rows = await db.fetchall(
        "SELECT DISTINCT repo FROM pulls WHERE installation_id = ?", (installation_id,)
    )
    async with db.transaction() as conn:
        pulls = "SELECT id FROM pulls WHERE installation_id = ?"
        reviews = f"SELECT id FROM reviews WHERE pull_id IN ({pulls})"
        for statement in (
            f"DELETE FROM findings WHERE review_id IN ({reviews})",
            f"DELETE FROM reviews WHERE pull_id IN ({pulls})",
            "DELETE FROM pulls WHERE installation_id = ?",
            "DELETE FROM deliveries WHERE installation_id = ? AND status != 'queued'",
        ):
            await conn.execute(statement, (installation_id,))
    return sorted(row["repo"] for row in rows)
