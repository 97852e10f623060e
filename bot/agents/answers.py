"""The final answers (`submit_review`, `submit_verification`) as msgspec structs, told in words."""

from __future__ import annotations

import re
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
_REF = re.compile(r"\s*F?(\d+)\s*", re.I)
FIXED = (
    'F numbers (e.g. "F3") of earlier findings you were shown that this head fixes or that '
    "no longer apply"
)
EVIDENCE = "What you read, as path:line, and why it confirms or refutes the finding"
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


class Verdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    finding: Positive
    status: VerifyStatus
    evidence: Annotated[str, Meta(pattern=NON_BLANK, description=EVIDENCE)]


class Verdicts(msgspec.Struct, forbid_unknown_fields=True):
    """Submit one verdict per finding, once, when you are done checking. `finding` is the
    finding's number (F1 is 1)."""

    verdicts: list[Verdict]


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


def parse_verification(data: Any, *, count: int) -> dict[int, Verdict]:
    """The verdicts on a draft of `count` findings ("F2" is read as 2); a finding the verifier
    skipped is `uncertain`."""
    items = data.get("verdicts") if isinstance(data, dict) else None
    if isinstance(items, list):
        items = [_numbered(item) for item in items]
        data = {**data, "verdicts": items}
    found = problems(data, Verdicts) + [
        Problem(("verdicts", n, "finding"), "range", item["finding"])
        for n, item in enumerate(items or [])
        if isinstance(item, dict) and type(item.get("finding")) is int and item["finding"] > count
    ]
    bounds = {"ge": 1, "le": count}
    found = [replace(p, limits=bounds) if p.key == "finding" else p for p in found]
    if found:
        raise InvalidAnswer(told(found))
    verdicts = {
        v.finding: Verdict(v.finding, v.status, " ".join(v.evidence.split())[:MAX_EVIDENCE])
        for v in decode(data, Verdicts).verdicts
    }
    skipped = say(PEOPLE, "no_verdict")
    for ordinal in range(1, count + 1):
        verdicts.setdefault(ordinal, Verdict(ordinal, VerifyStatus.UNCERTAIN, skipped))
    return verdicts


def _numbered(item: Any) -> Any:
    ref = item.get("finding") if isinstance(item, dict) else None
    match = _REF.fullmatch(ref) if isinstance(ref, str) else None
    return {**item, "finding": int(match.group(1))} if match else item


SUBMIT_REVIEW = FinalAnswer(tool("submit_review", Submission), parse_submission, "submit_nudge")
VERIFY_TOOL = tool("submit_verification", Verdicts)


def submit_verification(count: int) -> FinalAnswer:
    parse = partial(parse_verification, count=count)
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
