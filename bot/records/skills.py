"""System prompts' versions (`skill_versions`), stored once per content hash."""

from __future__ import annotations

import time

from bot.records.database import Database


async def skill_version(db: Database, name: str, sha256: str, text: str) -> int:
    await db.execute(
        "INSERT INTO skill_versions (name, sha256, body, created_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (sha256) DO NOTHING",
        (name, sha256, text, time.time()),
    )
    row = await db.fetchone("SELECT id FROM skill_versions WHERE sha256 = ?", (sha256,))
    return int(row["id"])
