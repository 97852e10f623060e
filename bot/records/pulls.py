"""Pull requests as deliveries and API reads show them, known by their repository's id."""

from __future__ import annotations

import time
from typing import Any

from bot.records.database import Database, marks
from bot.records.stats import FIGURES_LOCK, forget_pulls
from bot.records.types import Pull


async def upsert_pull(db: Database, installation_id: int | None, repo: dict, pr: dict) -> int:
    """A renamed or transferred repository keeps its PRs' state, and a new repository that
    takes an old name never inherits the old one's (the old rows give the name up)."""
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
        "repo_id": repo.get("id") if isinstance(repo.get("id"), int) else None,
    }
    name, number, repo_id = values["repo"], values["number"], values["repo_id"]
    async with db.transaction() as conn:
        if repo_id is None:
            cursor = await conn.execute(
                "SELECT id FROM pulls WHERE repo = ? AND number = ?", (name, number)
            )
        else:
            await conn.execute(  # another repository had this name: it gives it up
                "UPDATE pulls SET repo = repo || ' (repository ' || repo_id || ')'"
                " WHERE repo = ? AND number = ? AND repo_id IS NOT NULL AND repo_id != ?",
                (name, number, repo_id),
            )
            cursor = await conn.execute(
                "SELECT id FROM pulls WHERE repo_id = ? AND number = ?"
                " UNION ALL SELECT id FROM pulls WHERE repo = ? AND number = ?"
                " AND repo_id IS NULL",  # stored before ids were: adopted
                (repo_id, number, name, number),
            )
        found = await cursor.fetchone()
        if found is not None and repo_id is not None:
            await conn.execute(  # an id-less row under the new name is someone else's
                "UPDATE pulls SET repo = repo || ' (before repository ids)'"
                " WHERE repo = ? AND number = ? AND repo_id IS NULL AND id != ?",
                (name, number, found[0]),
            )
        if found is None:
            cursor = await conn.execute(
                f"INSERT INTO pulls ({', '.join(values)}) VALUES ({marks(values)}) RETURNING id",
                tuple(values.values()),
            )
            return (await cursor.fetchone())[0]
        if repo_id is None:
            values.pop("repo_id")
        await conn.execute(
            f"UPDATE pulls SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
            (*values.values(), found[0]),
        )
        return int(found[0])


async def get_pull(db: Database, repo: str, number: int) -> Pull | None:
    return await Pull.one(db, "SELECT * FROM pulls WHERE repo = ? AND number = ?", (repo, number))


async def find_pull(db: Database, repo: dict, number: int) -> Pull | None:
    """By the repository's id (by name for payloads without one)."""
    if isinstance(repo.get("id"), int):
        return await Pull.one(
            db, "SELECT * FROM pulls WHERE repo_id = ? AND number = ?", (repo["id"], number)
        )
    return await get_pull(db, repo["full_name"], number)


async def pull_by_id(db: Database, pull_id: int) -> Pull | None:
    return await Pull.one(db, "SELECT * FROM pulls WHERE id = ?", (pull_id,))


async def installation_pulls(db: Database, installation_id: int) -> list[int]:
    rows = await db.fetchall("SELECT id FROM pulls WHERE installation_id = ?", (installation_id,))
    return [int(row["id"]) for row in rows]


async def closed_pull_refs(db: Database) -> dict[str, list[int]]:
    rows = await db.fetchall("SELECT repo, number FROM pulls WHERE state = 'closed'")
    found: dict[str, list[int]] = {}
    for row in rows:
        found.setdefault(row["repo"], []).append(row["number"])
    return found


async def delete_installation(db: Database, installation_id: int) -> list[str]:
    """Its PRs, reviews, findings, finding ledgers, review figures (out of the sums too) and
    processed deliveries (its sessions go first, through `bot.records.sessions`); returns its
    repositories."""
    rows = await db.fetchall(
        "SELECT DISTINCT repo FROM pulls WHERE installation_id = ?", (installation_id,)
    )
    async with db.transaction(lock=FIGURES_LOCK) as conn:  # no recount moves the sums meanwhile
        pulls = "SELECT id FROM pulls WHERE installation_id = ?"
        reviews = f"SELECT id FROM reviews WHERE pull_id IN ({pulls})"
        await forget_pulls(conn, pulls, (installation_id,))
        for statement in (
            f"DELETE FROM findings WHERE review_id IN ({reviews})",
            f"DELETE FROM ledger WHERE pull_id IN ({pulls})",
            f"DELETE FROM reviews WHERE pull_id IN ({pulls})",
            "DELETE FROM pulls WHERE installation_id = ?",
            "DELETE FROM deliveries WHERE installation_id = ? AND status != 'queued'",
        ):
            await conn.execute(statement, (installation_id,))
    return sorted(row["repo"] for row in rows)
