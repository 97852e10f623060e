"""The records the database hands out, one frozen dataclass per kind of row."""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections.abc import Sequence
from typing import Any, Self

import msgspec

from bot.records.vocab import CheckedBy, FindingState, Severity, VerifyStatus


@functools.cache
def _types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


class Record:
    """`from_row` for a frozen dataclass whose fields are columns of one row (either backend's):
    a `bool` field reads the backend's 0/1; one with `metadata={"json": COLUMN}` is that
    column's JSON text decoded to the field's type (NULL: its default), `columns` encodes it."""

    @classmethod
    def from_row(cls, row: Any) -> Self:
        values = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            if "json" in field.metadata:
                text = row[field.metadata["json"]]
                empty = None if field.default is dataclasses.MISSING else field.default
                values[field.name] = (
                    empty
                    if text is None
                    else msgspec.convert(json.loads(text), _types(cls)[field.name])
                )
            else:
                value = row[field.name]
                values[field.name] = bool(value) if field.type == "bool" else value
        return cls(**values)

    @classmethod
    def columns(cls, fields: dict[str, Any]) -> dict[str, Any]:
        """Values for these fields' columns, JSON ones as `json.dumps` writes them."""
        encoded = {f.name for f in dataclasses.fields(cls) if "json" in f.metadata}  # type: ignore[arg-type]
        return {
            k: json.dumps(msgspec.to_builtins(v)) if k in encoded and v is not None else v
            for k, v in fields.items()
        }

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
class UsedSource:
    source: str
    files: int  # reviewed files it is for; 0 for every file
    cut: bool


@dataclasses.dataclass(frozen=True)
class DraftRules:
    """The rules a draft was made under, stored with it so later config changes never apply
    (a review made before they were stored folds and caps nothing)."""

    commit: str | None = None  # the default branch's commit the instructions come from
    used: tuple[UsedSource, ...] = ()
    left_out: tuple[str, ...] = ()  # instruction sources left out whole (size budget)
    edited: tuple[str, ...] = ()  # steering files the PR edits: they apply after merge
    min_severity: str = Severity.NIT
    max_findings: int | None = None
    noise: tuple[str, ...] = ()  # changed files left out as noise
    noise_dropped: int = 0  # findings the reviewer placed on them, dropped
    ignored: tuple[str, ...] = ()  # changed files matching an `ignore` glob
    ignored_dropped: int = 0  # findings the reviewer placed on them, dropped
    verify_publish: str = "not_refuted"  # or "confirmed" (the repository's `verify_publish`)
    min_confidence: int = 0  # a finding the reviewer is less sure of is folded (0: none)

    def approvable(self, findings: list[Finding]) -> list[Finding]:
        """What a plain `approve` publishes and the pending review shows: kept findings the
        verify pass did not refute (with `verify_publish = "confirmed"`: that it confirmed),
        at or above `min_severity` (the others only when listed)."""
        return [
            f
            for f in findings
            if f.state == FindingState.KEPT and self.published(f) and not self.folds(f)
        ]

    def published(self, finding: Finding) -> bool:
        """Whether the verify pass's verdict lets a plain `approve` publish it."""
        if self.verify_publish == "confirmed":
            return finding.verify_status == VerifyStatus.CONFIRMED
        return finding.verify_status != VerifyStatus.REFUTED

    def folds(self, finding: Finding) -> bool:
        """Below `min_severity`, or drafted with a confidence below `min_confidence`: in the
        status comment's "minor" section, out of the pending review unless listed at
        `approve` (a finding drafted before confidences were asked is folded by severity)."""
        unsure = finding.confidence is not None and finding.confidence < self.min_confidence
        return unsure or Severity.rank(finding.severity) > Severity.rank(self.min_severity)

    def over_cap(self, findings: Sequence[Finding]) -> set[int]:
        """Of the findings going into a pending review, those past `max_findings` inline
        comments (the most severe go inline first, then in `F` order): summarised in its body."""
        if self.max_findings is None:
            return set()
        inline = sorted(
            (f for f in findings if f.in_diff), key=lambda f: (Severity.rank(f.severity), f.ordinal)
        )
        return {f.ordinal for f in inline[self.max_findings :]}


@dataclasses.dataclass(frozen=True)
class RevisionNote:
    """Who revised a draft after whose critique, and what it did to the `F` numbers."""

    by: str
    after: str
    kept: tuple[int, ...] = ()
    added: tuple[int, ...] = ()
    withdrawn: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()  # dropped by a person and reported again


@dataclasses.dataclass(frozen=True)
class LedgerNote:
    """What a push did to the PR's findings (bot.review.ledger), for the status comment."""

    since: str | None  # the head the delta starts from; None: whole PR reviewed
    head: str
    earlier: int  # numbers the PR had before this push
    new: tuple[int, ...]
    open: tuple[int, ...]
    published: tuple[int, ...]
    fixed: tuple[int, ...]
    fixed_published: tuple[int, ...]
    dropped: tuple[int, ...]
    suppressed: int
    unconfirmed: tuple[int, ...] = ()  # (notes stored before these were kept: none)
    not_open: tuple[int, ...] = ()
    resolve_error: str | None = None  # why GitHub refused to resolve the fixed ones' threads


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
    not_reviewed: tuple[tuple[str, str], ...] = dataclasses.field(
        metadata={"json": "not_reviewed"}
    )  # (path, why)
    config_error: str | None
    created_at: float
    updated_at: float
    posted_at: float | None
    revision: int
    revision_note: RevisionNote | None = dataclasses.field(metadata={"json": "revision_note"})
    base_sha: str | None
    verify_provider: str | None
    verify_error: str | None
    reason: str | None  # what started it: opened, synchronize, command …
    requested_by: str | None
    run_owner: str | None  # the job attempt that runs it
    rules: DraftRules = dataclasses.field(default=DraftRules(), metadata={"json": "rules"})
    ledger: LedgerNote | None = dataclasses.field(default=None, metadata={"json": "ledger"})
    suppressed: int = 0  # findings it raised again after a person dropped them: left out
    vetter: str | None = None  # whose pending review holds the draft (`vet`)
    vetter_review_id: int | None = None  # that person's pending review on GitHub

    def files_left_out(self) -> dict[str, str]:
        """The changed files its draft left out of the reviewer's diff, path → why: every
        later turn on it leaves them out too."""
        out = {*self.rules.noise, *self.rules.ignored}
        return {path: why for path, why in self.not_reviewed if path in out}


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
    evidence: str | None = None  # the quoted line(s) and the input that fails (None: older)
    confidence: int | None = None  # the reviewer's, 0-100 (None: drafted before it was asked)


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
    evidence: str | None = None  # the quoted line(s) and the input that fails (None: older)
    confidence: int | None = None  # the reviewer's, 0-100 (None: drafted before it was asked)
    vetted_text: str | None = None  # its comment in the vetter's pending review (None: not put)
    published_text: str | None = None  # as the vetter published it in their review
    edited: int | None = None  # 1: the vetter changed its text before publishing

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
    confidence: int | None = None  # NULL: stored before confidences were asked
