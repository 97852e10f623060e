"""The structure the code promises: one command list, one writer of review state."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bot.catalog import COMMANDS
from bot.commands.run import HANDLERS
from bot.records import review_state

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
    "reviews.state": (
        r"UPDATE reviews SET[^\"]*\b(state|stale)\s*=",
        "bot/records/review_state.py",
    ),
    "findings.state": (
        r"(UPDATE findings SET[^\"]*\bstate\s*=|INSERT INTO findings)",
        "bot/records/review_state.py",
    ),
    "sessions": (
        r"(UPDATE sessions SET|INSERT INTO sessions|DELETE FROM sessions)",
        "bot/records/sessions.py",
    ),
    "session_reviews": (
        r"(UPDATE|INSERT INTO|DELETE FROM) session_reviews",
        "bot/records/sessions.py",
    ),
    "messages": (r"(UPDATE|INSERT INTO) messages\b", "bot/records/messages.py"),
    "jobs": (r"(UPDATE|INSERT INTO|DELETE FROM) jobs\b", "bot/records/jobs.py"),
}
# The schema's triggers belong to their table's definition, not to a writer of its rows.
TRIGGER = re.compile(r"CREATE TRIGGER .*?\bEND;", re.S)


def production_sources() -> dict[str, str]:
    """bot/ and handlers/, the stand-ins left out (they play GitHub and the models)."""
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for folder in ("bot", "handlers")
        for path in (ROOT / folder).rglob("*.py")
        if "standin" not in path.parts
    }


@pytest.mark.parametrize("what", sorted(OWNERS))
def test_each_state_has_one_writer(what):
    pattern, owner = OWNERS[what]
    writes = re.compile(pattern, re.S)
    writers = [
        name for name, text in production_sources().items() if writes.search(TRIGGER.sub("", text))
    ]
    assert writers == [owner]


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


def test_only_the_review_state_machine_runs_its_sql():
    """`bot.records.review_state` writes review and finding state through named transitions;
    its generic moves are private and nothing else reaches them (or imports a private name)."""
    private = re.compile(
        r"review_state\._|from bot\.records\.review_state import [^\n]*\b_|"
        r"from bot\.records\.review_state import \(\s*[^)]*\b_"
    )
    offenders = [
        name
        for name, text in production_sources().items()
        if name != "bot/records/review_state.py" and private.search(text)
    ]
    assert offenders == []
    generic = [name for name in vars(review_state) if name.startswith("move") or name == "insert"]
    assert generic == []


SQL = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER)\b")


def sql_literals(source: str) -> list[str]:
    """String literals (and f-strings) that start with a SQL statement's first word."""
    found = []
    for node in ast.walk(ast.parse(source)):
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            text = first.value if isinstance(first, ast.Constant) else None
        if text and SQL.match(text):
            found.append(text.strip()[:60])
    return found


def test_sql_lives_only_in_the_records_floor():
    """Every statement is bot/records/'s: above it, code calls the floor's functions and
    reads typed records (the stand-ins, which play GitHub and the models, are not the bot)."""
    offenders = {
        name: literals
        for name, text in production_sources().items()
        if not name.startswith("bot/records/") and (literals := sql_literals(text))
    }
    assert offenders == {}
    assert sql_literals(ROOT.joinpath("bot/records/jobs.py").read_text())  # it can see SQL
