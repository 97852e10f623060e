"""`submit_review` read through its declaration and de-duplicated (pure functions, real-looking
inputs)."""

from __future__ import annotations

import pytest

from bot.agents.answers import InvalidAnswer, parse_submission

F = {
    "path": "a.py",
    "line": 3,
    "severity": "major",
    "title": "Off by one",
    "body": "Use <=.",
    "evidence": "a.py:3 reads `for i in range(n - 1)`: with n = 1 the loop never runs",
    "confidence": 80,
}
BARE = {k: v for k, v in F.items() if k not in ("evidence", "confidence")}


def review(*findings, **extra):
    return {"summary": "s", "verdict": "comment", "findings": list(findings), **extra}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (None, "object"),
        ([], "object"),
        ({"summary": "s", "verdict": "comment"}, "missing `findings`"),
        (review(verdict="approve"), "verdict"),
        (review(F, extra=1), "unexpected keys: extra"),
        (review({**F, "severity": "blocker"}), "severity"),
        (review({**F, "line": 0}), "line must be a positive integer"),
        (review({**F, "line": "3"}), "line must be a positive integer"),
        (review({**F, "line": True}), "line must be a positive integer"),
        (review({**F, "title": " "}), "title must be a non-empty string"),
        (review({**F, "side": "BOTH"}), "side"),
        (review({**F, "confidence": 0.9}), r"findings\[0\].confidence must be an integer from 0"),
        (review({**F, "confidence": 101}), "confidence must be an integer from 0 to 100"),
        (review({**F, "evidence": " "}), r"findings\[0\].evidence must be a non-empty string"),
        (review(BARE), r"missing findings\[0\].evidence; missing findings\[0\].confidence"),
        ({"summary": 1, "verdict": "comment", "findings": []}, "summary"),
        ({"summary": "s", "verdict": "comment", "findings": {}}, "findings` must be an array"),
    ],
)
def test_invalid_input_names_the_problem(data, problem):
    with pytest.raises(InvalidAnswer, match=problem):
        parse_submission(data)


def test_valid_review_is_normalised():
    draft = parse_submission(
        review({**F, "path": "/a.py", "end_line": 1, "title": "Off   by\none"})
    )
    finding = draft.findings[0]
    assert (finding.path, finding.line, finding.end_line) == ("a.py", 1, 3)
    assert finding.title == "Off by one" and finding.side == "RIGHT"
    assert (finding.evidence, finding.confidence) == (F["evidence"], 80)


def test_duplicates_merge_keeping_the_most_severe():
    draft = parse_submission(
        review(F, {**F, "severity": "critical"}, {**F, "title": "OFF BY ONE"}, {**F, "line": 9})
    )
    assert [(f.line, f.severity) for f in draft.findings] == [(3, "critical"), (9, "major")]


def test_findings_are_ordered_by_severity():
    draft = parse_submission(
        review(
            {**F, "severity": "nit", "title": "n"},
            F,
            {**F, "severity": "critical", "title": "c", "line": 50},
        )
    )
    assert [f.severity for f in draft.findings] == ["critical", "major", "nit"]


def test_findings_without_lines_are_kept():
    draft = parse_submission(review({k: v for k, v in F.items() if k != "line"}))
    assert draft.findings[0].line is None
