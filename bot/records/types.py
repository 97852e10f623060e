"""The records the database hands out, one frozen dataclass per kind of row."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Self

from bot.records.vocab import CheckedBy, FindingState


class Record:
    """`from_row` for a frozen dataclass whose fields are columns of one row (either backend's):
    a `bool` field reads the backend's 0/1, one with `metadata={"json": COLUMN}` decodes it."""

    @classmethod
    def from_row(cls, row: Any) -> Self:
        values = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "json" in field.metadata:
                values[field.name] = json.loads(row[field.metadata["json"]])
            else:
                value = row[field.name]
                values[field.name] = bool(value) if field.type == "bool" else value
        return cls(**values)

    @classmethod
    async def one(cls, db: Any, sql: str, args: Sequence[Any] = ()) -> Self | None:
        row = await db.fetchone(sql, args)
        return cls.from_row(row) if row else None

    @classmethod
    async def all(cls, db: Any, sql: str, args: Sequence[Any] = ()) -> list[Self]:
        return [cls.from_row(row) for row in await db.fetchall(sql, args)]


@dataclasses.dataclass(frozen=True)
class Pull(Record):
    id: int
    installation_id: int | None
    repo: str  # owner/name
    number: int
    head_sha: str | None
    base_ref: str | None
    clone_url: str | None
    html_url: str | None
    title: str | None
    body: str | None
    author: str | None
    state: str  # open | closed
    draft: bool
    updated_at: float | None
    repo_id: int | None  # GitHub's id: a renamed repository keeps it


@dataclasses.dataclass(frozen=True)
class Review(Record):
    """One review of a PR head (its state: `bot.records.review_state`)."""

    id: int
    pull_id: int
    head_sha: str
    state: str
    stale: bool
    provider: str | None
    verdict: str | None
    summary: str | None
    error: str | None
    progress: str | None
    pending_review_id: int | None
    check_run_id: int | None
    status_comment_id: int | None
    skill_version_id: int | None
    run_id: int | None
    posted_by: str | None
    posted_event: str | None
    not_reviewed: str  # JSON: [[path, why], …]
    config_error: str | None
    created_at: float
    updated_at: float
    posted_at: float | None
    revision: int
    revision_note: str | None  # JSON (see bot.review.revise)
    base_sha: str | None
    verify_provider: str | None
    verify_error: str | None
    reason: str | None  # what started it: opened, synchronize, command …
    requested_by: str | None
    run_owner: str | None  # the job attempt that runs it
    rules: str | None  # JSON: the rules its draft was made under (see bot.review.rules)
    ledger: str | None = None  # JSON: what its push did to the findings (bot.review.ledger)
    suppressed: int = 0  # findings it raised again after a person dropped them: left out


@dataclasses.dataclass(frozen=True)
class DraftFinding:
    """A finding of a new or revised draft before it has an `F` number."""

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
class Finding(Record):
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
    verify_status: str | None  # a VerifyStatus; None: not verified
    verify_note: str | None
    state: str  # a FindingState, changed by bot.records.review_state
    checked_by: str | None  # a CheckedBy, or the provider that withdrew it
    why: str | None = None  # a person's reason for dropping it (`drop F2 <why>`)
    dropped_by: str | None = None  # the login of the person who dropped it

    @property
    def dropped_by_person(self) -> bool:
        """A person's no (`drop F2`), not a revision's withdrawal or a verify refutation."""
        return self.state == FindingState.DROPPED and self.checked_by == CheckedBy.HUMAN


@dataclasses.dataclass(frozen=True)
class LedgerEntry(Record):
    """One `F` number of a PR for the PR's life: what identifies its finding across pushes
    (never its line), and what happened to it that is not a finding's state."""

    pull_id: int
    ordinal: int
    fingerprint: str
    path: str
    code_key: str  # the code it points at, whitespace collapsed, hashed ('' when unknown)
    title_key: str  # its title's words, normalised
    first_review_id: int
    fixed_in: str | None  # the head sha that fixed it
    fixed_review_id: int | None  # the review that found it fixed
    suppressed: int  # times it was raised again after a person dropped it


@dataclasses.dataclass(frozen=True)
class Session(Record):
    """A model conversation: a reviewer's (primary), a critic's (child) or a verifier's."""

    id: int
    provider: str
    model: str
    role: str  # primary | child | verify
    status: str  # active | busy | ended | failed
    pull_id: int | None
    review_id: int | None
    parent_session_id: int | None


@dataclasses.dataclass(frozen=True)
class CrossReview(Record):
    """A child session critiquing its parent's draft (a `session_reviews` row)."""

    id: int
    parent_session_id: int
    child_session_id: int
    child_adapter: str  # the child's provider
    anchor_message_id: str | None
    anchor_comment_id: int | None
    review_prompt: str | None
    review_title: str | None
    message_count: int
    started_at: float
    ended_at: float | None


@dataclasses.dataclass(frozen=True)
class Message(Record):
    """One native message of a session (a provider's own shape)."""

    session_id: int
    seq: int
    id: str  # msg-<seq>
    role: str
    item: dict[str, Any] = dataclasses.field(metadata={"json": "content"})
    github_comment_id: int | None
    source: str | None  # the command (comment:line) a person's message came from


@dataclasses.dataclass(frozen=True)
class Skill:
    id: int
    name: str
    sha256: str
    text: str


@dataclasses.dataclass(frozen=True)
class Job(Record):
    """A job of either backend's queue; `attempts` counts the running one."""

    id: int
    kind: str
    queue: str
    key: str
    payload: dict[str, Any] = dataclasses.field(metadata={"json": "payload"})
    attempts: int
    max_attempts: int


@dataclasses.dataclass(frozen=True)
class StoredDelivery(Record):
    id: str
    event: str
    installation_id: int | None
    repo: str | None
    body: bytes  # zlib-compressed
    status: str  # queued | done | ignored | failed


@dataclasses.dataclass(frozen=True)
class EvalRun(Record):
    id: int
    provider: str
    model: str
    verify: bool
    verify_provider: str | None
    options: str  # JSON: the batch's options


@dataclasses.dataclass(frozen=True)
class EvalCase(Record):
    id: int
    head_sha: str
    wall_seconds: float | None
    scores: str | None  # JSON: what the report needs besides the counts


@dataclasses.dataclass(frozen=True)
class StoredEvalFinding(Record):
    ordinal: int | None
    path: str | None
    line: int | None
    end_line: int | None
    severity: str | None
    title: str | None
    body: str | None
    verify_status: str | None
    verify_note: str | None
