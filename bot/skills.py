"""The review "skill" (system prompts in templates/prompts/), versioned by content hash."""

from __future__ import annotations

import hashlib
from importlib import resources

from bot.records.database import Database
from bot.records.skills import skill_version
from bot.records.types import Skill


def prompt_text(name: str) -> str:
    return resources.files("templates").joinpath("prompts", f"{name}.md").read_text()


async def load_skill(db: Database, name: str = "review") -> Skill:
    """Store this prompt's version (once per content hash) and return it with its id."""
    text = prompt_text(name)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Skill(await skill_version(db, name, digest, text), name, digest, text)
