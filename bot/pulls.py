"""The `pulls` table: what the bot knows about each PR."""

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
    async with db.transaction() as conn:
        cursor = await conn.execute(
            f"INSERT INTO pulls ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})"
            " ON CONFLICT (repo, number) DO UPDATE SET "
            + ", ".join(f"{k} = excluded.{k}" for k in values if k not in ("repo", "number"))
            + " RETURNING id",
            tuple(values.values()),
        )
        row = await cursor.fetchone()
    return int(row[0])


async def get_pull(db: Database, repo: str, number: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM pulls WHERE repo = ? AND number = ?", (repo, number))


async def pull_by_id(db: Database, pull_id: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM pulls WHERE id = ?", (pull_id,))
