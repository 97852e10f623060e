"""The final answers (`submit_review`, `submit_verification`) as msgspec structs, told in words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from bot.inputs import Problem, decode, json_schema, problems
from bot.records import vocab
from bot.records.types import DraftFinding
from bot.records.vocab import Severity, VerifyStatus
from bot.texts import MODEL, PEOPLE, say

NON_BLANK = r"\S"
MAX_EVIDENCE = 1000
MAX_FOUND_EVIDENCE = 2000  # a finding's: quoted lines and the input that fails
MAX_PROBLEMS = 20
FIXED = (
    'F numbers (e.g. "F3") of earlier findings you were shown that this head fixes or that '
    "no longer apply"
)
EVIDENCE = "What you read, as path:line, and why it confirms or refutes the finding"
REPRODUCTION = (
    "Required for `confirmed`: the input or state that triggers the problem -> the path:line "
    "it reaches -> the wrong result there. A `confirmed` without one counts as `uncertain`"
)
WOULD_POST = "Whether a senior reviewer of this repository would post this finding on the PR"
LOWER = (
    "Only to lower the finding's severity when it is real but less serious than it says; "
    "never higher. Leave it out to keep the severity"
)
FOUND_EVIDENCE = (
    "The line(s) you point at, quoted from the code, and the concrete input, call or path "
    "through the code that makes them go wrong"
)
CONFIDENCE = (
    "How sure you are that this is a real defect the pull request introduces, from 0 to 100: "
    "90 or more when you traced the trigger to the wrong result in the code, below 50 when "
    "it is a suspicion you could not confirm"
)

NonBlank = Annotated[str, Meta(pattern=NON_BLANK)]
Positive = Annotated[int, Meta(ge=1)]
Percent = Annotated[int, Meta(ge=0, le=100)]
FNumber = Annotated[str, Meta(pattern="^F[0-9]+$")]


class InvalidAnswer(ValueError):
    """The message says what to fix (one repair turn)."""


class SubmittedFinding(msgspec.Struct, forbid_unknown_fields=True):
    path: NonBlank
    severity: Severity
    title: NonBlank
    body: NonBlank
    evidence: Annotated[str, Meta(pattern=NON_BLANK, description=FOUND_EVIDENCE)]
    confidence: Annotated[Percent, Meta(description=CONFIDENCE)]
    line: Positive | None = None
    end_line: Positive | None = None
    side: Literal["LEFT", "RIGHT"] = "RIGHT"
    suggestion: str | None = None


class Submission(msgspec.Struct, forbid_unknown_fields=True):
    """Submit your finished review. Call exactly once, when you are done exploring. Each
    finding points at a line of the head version (side RIGHT) or, for removed code, the base
    version (side LEFT)."""

    summary: Annotated[str, Meta(description="Markdown overview of the change and risks")]
    verdict: vocab.Verdict
    findings: list[SubmittedFinding]
    resolved: Annotated[list[FNumber], Meta(description=FIXED)] = []


class Check(msgspec.Struct, forbid_unknown_fields=True):
    """Submit your verdict on the one finding you were given, once, when you are done
    checking. `uncertain` unless the code settles it."""

    status: VerifyStatus
    evidence: Annotated[str, Meta(pattern=NON_BLANK, description=EVIDENCE)]
    would_post: Annotated[bool, Meta(description=WOULD_POST)]
    reproduction: Annotated[str | None, Meta(description=REPRODUCTION)] = None
    severity: Annotated[Severity | None, Meta(description=LOWER)] = None


@dataclass(frozen=True)
class Verdict:
    """The verifier's word on the draft's finding number `finding`, as it is kept: a
    `confirmed` without a reproduction is already `uncertain` here, and `severity` is set
    only when the verifier lowered it."""

    finding: int
    status: str
    evidence: str
    reproduction: str | None = None
    severity: str | None = None  # lowered to; None: as the reviewer said
    would_post: bool | None = None  # whether a senior reviewer would post it
    unreproduced: bool = False  # said `confirmed` without a reproduction


@dataclass(frozen=True)
class ReviewDraft:
    summary: str
    verdict: str
    findings: tuple[DraftFinding, ...]
    resolved: tuple[int, ...] = ()  # earlier findings (F numbers) this head fixed


def tool(name: str, shape: type) -> dict[str, Any]:
    parameters = json_schema(shape)
    parameters.pop("title")
    description = " ".join(parameters.pop("description").split())
    return {"name": name, "description": description, "parameters": parameters}


@dataclass(frozen=True)
class FinalAnswer:
    tool: dict[str, Any]
    parse: Callable[[Any], Any]  # raises InvalidAnswer saying what to fix (one repair turn)
    nudge: str  # the prompt sent once when the model ends its turn without calling the tool
    acknowledgement: str = "submitted"  # the prompt the tool call is answered with
    # (answer or None, the budget as people are told, (files seen, files under review)) → the
    # answer of a turn a budget cut short; None: such a turn fails, its answer is as given
    short: Callable[[Any, str, tuple[int, int]], Any] | None = None

    @property
    def name(self) -> str:
        return str(self.tool["name"])


def parse_submission(data: Any) -> ReviewDraft:
    found = problems(data, Submission)
    if found:
        raise InvalidAnswer(told(found))
    submission = decode(data, Submission)
    return ReviewDraft(
        summary=submission.summary.strip(),
        verdict=submission.verdict,
        findings=tuple(dedupe([_draft(f) for f in submission.findings])),
        resolved=tuple(sorted({int(ref[1:]) for ref in submission.resolved})),
    )


def cut_short_review(
    draft: ReviewDraft | None, budget: str, coverage: tuple[int, int]
) -> ReviewDraft:
    """A review a budget cut short: the draft submitted (none: no findings), its summary saying
    which budget and what the model had seen."""
    seen, of = coverage
    submitted = draft is not None
    note = say(PEOPLE, "cut_short", budget=budget, submitted=submitted, seen=seen, of=of)
    if draft is None:
        return ReviewDraft(note, vocab.Verdict.COMMENT, ())
    return replace(draft, summary=f"{draft.summary}\n\n{note}")


def _draft(found: SubmittedFinding) -> DraftFinding:
    line, end_line = found.line, found.end_line
    if line is not None and end_line is not None and end_line < line:
        line, end_line = end_line, line
    return DraftFinding(
        path=found.path.strip().lstrip("/"),
        severity=found.severity,
        title=" ".join(found.title.split())[:200],
        body=found.body.strip(),
        line=line,
        end_line=None if end_line == line else end_line,
        side=found.side,
        suggestion=found.suggestion or None,
        evidence=found.evidence.strip()[:MAX_FOUND_EVIDENCE],
        confidence=found.confidence,
    )


def dedupe(findings: list[DraftFinding]) -> list[DraftFinding]:
    """Merge findings on the same place with the same title, keeping the most severe."""
    rank = Severity.rank
    kept: dict[tuple, DraftFinding] = {}
    for finding in findings:
        key = (finding.path, finding.line, finding.side, finding.title.casefold())
        other = kept.get(key)
        if other is None or rank(finding.severity) < rank(other.severity):
            kept[key] = finding
    return sorted(kept.values(), key=lambda f: (rank(f.severity), f.path, f.line or 0))


def parse_verification(data: Any, *, finding: int, severity: str) -> Verdict:
    """The verdict on finding number `finding` (of `severity`): a `confirmed` without a
    reproduction is taken as `uncertain`, a severity is kept only when it is lower."""
    found = problems(data, Check)
    if found:
        raise InvalidAnswer(told(found))
    check = decode(data, Check)
    status, reproduction = check.status, _said_once(check.reproduction)
    unreproduced = status == VerifyStatus.CONFIRMED and not reproduction
    if unreproduced:
        status = VerifyStatus.UNCERTAIN
    lowered = check.severity
    if lowered is not None and Severity.rank(lowered) <= Severity.rank(severity):
        lowered = None  # never raised (and the same severity changes nothing)
    return Verdict(
        finding,
        status,
        _said_once(check.evidence) or "",
        reproduction if status == VerifyStatus.CONFIRMED else None,
        lowered,
        check.would_post,
        unreproduced,
    )


def _said_once(text: str | None) -> str | None:
    """On one line, capped; None when blank."""
    return " ".join((text or "").split())[:MAX_EVIDENCE] or None


SUBMIT_REVIEW = FinalAnswer(
    tool("submit_review", Submission), parse_submission, "submit_nudge", short=cut_short_review
)
VERIFY_TOOL = tool("submit_verification", Check)


def submit_verification(finding: int, severity: str) -> FinalAnswer:
    parse = partial(parse_verification, finding=finding, severity=severity)
    return FinalAnswer(VERIFY_TOOL, parse, "verify_nudge", "verified")


def told(found: list[Problem]) -> str:
    """Problems as the model is told them; an object's unknown keys on one line, first."""
    unknown: dict[tuple, list[Any]] = {}
    for problem in found:
        if problem.why == "unknown":
            unknown.setdefault(problem.path[:-1], []).append(problem.got)
    said = [
        say(MODEL, "invalid_answer", why="unknown", where=_where(parent), keys=keys)
        for parent, keys in unknown.items()
    ]
    said += [_said(problem) for problem in found if problem.why != "unknown"]
    return "; ".join(said[:MAX_PROBLEMS])


def _where(path: tuple[str | int, ...]) -> str:
    where = Problem(path, "").where
    return f"`{where}`" if len(path) == 1 else where


def _said(problem: Problem) -> str:
    where = _where(problem.path) or "input"
    limits = problem.limits
    if problem.why in ("missing", "one_of"):
        return say(MODEL, "invalid_answer", why=problem.why, where=where, choices=problem.allowed)
    if limits.get("pattern") == NON_BLANK:
        return say(MODEL, "invalid_answer", why="non_empty", where=where)
    if "pattern" in limits:
        return say(MODEL, "invalid_answer", why="pattern", where=where, pattern=limits["pattern"])
    if "ge" in limits:
        low, high = limits["ge"], limits.get("le")
        return say(MODEL, "invalid_answer", why="integer", where=where, low=low, high=high)
    return say(MODEL, "invalid_answer", why="type", where=where, expected=problem.expected)
