"""The review "skill" (system prompts in templates/prompts/), versioned by content hash."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from importlib import resources

from bot.records.sqlite import Database


@dataclass(frozen=True)
class Skill:
    id: int
    name: str
    sha256: str
    text: str


def prompt_text(name: str) -> str:
    return resources.files("templates").joinpath("prompts", f"{name}.md").read_text()


async def load_skill(db: Database, name: str = "review") -> Skill:
    """Store this prompt's version (once per content hash) and return it with its id."""
    text = prompt_text(name)
    digest = hashlib.sha256(text.encode()).hexdigest()
    await db.execute(
        "INSERT INTO skill_versions (name, sha256, body, created_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (sha256) DO NOTHING",
        (name, digest, text, time.time()),
    )
    row = await db.fetchone("SELECT id FROM skill_versions WHERE sha256 = ?", (digest,))
    return Skill(row["id"], name, digest, text)
