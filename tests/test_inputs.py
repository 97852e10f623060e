"""`bot.inputs`: every problem of a document from its one declaration, and what is derived
from that declaration (its schema, its reference rows). The shapes below are like the inputs
the bot reads: a model's answer, a golden file, `.github/cockpit.toml`."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import pytest
from msgspec import Meta

from bot.inputs import Problem, Row, decode, json_schema, problems, reference_rows
from bot.records.vocab import Severity, Verdict

Positive = Annotated[int, Meta(ge=1)]
SHA, ID = "^[0-9a-f]{40}$", "^[A-Za-z0-9._-]+$"
Sha = Annotated[str, Meta(pattern=SHA)]


class Finding(msgspec.Struct, forbid_unknown_fields=True):
    path: Annotated[str, Meta(min_length=1)]
    severity: Severity
    title: Annotated[str, Meta(min_length=1)]
    line: Positive | None = None
    side: Literal["LEFT", "RIGHT"] = "RIGHT"


class Answer(msgspec.Struct, forbid_unknown_fields=True):
    summary: str
    verdict: Verdict
    findings: list[Finding]


class Case(msgspec.Struct, forbid_unknown_fields=True):
    id: Annotated[str, Meta(pattern=ID)]
    head_sha: Sha | None = None
    pr: Positive | None = None


class Golden(msgspec.Struct, forbid_unknown_fields=True):
    cases: list[Case]
    version: Literal[1] = 1


class PathRule(msgspec.Struct, forbid_unknown_fields=True):
    glob: Annotated[str, Meta(min_length=1)]
    instructions: str


class RepoFile(msgspec.Struct, forbid_unknown_fields=True):
    verify: Annotated[bool, Meta(description="run the verify pass")] = False
    max_files: Annotated[int, Meta(ge=1, description="the most files a review reads")] = 60
    min_severity: Annotated[Severity, Meta(description="findings below it are folded")] = (
        Severity.MINOR
    )
    ignore: Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(description="globs")] = []
    paths: list[PathRule] = []
    instructions: str | None = None


class Node(msgspec.Struct):
    children: list[Node] = []


F = {"path": "a.py", "line": 3, "severity": "major", "title": "Off by one"}


def answer(*findings, **extra):
    return {"summary": "s", "verdict": "comment", "findings": list(findings), **extra}


@pytest.mark.parametrize(
    ("value", "shape", "found"),
    [
        (answer(F), Answer, []),
        (None, Answer, [Problem((), "type", None, "object")]),
        ([], Answer, [Problem((), "type", [], "object")]),
        ({"summary": "s", "verdict": "comment"}, Answer, [Problem(("findings",), "missing")]),
        (
            answer(verdict="approve"),
            Answer,
            [Problem(("verdict",), "one_of", "approve", allowed=("comment", "request_changes"))],
        ),
        (answer(F, extra=1), Answer, [Problem(("extra",), "unknown", "extra")]),
        (
            answer({**F, "severity": "blocker"}),
            Answer,
            [Problem(("findings", 0, "severity"), "one_of", "blocker", allowed=tuple(Severity))],
        ),
        (
            answer({**F, "line": 0}),
            Answer,
            [Problem(("findings", 0, "line"), "range", 0, limits={"ge": 1})],
        ),
        (  # a wrong type says what would have been right, bounds too
            answer({**F, "line": "3"}),
            Answer,
            [Problem(("findings", 0, "line"), "type", "3", "integer or null", limits={"ge": 1})],
        ),
        (
            answer({**F, "line": True}),
            Answer,
            [Problem(("findings", 0, "line"), "type", True, "integer or null", limits={"ge": 1})],
        ),
        (
            answer({**F, "title": ""}),
            Answer,
            [Problem(("findings", 0, "title"), "length", "", limits={"min_length": 1})],
        ),
        (
            answer(F, {**F, "side": "BOTH", "confidence": 0.9}),
            Answer,
            [
                Problem(("findings", 1, "confidence"), "unknown", "confidence"),
                Problem(("findings", 1, "side"), "one_of", "BOTH", allowed=("LEFT", "RIGHT")),
            ],
        ),
        (  # every problem at once, never the first one only
            {"summary": 1, "verdict": "x", "findings": {}},
            Answer,
            [
                Problem(("summary",), "type", 1, "string"),
                Problem(("verdict",), "one_of", "x", allowed=("comment", "request_changes")),
                Problem(("findings",), "type", {}, "array"),
            ],
        ),
        ({"cases": [{"id": "pr-1", "head_sha": "a" * 40, "pr": 1}]}, Golden, []),
        ({"cases": [{"id": "pr-1", "head_sha": None}]}, Golden, []),
        (
            {"cases": [{"id": "has space", "head_sha": "abc"}], "version": 2},
            Golden,
            [
                Problem(("cases", 0, "id"), "pattern", "has space", limits={"pattern": ID}),
                Problem(("cases", 0, "head_sha"), "pattern", "abc", limits={"pattern": SHA}),
                Problem(("version",), "one_of", 2, allowed=(1,)),
            ],
        ),
        (
            {"cases": [{"id": "a", "pr": True}, {"id": "b", "pr": 0}]},
            Golden,
            [
                Problem(("cases", 0, "pr"), "type", True, "integer or null", limits={"ge": 1}),
                Problem(("cases", 1, "pr"), "range", 0, limits={"ge": 1}),
            ],
        ),
        (
            {"version": True, "cases": []},
            Golden,
            [Problem(("version",), "one_of", True, allowed=(1,))],
        ),
        ({"max_files": 5, "ignore": ["docs/**"], "min_severity": "nit"}, RepoFile, []),
        (
            {"ignore": ["docs/**", 3, ""]},
            RepoFile,
            [
                Problem(("ignore", 1), "type", 3, "string", limits={"min_length": 1}),
                Problem(("ignore", 2), "length", "", limits={"min_length": 1}),
            ],
        ),
        ({"ignore": "docs/*"}, RepoFile, [Problem(("ignore",), "type", "docs/*", "array")]),
        (
            {"paths": [{"glob": "src/**"}, {"glob": "a", "instructions": "x", "scope": 1}]},
            RepoFile,
            [
                Problem(("paths", 0, "instructions"), "missing"),
                Problem(("paths", 1, "scope"), "unknown", "scope"),
            ],
        ),
        ({"instructions": 3}, RepoFile, [Problem(("instructions",), "type", 3, "string or null")]),
        (
            {"max_files": 1.5},
            RepoFile,
            [Problem(("max_files",), "type", 1.5, "integer", limits={"ge": 1})],
        ),
    ],
)
def test_every_problem_is_named_where_it_is(value, shape, found):
    assert problems(value, shape) == found
    if found:
        with pytest.raises(msgspec.ValidationError):
            decode(value, shape)
    else:
        assert isinstance(decode(value, shape), shape)


@pytest.mark.parametrize(
    ("path", "where"),
    [
        ((), ""),
        (("verdict",), "verdict"),
        (("findings", 2, "severity"), "findings[2].severity"),
        (("ignore", 1), "ignore[1]"),
        ((0, "id"), "[0].id"),
    ],
)
def test_a_problem_says_where_it_is_as_a_reader_writes_it(path, where):
    assert Problem(path, "missing").where == where


def test_a_table_inside_a_document_is_named_from_the_top():
    (found,) = problems({"glob": "x"}, PathRule, where="review.paths[0]")
    assert (found.where, found.why, found.key) == (
        "review.paths[0].instructions",
        "missing",
        "instructions",
    )


def test_the_json_schema_has_no_references_and_refuses_a_recursive_shape():
    schema = json_schema(Answer)
    assert "$ref" not in repr(schema) and "$defs" not in schema
    item = schema["properties"]["findings"]["items"]
    assert item["properties"]["severity"]["enum"] == ["critical", "major", "minor", "nit"]
    assert item["required"] == ["path", "severity", "title"]
    assert item["additionalProperties"] is False
    with pytest.raises(ValueError, match="refers to itself"):
        json_schema(Node)


def test_reference_rows_read_the_declaration():
    assert reference_rows(RepoFile) == [
        Row("verify", "boolean", "false", "run the verify pass"),
        Row("max_files", "integer ≥ 1", "60", "the most files a review reads"),
        Row(
            "min_severity",
            '"critical" | "major" | "minor" | "nit"',
            '"minor"',
            "findings below it are folded",
        ),
        Row("ignore", "list of string", "[]", "globs"),
        Row("paths", "list of table", "[]", ""),
        Row("instructions", "string or null", "", ""),
    ]


def test_a_value_of_the_wrong_type_for_optional_choices_is_told_the_choices():
    """A repository config's `verify_provider = 1` says which providers there are (before:
    only "expected one of ... or null" as a type, no choices to list)."""
    (found,) = problems(1, Severity | None)
    assert (found.why, found.allowed) == ("type", ("critical", "major", "minor", "nit"))
