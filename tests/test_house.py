"""The structure the code promises: one command list, one writer of review state."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.commands.catalog import COMMANDS
from bot.commands.run import HANDLERS

ROOT = Path(__file__).resolve().parent.parent


def readme_command_rows() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Commands") :]
    table = section[section.index("| command | effect |") :].split("\n\n", 1)[0]
    return table.splitlines()[2:]


def test_the_readme_lists_exactly_the_commands_the_bot_runs():
    expected = [
        f"| `/cockpit {spec.usage.replace('|', chr(92) + '|')}` | {spec.what} |"
        for spec in COMMANDS
    ]
    assert readme_command_rows() == expected
    assert set(HANDLERS) == {spec.name for spec in COMMANDS}


OWNERS = {
    # what is written: (the pattern of a write, the one module allowed to write it)
    "reviews.state": (r"UPDATE reviews SET[^\"]*\b(state|stale)\s*=", "bot/review/state.py"),
    "findings.state": (
        r"(UPDATE findings SET[^\"]*\bstate\s*=|INSERT INTO findings)",
        "bot/review/state.py",
    ),
    "sessions": (
        r"(UPDATE sessions SET|INSERT INTO sessions|DELETE FROM sessions)",
        "bot/sessions/store.py",
    ),
    "session_reviews": (
        r"(UPDATE|INSERT INTO|DELETE FROM) session_reviews",
        "bot/sessions/store.py",
    ),
}


@pytest.mark.parametrize("what", sorted(OWNERS))
def test_each_state_has_one_writer(what):
    pattern, owner = OWNERS[what]
    writes = re.compile(pattern, re.S)
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if writes.search(path.read_text()) and str(path.relative_to(ROOT)) != owner
    ]
    assert offenders == []


def test_every_server_model_run_gets_the_daily_budget():
    """A run's Budget carries the installation's daily limits (checked as the run starts):
    outside eval replays (charged to no installation) it is built from the settings."""
    built = re.compile(r"\bBudget\(")
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if built.search(path.read_text())
        and not str(path.relative_to(ROOT)).startswith(("bot/evals/", "bot/agents/base.py"))
    ]
    assert offenders == []
