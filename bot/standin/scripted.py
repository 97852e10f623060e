"""A deterministic, offline reviewer policy for the model stand-ins.

It behaves like a careful (if simple) model: reads the PR's diff, looks closer at what it
flags, then submits findings for a fixed set of defect patterns on added lines. As a child
session it critiques the parent's draft in prose; after `send-back` it revises its draft. As a
verifier it reads each finding's line and refutes credentials that live in test code.
Used by `cockpit demo`, the offline eval golden set and the tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.standin.models import Action, Conversation, call, say

MODEL = "scripted-reviewer"
SEVERITIES = ("critical", "major", "minor", "nit")  # most serious first
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,\d+)? @@")
_FINDING = re.compile(r"^### Finding · \w+ · `([^`:]+)(?::(\d+))?", re.M)
_NUMBERED = re.compile(r"^\s*\d+\| ?(.*)$")
_TEST_CODE = re.compile(r"(^|/)(tests?/|test_[^/]*$)")
# how sure the scripted reviewer says it is, by severity: a pattern match on an added line is
# sure of a defect, less of its weight (every one at or above the default `min_confidence`)
CONFIDENCE = {"critical": 90, "major": 85, "minor": 70, "nit": 60}
TRIGGER = "any caller that reaches this line runs it"


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern
    severity: str
    title: str
    body: str


PATTERNS = (
    Pattern(
        re.compile(r"\beval\("),
        "critical",
        "eval() runs untrusted input",
        "`eval` executes arbitrary code from its argument; parse the value instead "
        "(e.g. `ast.literal_eval` or `int()`).",
    ),
    Pattern(
        re.compile(r"execute\(\s*f[\"']"),
        "critical",
        "SQL query built with an f-string",
        "Interpolating values into SQL allows injection; pass parameters separately.",
    ),
    Pattern(
        re.compile(r"(password|secret|api_key|token)\s*=\s*[\"'][^\"']{4,}[\"']", re.I),
        "major",
        "Hard-coded credential",
        "A credential in source is leaked to everyone with read access; load it from the "
        "environment.",
    ),
    Pattern(
        re.compile(r"shell\s*=\s*True"),
        "critical",
        "Shell command built from input",
        "With `shell=True` a value containing shell syntax runs arbitrary commands; pass an "
        "argument list and no shell.",
    ),
    Pattern(
        re.compile(r"=\s*open\("),
        "major",
        "File opened without being closed",
        "The handle from `open()` is not closed on every path, so it leaks (and writes may be "
        "lost); use `with open(...)`.",
    ),
    Pattern(
        re.compile(r"except\s*:"),
        "minor",
        "Bare except hides errors",
        "A bare `except:` also catches `KeyboardInterrupt` and `SystemExit`; catch the "
        "specific exception.",
    ),
    Pattern(
        re.compile(r"[!=]=\s*None\b"),
        "nit",
        "Compare with None using `is`",
        "Use `is None` / `is not None`: `==` can be overridden.",
    ),
)


def scan_diff(diff: str) -> list[dict]:
    """Findings for added lines matching a pattern, with their line in the head version."""
    findings = []
    path = None
    line_no = 0
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else None
        elif match := _HUNK.match(line):
            line_no = int(match.group(1))
        elif path and line.startswith("+"):
            for pattern in PATTERNS:
                if pattern.regex.search(line[1:]):
                    finding = {
                        "path": path,
                        "line": line_no,
                        "side": "RIGHT",
                        "severity": pattern.severity,
                        "title": pattern.title,
                        "body": pattern.body,
                        "evidence": _evidence(pattern, path, line_no, line[1:]),
                        "confidence": CONFIDENCE[pattern.severity],
                    }
                    findings.append(finding)
                    break
            line_no += 1
        elif path and line.startswith(" "):
            line_no += 1
    return findings


def _evidence(pattern: Pattern, path: str, line_no: int, code: str) -> str:
    """The added line quoted (a credential's value never is) and what makes it fail."""
    if pattern.title == "Hard-coded credential":
        return f"{path}:{line_no} assigns a literal string to a credential name; {TRIGGER}"
    return f"{path}:{line_no} adds `{code.strip()[:160]}`; {TRIGGER}"


def scripted_reviewer(conversation: Conversation) -> Action:
    if "submit_verification" in conversation.tools:
        return _verify(conversation)
    if "submit_review" not in conversation.tools:
        return _critique(conversation)
    diff = conversation.result_of("git_diff")
    if diff is None:
        return call("git_diff")
    findings = scan_diff(diff)
    last_event = conversation.events[-1][0] if conversation.events else ""
    submitted = any(name == "submit_review" for name, _ in conversation.tool_calls)
    if submitted and last_event == "user":
        if conversation.last_user_text.startswith("[Review feedback from"):
            return _revise(conversation, findings)
        return say(_answer(conversation, findings))
    if findings and conversation.result_of("read_file") is None:
        first = findings[0]
        return call(
            "read_file",
            path=first["path"],
            start_line=max(1, first["line"] - 5),
            end_line=first["line"] + 5,
        )
    ledger = _ledger(conversation.user_texts[0] if conversation.user_texts else "")
    touched = set(re.findall(r"^\+\+\+ b/(.+)$", diff, re.M))
    files = _files_read(conversation)
    unread = sorted({path for _, _, path, _ in ledger if path in touched} - set(files))
    if unread:  # an earlier finding's file changed: read it whole to see whether it is fixed
        return Action(tools=[("read_file", {"path": path}) for path in unread])
    resolved = [
        f"F{number}"
        for number, title, path, _status in ledger
        if path in files and not _still_there(title, files[path])
    ]
    review = _review(findings)
    return call("submit_review", **review, **({"resolved": resolved} if resolved else {}))


_LEDGER_ROW = re.compile(
    r"^- F(\d+) · (open|published) · \w+ · ([^:·]+?)(?::\d+)? · (.+?)(?: · why dropped: .*)?$",
    re.M,
)


def _ledger(request: str) -> list[tuple[int, str, str, str]]:
    """The open and published findings of the request's ledger: (number, title, path,
    status)."""
    section = request.partition("<finding_ledger>")[2].partition("</finding_ledger>")[0]
    return [
        (int(number), title, path, status)
        for number, status, path, title in _LEDGER_ROW.findall(section)
    ]


def _files_read(conversation: Conversation) -> dict[str, list[str]]:
    """Whole files read so far: path → lines."""
    return {
        args["path"]: [m.group(1) for m in map(_NUMBERED.match, result.splitlines()) if m]
        for (name, args), result in zip(
            conversation.tool_calls, conversation.tool_results, strict=False
        )
        if name == "read_file" and "start_line" not in args and "path" in args
    }


def _still_there(title: str, lines: list[str]) -> bool:
    """Whether a finding of this title still has code showing its pattern."""
    pattern = next((p for p in PATTERNS if p.title == title), None)
    return pattern is None or any(pattern.regex.search(line) for line in lines)


def _review(findings: list[dict], note: str = "") -> dict:
    if findings:
        worst = min((f["severity"] for f in findings), key=SEVERITIES.index)
        summary = f"Found {len(findings)} issue(s) in the added code; the most serious is {worst}."
    else:
        summary = "The change looks correct; no issues found in the added code."
    verdict = (
        "request_changes"
        if any(f["severity"] in ("critical", "major") for f in findings)
        else "comment"
    )
    return {"summary": summary + note, "verdict": verdict, "findings": findings}


def _revise(conversation: Conversation, findings: list[dict]) -> Action:
    """Drop findings the feedback refutes (`refute <title>`), keep the rest, say why."""
    feedback = conversation.last_user_text.lower()
    kept = [f for f in findings if f"refute {f['title'].lower()}" not in feedback]
    dropped = len(findings) - len(kept)
    note = f" Revised after cross-review feedback ({dropped} finding(s) withdrawn)."
    return call("submit_review", **_review(kept, note))


def _answer(conversation: Conversation, findings: list[dict]) -> str:
    """A reviewer asked about its draft answers from what it found."""
    where = ", ".join(f"{f['path']}:{f['line']}" for f in findings) or "nothing"
    return (
        f"About your question ({conversation.last_user_text[:120]}): my draft flags {where}; "
        "each finding points at the added line that shows the problem."
    )


def _critique(conversation: Conversation) -> Action:
    if conversation.result_of("git_diff") is None:
        return call("git_diff")
    context = conversation.user_texts[0] if conversation.user_texts else ""
    rows = re.findall(r"^\| F(\d+) \| (\w+) \| [^|]+ \| ([^|]+) \|", context, re.M)
    lines = ["I checked the draft against the diff."]
    for number, severity, title in rows:
        if severity == "nit":
            lines.append(f"- F{number}: refute {title.strip()}: a style nit, not a defect.")
        else:
            lines.append(f"- F{number} ({title.strip()}): confirmed, the added line does this.")
    titles = rows
    if not titles:
        lines.append("- The draft has no findings; I found nothing it missed.")
    if conversation.last_user_text and len(conversation.user_texts) > 1:
        lines.append(f"On your question: {conversation.last_user_text[:200]}")
    return say("\n".join(lines))


def _verify(conversation: Conversation) -> Action:
    """Read the finding's line, then: a credential in test code is refuted, a line that
    still shows its pattern is confirmed (with a reproduction), anything else is uncertain."""
    request = conversation.user_texts[0] if conversation.user_texts else ""
    found = _FINDING.search(request)
    path, line = (found.group(1), int(found.group(2) or 0)) if found else ("", 0)
    where = f"{path}:{line}"
    result = conversation.result_of("read_file")
    if result is None:
        return call("read_file", path=path, start_line=max(line, 1), end_line=max(line, 1))
    text = _line_text(result)
    pattern = next((p for p in PATTERNS if p.regex.search(text)), None)
    if pattern is not None and pattern.title == "Hard-coded credential" and _TEST_CODE.search(path):
        verdict = {
            "status": "refuted",
            "evidence": f"{where} is test code: `{text}` is a fixture value",
            "would_post": False,
        }
    elif pattern is not None:
        verdict = {
            "status": "confirmed",
            "evidence": f"{where} reads `{text}`",
            "reproduction": f"input reaching {where} -> `{text}` -> {pattern.title.lower()}",
            "would_post": True,
        }
    else:
        verdict = {
            "status": "uncertain",
            "evidence": f"{where} does not show what the finding describes",
            "would_post": False,
        }
    return call("submit_verification", **verdict)


def _line_text(result: str) -> str:
    for line in result.splitlines():
        if match := _NUMBERED.match(line):
            return match.group(1).strip()
    return ""


_TO_REVIEW = re.compile(r"^Files to review \(\d+\):\n((?:- .*\n?)*)", re.M)


def careful_reviewer(conversation: Conversation, *, heeds_budget: bool = True) -> Action:
    """A careful model on a large PR, as a frontier model reviews one: the diff of each file
    under review, a call each, then each file whole, a call each, then its review of the diffs
    it read. When only `submit_review` is offered (the budget nearly spent) it submits what it
    has found so far; `heeds_budget=False` keeps exploring regardless. Its other turns (a
    verify pass, a critique, a question) are the scripted reviewer's."""
    if "submit_review" not in conversation.tools or any(
        name == "submit_review" for name, _ in conversation.tool_calls
    ):
        return scripted_reviewer(conversation)
    section = _TO_REVIEW.search(conversation.user_texts[0] if conversation.user_texts else "")
    files = [line[2:] for line in (section.group(1) if section else "").splitlines()]
    made = list(zip(conversation.tool_calls, conversation.tool_results, strict=False))
    diffs = {args.get("path"): result for (name, args), result in made if name == "git_diff"}
    read = {args.get("path") for (name, args), _ in made if name == "read_file"}
    findings = [finding for diff in diffs.values() for finding in scan_diff(diff)]
    if conversation.tools == ["submit_review"] and heeds_budget:
        return call("submit_review", **_review(findings))
    for path in files:
        if path not in diffs:
            return call("git_diff", path=path)
    for path in files:
        if path not in read:
            return call("read_file", path=path)
    return call("submit_review", **_review(findings))
