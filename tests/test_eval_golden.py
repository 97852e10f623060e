"""Golden files: the documented schema, the loader's checks, and untrusted contents."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.evals.golden import (
    SCHEMA_FILE,
    GoldenError,
    golden_problems,
    load_golden,
    parse_golden,
    repository_key,
    schema_text,
)

ROOT = Path(__file__).resolve().parent.parent
PLANTED = ROOT / "eval" / "golden" / "planted" / "planted.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text())
SHA = "a" * 40
GOOD = {
    "repository": "repo",
    "cases": [
        {
            "id": "pr-1",
            "pr": 1,
            "base_sha": SHA,
            "head_sha": "b" * 40,
            "labels": [{"path": "a.py", "line": 3, "problem": "off by one"}, {"problem": "x"}],
        }
    ],
}


def with_case(**changes) -> dict:
    return {**GOOD, "cases": [{**GOOD["cases"][0], **changes}]}


def test_the_schema_file_is_generated_from_the_declaration():
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "bot/evals/golden.schema.json is out of date: "
        "python -m bot.evals.golden > bot/evals/golden.schema.json"
    )


def test_shipped_golden_files_match_the_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    for path in (ROOT / "eval" / "golden").rglob("*.json"):
        jsonschema.validate(json.loads(path.read_text()), SCHEMA)
        assert golden_problems(json.loads(path.read_text())) == []


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "must hold a JSON object"),
        ({"cases": {}}, "`cases` must be a list"),
        ({**GOOD, "extra": 1}, "unknown key `extra`"),
        ({**GOOD, "version": 2}, "`version` must be 1"),
        ({"cases": GOOD["cases"]}, "has no repository"),
        (with_case(head_sha="abc"), "head_sha must be a full commit sha or null"),
        (with_case(base_sha=None, head_sha=None, pr=None), "pr must be a positive integer"),
        (with_case(id="has space"), "id must be letters"),
        (with_case(labels=[{"path": "a.py"}]), "problem must be a non-empty string"),
        (with_case(labels=[{"problem": "p", "line": 0}]), "line must be a positive integer"),
        (with_case(labels=[{"problem": "p", "line": True}]), "line must be a positive integer"),
        (with_case(labels=[{"problem": "p", "column": 2}]), "unknown key `column`"),
        ({**GOOD, "cases": GOOD["cases"] * 2}, "is used twice"),
    ],
)
def test_unusable_golden_documents_say_why(document, problem):
    assert any(problem in p for p in golden_problems(document)), golden_problems(document)


def test_a_case_without_head_needs_a_pr_number():
    case = {k: v for k, v in GOOD["cases"][0].items() if k != "pr"}
    problems = golden_problems({**GOOD, "cases": [{**case, "head_sha": None}]})
    assert any("needs a head_sha or a pr number" in p for p in problems)


def test_paths_resolve_next_to_the_file_and_repo_overrides(tmp_path):
    golden = parse_golden(GOOD, tmp_path / "g.json")
    assert golden.cases[0].repository == str(tmp_path / "repo")
    assert golden.labels == 2 and golden.name == "g"
    other = parse_golden(GOOD, tmp_path / "g.json", repository=str(tmp_path / "clone"))
    assert other.cases[0].repository == str(tmp_path / "clone")
    url = parse_golden({**GOOD, "repository": "https://github.com/o/n.git"}, tmp_path / "g.json")
    assert url.cases[0].repository == "https://github.com/o/n.git"


def test_load_golden_reports_unreadable_files(tmp_path):
    with pytest.raises(GoldenError, match="cannot be read"):
        load_golden(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(GoldenError, match="not valid JSON"):
        load_golden(tmp_path / "bad.json")


@pytest.mark.parametrize(
    ("repository", "key"),
    [
        ("https://github.com/calcom/cal.com.git", "calcom/cal.com"),
        ("https://github.com/calcom/cal.com", "calcom/cal.com"),
        ("https://ghe.example.test/org/tool.git", "org/tool"),
    ],
)
def test_repository_keys(repository, key):
    assert repository_key(repository) == key


def test_local_repositories_get_distinct_keys():
    first, second = repository_key("/a/stockroom.bundle"), repository_key("/b/stockroom.bundle")
    assert first.startswith("local/stockroom.bundle-") and first != second


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 50) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
labels = st.fixed_dictionaries(
    {"problem": json_values}, optional={"path": json_values, "line": json_values}
)
cases = st.fixed_dictionaries(
    {"id": json_values, "base_sha": st.none() | st.just(SHA), "head_sha": json_values},
    optional={"pr": json_values, "labels": st.lists(labels, max_size=2), "note": json_values},
)
documents = st.fixed_dictionaries(
    {"cases": st.lists(cases, max_size=2) | json_values},
    optional={"repository": json_values, "version": json_values},
)


@settings(max_examples=300)
@given(document=documents)
def test_the_loader_is_at_least_as_strict_as_the_schema(document):
    """Golden files are untrusted input: whatever the schema refuses, the loader refuses."""
    if not jsonschema.Draft202012Validator(SCHEMA).is_valid(document):
        assert golden_problems(document)
    else:
        with contextlib.suppress(GoldenError):  # stricter than the schema (ids used twice)
            parse_golden(document, Path("/tmp/golden.json"))
