"""People's stored sign-ins (`user_tokens`, sealed by bot/auth) and used sign-in states."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.records.database import Connection, Database
from bot.records.types import Record


@dataclass(frozen=True)
class SealedToken(Record):
    user_id: int
    login: str
    sealed: bytes
    updated_at: float


async def sealed_token(db: Database, user_id: int) -> SealedToken | None:
    row = await db.fetchone(
        "SELECT user_id, login, sealed, updated_at FROM user_tokens WHERE user_id = ?",
        (user_id,),
    )
    if row is None:
        return None
    return SealedToken(row["user_id"], row["login"], bytes(row["sealed"]), row["updated_at"])


async def store_token(
    db: Database | Connection, user_id: int, login: str, sealed: bytes, now: float
) -> None:
    await db.execute(
        "INSERT INTO user_tokens (user_id, login, sealed, updated_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (user_id) DO UPDATE SET login = excluded.login,"
        " sealed = excluded.sealed, updated_at = excluded.updated_at",
        (user_id, login, sealed, now),
    )


async def replace_token(db: Database, user_id: int, was: float, sealed: bytes, now: float) -> bool:
    """The refreshed pair, unless the row changed since it was read at `was` (deleted by a
    revocation, or stored again by a new sign-in)."""
    count = await db.execute(
        "UPDATE user_tokens SET sealed = ?, updated_at = ? WHERE user_id = ? AND updated_at = ?",
        (sealed, now, user_id, was),
    )
    return count == 1


async def delete_token(db: Database, user_id: int, was: float | None = None) -> int:
    """With `was`: only the row read then (not one a new sign-in stored meanwhile)."""
    if was is None:
        return await db.execute("DELETE FROM user_tokens WHERE user_id = ?", (user_id,))
    return await db.execute(
        "DELETE FROM user_tokens WHERE user_id = ? AND updated_at = ?", (user_id, was)
    )


async def delete_token_of(db: Database, login: str) -> int:
    return await db.execute("DELETE FROM user_tokens WHERE login = ?", (login,))


async def state_used(db: Any, nonce: str) -> bool:
    """Whether a sign-in state was used already (before GitHub is asked anything)."""
    return (
        await db.fetchone("SELECT 1 AS used FROM sign_in_states WHERE nonce = ?", (nonce,))
        is not None
    )


async def use_state(conn: Any, nonce: str, expires_at: float, now: float) -> bool:
    """Mark a sign-in state used; False when it was used before. States past their expiry
    are forgotten as new ones are used (an expired one is refused before it gets here)."""
    await conn.execute("DELETE FROM sign_in_states WHERE expires_at < ?", (now,))
    cursor = await conn.execute(
        "INSERT INTO sign_in_states (nonce, expires_at) VALUES (?, ?)"
        " ON CONFLICT (nonce) DO NOTHING RETURNING nonce",
        (nonce, expires_at),
    )
    return await cursor.fetchone() is not None
