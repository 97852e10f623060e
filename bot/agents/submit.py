"""`submit_review`: the reviewer's final answer — its JSON schema, validation and de-duplication."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bot.records.vocab import Severity, Verdict
from bot.texts import MODEL, say

SUBMIT_REVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "description": "Markdown overview of the change and risks"},
        "verdict": {"type": "string", "enum": list(Verdict)},
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                    "side": {"type": "string", "enum": ["LEFT", "RIGHT"]},
                    "severity": {"type": "string", "enum": list(Severity)},
                    "title": {"type": "string"},
                    "body": {"type": "string"},
                    "suggestion": {"type": "string"},
                },
                "required": ["path", "severity", "title", "body"],
                "additionalProperties": False,
            },
        },
        "resolved": {
            "type": "array",
            "description": 'F numbers (e.g. "F3") of earlier findings you were shown that '
            "this head fixes or that no longer apply",
            "items": {"type": "string", "pattern": "^F[0-9]+$"},
        },
    },
    "required": ["summary", "verdict", "findings"],
    "additionalProperties": False,
}
_RESOLVED = re.compile(r"F[0-9]+")

SUBMIT_TOOL = {
    "name": "submit_review",
    "description": "Submit your finished review. Call exactly once, when you are done exploring. "
    "Each finding points at a line of the head version (side RIGHT) or, for "
    "removed code, the base version (side LEFT).",
    "parameters": SUBMIT_REVIEW_SCHEMA,
}


@dataclass(frozen=True)
class Finding:
    path: str
    severity: str
    title: str
    body: str
    line: int | None = None
    end_line: int | None = None
    side: str = "RIGHT"
    suggestion: str | None = None


@dataclass(frozen=True)
class ReviewDraft:
    summary: str
    verdict: str
    findings: tuple[Finding, ...]
    resolved: tuple[int, ...] = ()  # earlier findings (F numbers) this head fixed


class InvalidAnswer(ValueError):
    """A final tool's input does not match its schema; the message says how (repair turn)."""


class InvalidReview(InvalidAnswer):
    """The model's `submit_review` input does not match the schema; the message says how."""


def _problems(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return [say(MODEL, "invalid_answer", why="not_object")]
    required = SUBMIT_REVIEW_SCHEMA["required"]
    problems = [
        say(MODEL, "invalid_answer", why="missing", key=key) for key in required if key not in data
    ]
    extra = set(data) - set(SUBMIT_REVIEW_SCHEMA["properties"])
    if extra:
        problems.append(say(MODEL, "invalid_answer", why="unexpected", keys=sorted(extra)))
    if "summary" in data and not isinstance(data["summary"], str):
        problems.append(say(MODEL, "invalid_answer", why="summary"))
    if "verdict" in data and data["verdict"] not in tuple(Verdict):
        problems.append(say(MODEL, "invalid_answer", why="verdict", choices=tuple(Verdict)))
    resolved = data.get("resolved", [])
    if not isinstance(resolved, list) or not all(
        isinstance(r, str) and _RESOLVED.fullmatch(r) for r in resolved
    ):
        problems.append(say(MODEL, "invalid_answer", why="resolved"))
    findings = data.get("findings", [])
    if not isinstance(findings, list):
        return [*problems, say(MODEL, "invalid_answer", why="findings")]
    for n, item in enumerate(findings):
        where = f"findings[{n}]"
        if not isinstance(item, dict):
            problems.append(say(MODEL, "invalid_answer", why="item_object", where=where))
            continue
        for key in ("path", "severity", "title", "body"):
            if not isinstance(item.get(key), str) or not item.get(key, "").strip():
                problems.append(
                    say(MODEL, "invalid_answer", why="non_empty", where=f"{where}.{key}")
                )
        if item.get("severity") not in tuple(Severity):
            problems.append(
                say(
                    MODEL,
                    "invalid_answer",
                    why="one_of",
                    where=f"{where}.severity",
                    choices=tuple(Severity),
                )
            )
        for key in ("line", "end_line"):
            value = item.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                problems.append(
                    say(MODEL, "invalid_answer", why="positive", where=f"{where}.{key}")
                )
        if item.get("side", "RIGHT") not in ("LEFT", "RIGHT"):
            problems.append(say(MODEL, "invalid_answer", why="side", where=where))
        if "suggestion" in item and not isinstance(item["suggestion"], str):
            problems.append(say(MODEL, "invalid_answer", why="suggestion", where=where))
        extra = set(item) - set(
            SUBMIT_REVIEW_SCHEMA["properties"]["findings"]["items"]["properties"]
        )
        if extra:
            problems.append(
                say(MODEL, "invalid_answer", why="item_unexpected", where=where, keys=sorted(extra))
            )
    return problems


def parse_submission(data: Any) -> ReviewDraft:
    """Validate against the schema (raise InvalidReview listing every problem), then dedupe."""
    problems = _problems(data)
    if problems:
        raise InvalidReview("; ".join(problems[:20]))
    findings = []
    for item in data["findings"]:
        line = item.get("line")
        end_line = item.get("end_line")
        if line is not None and end_line is not None and end_line < line:
            line, end_line = end_line, line
        if end_line == line:
            end_line = None
        findings.append(
            Finding(
                path=item["path"].strip().lstrip("/"),
                severity=item["severity"],
                title=" ".join(item["title"].split())[:200],
                body=item["body"].strip(),
                line=line,
                end_line=end_line,
                side=item.get("side", "RIGHT"),
                suggestion=item.get("suggestion") or None,
            )
        )
    resolved = {int(r[1:]) for r in data.get("resolved", [])}  # checked: F and digits
    return ReviewDraft(
        summary=data["summary"].strip(),
        verdict=data["verdict"],
        findings=tuple(dedupe(findings)),
        resolved=tuple(sorted(set(resolved))),
    )


def dedupe(findings: list[Finding]) -> list[Finding]:
    """Merge findings on the same place with the same title, keeping the most severe."""
    rank = Severity.rank
    kept: dict[tuple, Finding] = {}
    for finding in findings:
        key = (finding.path, finding.line, finding.side, finding.title.casefold())
        other = kept.get(key)
        if other is None or rank(finding.severity) < rank(other.severity):
            kept[key] = finding
    return sorted(kept.values(), key=lambda f: (rank(f.severity), f.path, f.line or 0))
