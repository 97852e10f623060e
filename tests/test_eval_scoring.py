"""Matching findings to labels and scoring them: pure functions, tested by table."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.evals.golden import Label
from bot.evals.judges import EvalFinding, LexicalJudge, lexical_score, normal_path, words
from bot.evals.scoring import VARIANTS, Counts, Drafted, f1, greedy_pairs, score_case
from bot.records.types import DraftRules

SQL_LABEL = Label(
    path="app/items.py",
    line=30,
    title="SQL injection in search_items",
    problem="The search text is put into the SQL string with an f-string, so a quote in "
    "`text` changes the query. Pass it as a parameter.",
)
SQL_FINDING = EvalFinding(
    1,
    "app/items.py",
    "critical",
    "SQL query built with an f-string",
    "Interpolating values into SQL allows injection; pass parameters separately.",
    line=30,
)
FREE_TEXT = Label(
    problem="Django querysets do not support negative slicing, so the paginator raises "
    "when it slices with a negative offset."
)


def finding(**changes) -> EvalFinding:
    return EvalFinding(**{**SQL_FINDING.__dict__, **changes})


@pytest.mark.parametrize(
    ("candidate", "label", "matches"),
    [
        (SQL_FINDING, SQL_LABEL, True),  # exact place, same issue in other words
        (finding(line=27), SQL_LABEL, True),  # a few lines off
        (finding(line=40), SQL_LABEL, True),  # ten lines off: still in the window
        (finding(line=41), SQL_LABEL, False),  # eleven: another place
        (finding(line=25, end_line=32), SQL_LABEL, True),  # a range that covers the label
        (finding(path="app/orders.py"), SQL_LABEL, False),  # wrong path
        (finding(path="./app/items.py"), SQL_LABEL, True),  # same path, spelled differently
        (finding(line=None), SQL_LABEL, True),  # no line: the path and the words decide
        (
            finding(title="Bare except hides errors", body="Catch the specific exception."),
            SQL_LABEL,
            False,  # right place, different issue
        ),
        (
            finding(
                title="Negative slicing is not supported by querysets",
                body="The paginator slices the queryset with a negative offset; Django raises.",
            ),
            FREE_TEXT,
            True,  # free-text label: the words decide
        ),
        (SQL_FINDING, FREE_TEXT, False),
        (
            finding(title="Pagination may be slow", body="Consider an index on the offset."),
            FREE_TEXT,
            False,  # one shared word is not the same issue
        ),
    ],
)
def test_lexical_judge(candidate, label, matches):
    assert (lexical_score(candidate, label) > 0) is matches


def test_closer_matches_score_higher():
    assert lexical_score(SQL_FINDING, SQL_LABEL) > lexical_score(finding(line=36), SQL_LABEL)


def test_words_split_identifiers_and_drop_stop_words():
    assert words("The searchItems query is built with user_text") == {
        "search",
        "item",
        "query",
        "built",
        "user",
        "text",
    }


@pytest.mark.parametrize(
    ("scores", "labels", "kept", "expected"),
    [
        ([], 0, None, Counts()),  # nothing found, nothing to find
        ([], 2, None, Counts(labels=2, fn=2)),  # missed everything
        ([[0.0], [0.0]], 0, None, Counts(findings=2, fp=2)),  # clean PR, two false alarms
        ([[2.5]], 1, None, Counts(findings=1, labels=1, tp=1, matched_findings=1, labels_hit=1)),
        (
            [[2.5], [1.5]],  # two findings for one label: strict counts one, benchmark both
            1,
            None,
            Counts(findings=2, labels=1, tp=1, fp=1, matched_findings=2, labels_hit=1),
        ),
        (
            [[2.0, 1.9], [1.5, 0.0]],  # greedy, as specified: F1 takes L1 and strands F2
            2,
            None,
            Counts(findings=2, labels=2, tp=1, fp=1, fn=1, matched_findings=2, labels_hit=2),
        ),
        (
            [[2.5], [0.0]],  # the verify pass refuted the false alarm
            1,
            [True, False],
            Counts(findings=1, labels=1, tp=1, matched_findings=1, labels_hit=1),
        ),
    ],
)
def test_case_counts(scores, labels, kept, expected):
    counts, _ = score_case(scores, labels, kept=kept)
    assert counts == expected


def test_strict_and_benchmark_scores():
    counts = Counts(findings=8, labels=11, tp=5, fp=3, fn=6, matched_findings=6, labels_hit=5)
    assert counts.strict == {
        "tp": 5,
        "fp": 3,
        "fn": 6,
        "precision": 5 / 8,
        "recall": 5 / 11,
        "f1": 10 / 19,
    }
    assert counts.benchmark["precision"] == 6 / 8
    assert counts.benchmark["f1"] == pytest.approx(2 * 0.75 * 5 / 11 / (0.75 + 5 / 11))


def test_undefined_scores_are_none_not_zero():
    assert Counts().strict["precision"] is None and Counts().benchmark["recall"] is None
    assert f1(None, 0.5) is None and f1(0.0, 0.0) == 0.0
    assert Counts(labels=2, fn=2).strict["recall"] == 0.0


def test_greedy_pairs_take_the_best_pair_first_and_never_reuse():
    assert greedy_pairs([[1.0, 3.0], [2.0, 0.0]]) == {0: 1, 1: 0}
    assert greedy_pairs([[1.0], [1.0]]) == {0: 0}


async def test_lexical_judge_scores_every_pair():
    matrix = await LexicalJudge().scores([SQL_FINDING, finding(path="x.py")], [SQL_LABEL])
    assert matrix[0][0] > 0 and matrix[1][0] == 0


texts = st.text(max_size=200)


@given(title=texts, body=texts, problem=texts.filter(str.strip), path=st.none() | texts)
def test_lexical_judge_takes_any_text(title, body, problem, path):
    label = Label(problem=problem, path=path or None, line=3)
    candidate = EvalFinding(1, "a.py", "nit", title, body, line=3)
    score = lexical_score(candidate, label)
    assert score >= 0
    if normal_path(label.path) not in (None, "a.py"):
        assert score == 0  # a label elsewhere never matches, whatever the words


@settings(max_examples=60, deadline=None)
@given(title=texts, problem=texts.filter(str.strip), note=texts, error=st.none() | texts)
def test_report_tables_hold_any_golden_or_model_text(tmp_path_factory, title, problem, note, error):
    """Golden files and model output are untrusted: every table row stays one row of cells."""
    from bot.evals.golden import Case, Golden
    from bot.evals.progress import resume_hint
    from bot.evals.report import write_report
    from bot.evals.results import CaseResult, EvalOptions, EvalResult, ModelRun

    label = Label(problem=problem, path="a.py", line=1, title=title or None)
    case = Case(id="c-1", repository="/r", base_sha="a" * 40, head_sha="b" * 40, labels=(label,))
    found = EvalFinding(1, "a.py", "nit", title or "t", note, line=1, verify_status="refuted")
    result = CaseResult(case=case, findings=[found], error=error, notes=(note,))
    result.counts = {"all": Counts(findings=1, labels=1, fp=1, fn=1)}
    result.counts["verified"] = result.counts["all"]
    run = ModelRun(1, "claude", title or "m", True, "codex", cases=[result])
    golden = Golden(name="g", cases=(case,))
    options = EvalOptions(("g.json",), "claude", ("m",))
    report, _ = write_report(
        EvalResult(1, options, {"g.json": golden}, [run], LexicalJudge()),
        tmp_path_factory.mktemp("r"),
        resume=resume_hint(1, Path("data")),
    )
    rows = [
        line
        for line in report.read_text().splitlines()
        if line.startswith(("| F1 ", "| `c-1` ", "| *(missed)"))
    ]
    assert len(rows) == 3
    for row in rows:
        assert row.replace("\\|", "").count("|") in (5, 15), row


# -- what `approve` would publish: production's rules decide, each variant one entry -------------

RULES = DraftRules(min_severity="minor", max_findings=2)
UNSURE = DraftRules(min_severity="nit", min_confidence=50)  # F4 is a guess (30)
DRAFTED = (  # ordinal, severity, verify status, on the diff's lines
    Drafted(1, "minor", "confirmed", True),
    Drafted(2, "nit", "confirmed", True),  # below min_severity: folded
    Drafted(3, "critical", "refuted", True),  # left out with the verify pass only
    Drafted(4, "major", "uncertain", True, confidence=30),
    Drafted(5, "critical", "confirmed", True),
    Drafted(6, "major", None, False),  # not on the diff: in the body, never capped
)
VARIANT = {v.name: v for v in VARIANTS}


@pytest.mark.parametrize(
    ("name", "verified", "rules", "published", "summarised"),
    [
        ("everything", False, RULES, {1, 2, 3, 4, 5, 6}, 0),
        ("everything", True, RULES, {1, 2, 3, 4, 5, 6}, 0),
        # the cap: the two most severe inline (3 and 5, critical), the minor and major after
        ("published", False, RULES, {3, 5, 6}, 2),
        # 3 refuted: 5 and 4 inline, 1 summarised
        ("published", True, RULES, {4, 5, 6}, 1),
        ("published", True, DraftRules(min_severity="nit"), {1, 2, 4, 5, 6}, 0),
        ("published", False, DraftRules(min_severity="critical"), {3, 5}, 0),
        ("confirmed-only", True, RULES, {1, 5}, 0),  # 4 uncertain, 6 never verified
        ("confirmed-only", True, DraftRules(min_severity="nit"), {1, 2, 5}, 0),
        # min_confidence folds a guess like a minor finding; the variant without it keeps it
        ("published", False, UNSURE, {1, 2, 3, 5, 6}, 0),
        ("no-min-confidence", False, UNSURE, {1, 2, 3, 4, 5, 6}, 0),
    ],
)
def test_a_variant_scores_what_production_rules_publish(
    name, verified, rules, published, summarised
):
    chosen, capped = VARIANT[name].chosen(DRAFTED, rules, verified)
    assert {f.ordinal for f, kept in zip(DRAFTED, chosen, strict=True) if kept} == published
    assert capped == summarised


def test_variants_are_scored_in_the_entries_they_apply_to():
    assert VARIANT["everything"].entries(True) == (False, True)
    assert VARIANT["published"].entries(False) == (False,)
    assert VARIANT["confirmed-only"].entries(False) == ()
    assert VARIANT["confirmed-only"].entries(True) == (True,)
    assert len({v.key(w) for v in VARIANTS for w in (False, True)}) == 2 * len(VARIANTS)
