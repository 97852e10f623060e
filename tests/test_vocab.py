"""The stored vocabularies: one spelling each, equal to what rows already hold."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

import pytest

from bot.records import vocab
from bot.records.vocab import (
    CheckedBy,
    DeliveryStatus,
    FindingState,
    JobState,
    LedgerStatus,
    ReviewState,
    RunStatus,
    SessionRole,
    SessionStatus,
    Severity,
    Verdict,
    VerifyStatus,
)

ROOT = Path(__file__).resolve().parent.parent

# What databases written by earlier releases hold: these strings never change.
STORED = [
    (ReviewState, "queued running draft revising posting posted failed cancelled superseded held"),
    (FindingState, "kept dropped skipped withdrawn"),
    (CheckedBy, "human auto"),
    (Severity, "critical major minor nit"),
    (Verdict, "comment request_changes"),
    (VerifyStatus, "confirmed refuted uncertain"),
    (SessionStatus, "active busy ended failed"),
    (SessionRole, "primary child verify part"),
    (JobState, "queued waiting running done failed cancelled"),
    (DeliveryStatus, "queued done ignored failed"),
    (RunStatus, "running done failed cancelled"),
    (LedgerStatus, "open published dropped withdrawn fixed"),
]


@pytest.mark.parametrize(("enum", "values"), STORED, ids=lambda v: getattr(v, "__name__", ""))
def test_each_vocabulary_spells_what_rows_hold(enum, values):
    assert [member.value for member in enum] == values.split()
    assert all(member == member.value and f"{member}" == member.value for member in enum)


@pytest.mark.parametrize(
    ("severity", "rank"),
    [("critical", 0), ("major", 1), ("minor", 2), ("nit", 3), ("blocker", 4), ("", 4)],
)
def test_severity_rank_puts_unknown_ones_last(severity, rank):
    assert Severity.rank(severity) == rank


def test_groups_and_the_sql_of_a_persons_drop():
    assert vocab.sql_in(vocab.ACTIVE) == "('queued', 'running')"
    assert vocab.sql_in(vocab.DRAFTED) == "('draft', 'revising', 'posting', 'posted')"
    assert vocab.dropped_by_person() == "state = 'dropped' AND checked_by = 'human'"
    assert vocab.dropped_by_person("f") == "f.state = 'dropped' AND f.checked_by = 'human'"


# A state compared or set in the floor's SQL: `state = 'x'`, `status != 'x'`, `IN ('x', …)`.
LITERAL = re.compile(
    r"\b(?:state|status|role|checked_by|verify_status)\s*(?:=|!=|IN|NOT IN)\s*"
    r"(\('[^)]*\)|'[a-z_]+')"
)
# Not ours: a PR's state is GitHub's; procrastinate's job statuses are its own.
FOREIGN = {"open", "closed", "todo", "doing"}


def test_every_state_the_floors_sql_spells_is_in_a_vocabulary():
    known = {
        m.value
        for e in vars(vocab).values()
        if isinstance(e, type) and issubclass(e, StrEnum)
        for m in e
    }
    found = set()
    for path in (ROOT / "bot" / "records").glob("*.py"):
        for match in LITERAL.finditer(path.read_text()):
            found |= set(re.findall(r"'([a-z_]+)'", match.group(1)))
    assert found and found - FOREIGN <= known, found - FOREIGN - known
