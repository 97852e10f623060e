"""What the bot knows about each PR, its reviews and their findings (state lives in `state`)."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from typing import Any

import aiosqlite

from bot.storage import Database, delete_in_chunks


async def upsert_pull(db: Database, installation_id: int | None, repo: dict, pr: dict) -> int:
    """Record the PR as the payload shows it; returns the `pulls.id`.

    A PR is known by its repository's id: a renamed or transferred repository keeps its
    state, and a new repository that takes an old name never inherits the old one's (the
    old rows give the name up)."""
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
                f"INSERT INTO pulls ({', '.join(values)})"
                f" VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
            return int(cursor.lastrowid or 0)
        if repo_id is None:
            values.pop("repo_id")
        await conn.execute(
            f"UPDATE pulls SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
            (*values.values(), found[0]),
        )
        return int(found[0])


async def get_pull(db: Database, repo: str, number: int) -> sqlite3.Row | None:
    return await db.fetchone("SELECT * FROM pulls WHERE repo = ? AND number = ?", (repo, number))


async def find_pull(db: Database, repo: dict, number: int) -> sqlite3.Row | None:
    """The PR of a payload's `repository`, by its id (by name for payloads without one)."""
    if isinstance(repo.get("id"), int):
        return await db.fetchone(
            "SELECT * FROM pulls WHERE repo_id = ? AND number = ?", (repo["id"], number)
        )
    return await get_pull(db, repo["full_name"], number)


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


RETRY_AFTER = 3600.0  # a head reviewed, stopped or held this recently is not reviewed again unasked


async def already_handled(db: Database, pull_id: int, head_sha: str, now: float) -> bool:
    """Whether an automatic review of this head would repeat one: it has a review under way
    or a draft, or one was stopped, failed or held in the last hour (close/reopen loops)."""
    row = await db.fetchone(
        "SELECT 1 FROM reviews WHERE pull_id = ? AND head_sha = ? AND (state IN"
        " ('queued', 'running', 'draft', 'revising', 'posting', 'posted') OR (state IN"
        " ('cancelled', 'failed', 'held') AND updated_at >= ?)) LIMIT 1",
        (pull_id, head_sha, now - RETRY_AFTER),
    )
    return row is not None


async def automatic_reviews_since(
    conn: aiosqlite.Connection, installation_id: int | None, author: str, since: float
) -> int:
    """Reviews started without anyone asking, of this author's PRs in the installation
    (inside the caller's transaction)."""
    cursor = await conn.execute(
        "SELECT COUNT(*) FROM reviews r JOIN pulls p ON p.id = r.pull_id"
        " WHERE COALESCE(p.installation_id, 0) = COALESCE(?, 0) AND p.author = ?"
        " AND r.requested_by IS NULL"
        " AND r.state != 'held' AND r.created_at >= ?",
        (installation_id, author, since),
    )
    row = await cursor.fetchone()
    return int(row[0]) if row else 0


async def update_review(db: Database, review_id: int, **fields: Any) -> None:
    """Write a review's details (progress, ids of its GitHub objects, …); its state and
    staleness change only through `bot.review.state`."""
    assert not {"state", "stale"} & fields.keys(), "use bot.review.state"
    fields["updated_at"] = time.time()
    await db.execute(
        f"UPDATE reviews SET {', '.join(f'{k} = ?' for k in fields)} WHERE id = ?",
        (*fields.values(), review_id),
    )


@dataclasses.dataclass(frozen=True)
class DraftFinding:
    """A finding of a new or revised draft before it has an `F` number: the reviewer's claim
    as placed on the diff, and the verify pass's verdict once one is known."""

    path: str
    severity: str
    title: str
    body: str
    line: int | None = None
    end_line: int | None = None
    side: str = "RIGHT"
    suggestion: str | None = None
    in_diff: bool = False
    verify_status: str | None = None
    verify_note: str | None = None


@dataclasses.dataclass(frozen=True)
class Finding:
    """A stored finding of a draft (a row of `findings`), whichever backend it came from."""

    id: int
    review_id: int
    ordinal: int  # its `F` number on the PR
    path: str
    line: int | None
    end_line: int | None
    side: str  # RIGHT (head) or LEFT (base)
    severity: str
    title: str
    body: str
    suggestion: str | None
    in_diff: bool  # on a line of the diff: an inline comment, else in the review body
    verify_status: str | None  # confirmed | refuted | uncertain; None: not verified
    verify_note: str | None
    state: str  # kept | dropped | skipped | withdrawn (see bot.review.state)
    checked_by: str | None  # human, auto, or the provider that withdrew it

    @classmethod
    def from_row(cls, row: Any) -> Finding:
        """The one place a backend's row (sqlite3.Row, a Postgres row) becomes a record."""
        values = {f.name: row[f.name] for f in dataclasses.fields(cls)}
        return cls(**{**values, "in_diff": bool(values["in_diff"])})


async def load_findings(db: Database, review_id: int) -> list[Finding]:
    """A review's findings in `F` order."""
    rows = await db.fetchall(
        "SELECT * FROM findings WHERE review_id = ? ORDER BY ordinal", (review_id,)
    )
    return [Finding.from_row(row) for row in rows]


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


async def prune_closed_reviews(db: Database, older_than: float, chunk: int) -> int:
    """Delete the reviews and findings of PRs closed before `older_than`, `chunk` rows at a
    time; their runs stay in the cost ledger."""
    closed = "SELECT id FROM pulls WHERE state = 'closed' AND updated_at < ?"
    total = 0
    for sql in (
        "DELETE FROM findings WHERE id IN (SELECT f.id FROM findings f JOIN reviews r"
        f" ON r.id = f.review_id WHERE r.pull_id IN ({closed}) LIMIT ?)",
        f"DELETE FROM reviews WHERE id IN (SELECT id FROM reviews WHERE pull_id IN ({closed})"
        " LIMIT ?)",
    ):
        total += await delete_in_chunks(db, sql, older_than, chunk)
    return total
