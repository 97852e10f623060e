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
_FINDING = re.compile(r"^### F(\d+) · \w+ · `([^`:]+)(?::(\d+))?", re.M)
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
    """Read every finding's line, then: a credential in test code is refuted, a line that
    still shows its pattern is confirmed, anything else is uncertain."""
    request = conversation.user_texts[0] if conversation.user_texts else ""
    findings = [(int(n), path, int(line or 0)) for n, path, line in _FINDING.findall(request)]
    reads = {
        (args.get("path"), args.get("start_line")): result
        for (name, args), result in zip(
            conversation.tool_calls, conversation.tool_results, strict=False
        )
        if name == "read_file"
    }
    unread = [
        (path, max(line, 1)) for _, path, line in findings if (path, max(line, 1)) not in reads
    ]
    if unread:  # all at once (a server without parallel calls passes on the first only)
        return Action(
            tools=[
                ("read_file", {"path": path, "start_line": line, "end_line": line})
                for path, line in unread
            ]
        )
    verdicts = []
    for number, path, line in findings:
        text = _line_text(reads.get((path, max(line, 1)), ""))
        pattern = next((p for p in PATTERNS if p.regex.search(text)), None)
        where = f"{path}:{line}"
        if (
            pattern is not None
            and pattern.title == "Hard-coded credential"
            and (_TEST_CODE.search(path))
        ):
            status, evidence = "refuted", f"{where} is test code: `{text}` is a fixture value"
        elif pattern is not None:
            status, evidence = "confirmed", f"{where} reads `{text}`"
        else:
            status, evidence = "uncertain", f"{where} does not show what the finding describes"
        verdicts.append({"finding": number, "status": status, "evidence": evidence})
    return call("submit_verification", verdicts=verdicts)


def _line_text(result: str) -> str:
    for line in result.splitlines():
        if match := _NUMBERED.match(line):
            return match.group(1).strip()
    return ""
