"""Every state a stored row can be in, and the groups of them the code asks about."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class ReviewState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DRAFT = "draft"
    REVISING = "revising"  # a draft while its revision is written to GitHub: not approvable
    POSTING = "posting"
    POSTED = "posted"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"  # a newer review of the PR was queued
    HELD = "held"  # not started: a policy or the server's state says why


ACTIVE = (ReviewState.QUEUED, ReviewState.RUNNING)  # reviews under way
DRAFTED = (ReviewState.DRAFT, ReviewState.REVISING, ReviewState.POSTING, ReviewState.POSTED)
STOPPED = (ReviewState.CANCELLED, ReviewState.FAILED, ReviewState.HELD)  # ended with no draft
# A review that will never show a draft: a newer one of these does not replace an older draft.
GONE = (ReviewState.FAILED, ReviewState.CANCELLED, ReviewState.SUPERSEDED)


class FindingState(StrEnum):
    KEPT = "kept"  # in the draft
    DROPPED = "dropped"  # by a person
    SKIPPED = "skipped"  # left out of a partial approve
    WITHDRAWN = "withdrawn"  # by the reviewer itself when it revised the draft


class CheckedBy(StrEnum):
    """Who last decided a finding's state (a withdrawn one names the provider that did)."""

    HUMAN = "human"
    AUTO = "auto"


class Severity(StrEnum):
    CRITICAL = "critical"
    MAJOR = "major"
    MINOR = "minor"
    NIT = "nit"

    @classmethod
    def rank(cls, value: str) -> int:
        """critical = 0 … nit = 3; anything else after nit."""
        order = list(cls)
        return order.index(value) if value in order else len(order)


class Verdict(StrEnum):
    COMMENT = "comment"
    REQUEST_CHANGES = "request_changes"


class VerifyStatus(StrEnum):
    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    UNCERTAIN = "uncertain"


class SessionStatus(StrEnum):
    ACTIVE = "active"
    BUSY = "busy"  # mid-turn
    ENDED = "ended"
    FAILED = "failed"


OPEN_SESSION = (SessionStatus.ACTIVE, SessionStatus.BUSY)


class SessionRole(StrEnum):
    PRIMARY = "primary"  # a reviewer's conversation
    CHILD = "child"  # a cross-review
    VERIFY = "verify"  # the verify pass's one turn
    PART = "part"  # a review's group or later pass besides its first (the primary) session


class JobState(StrEnum):
    QUEUED = "queued"
    WAITING = "waiting"  # behind its key's running or queued job
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


UNFINISHED_JOB = (JobState.QUEUED, JobState.RUNNING, JobState.WAITING)


class DeliveryStatus(StrEnum):
    QUEUED = "queued"
    DONE = "done"
    IGNORED = "ignored"
    FAILED = "failed"


class RunStatus(StrEnum):
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class LedgerStatus(StrEnum):
    """What became of an `F` number of a PR (read from its findings and the ledger)."""

    OPEN = "open"
    PUBLISHED = "published"
    DROPPED = "dropped"
    WITHDRAWN = "withdrawn"
    FIXED = "fixed"


def sql_in(values: Iterable[StrEnum]) -> str:
    """A group as a SQL list of literals, `('queued', 'running')` (our own constants only)."""
    return "(" + ", ".join(f"'{value}'" for value in values) + ")"


def dropped_by_person(table: str = "") -> str:
    """The one SQL spelling of "a person dropped this finding" (`table`: its alias)."""
    at = f"{table}." if table else ""
    return f"{at}state = '{FindingState.DROPPED}' AND {at}checked_by = '{CheckedBy.HUMAN}'"
