"""Less noise, by table: which files are generated or vendored (the base's `.gitattributes`
first), which findings are folded below `min_severity`, and which go past `max_findings`."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from bot.diff import parse_diff
from bot.records.reviews import get_review, update_review
from bot.records.types import DraftRules, LedgerNote, RevisionNote, UsedSource
from bot.repo_config import RepoConfig
from bot.review.noise import file_noise, noise_files
from bot.review.plan import plan_files
from tests.world import stored_review

GEN, VEN = "linguist-generated", "linguist-vendored"


@pytest.mark.parametrize(
    ("path", "attributes", "expected"),
    [
        ("src/app.py", {}, None),
        ("package-lock.json", {}, "lock file"),
        ("web/yarn.lock", {}, "lock file"),
        ("uv.lock", {}, "lock file"),
        ("src/lock.py", {}, None),
        ("static/app.min.js", {}, "minified"),
        ("static/app-min.css", {}, "minified"),
        ("static/admin.js", {}, None),
        ("dist/bundle.js", {}, "vendored"),
        ("web/dist/index.html", {}, "vendored"),
        ("vendor/github.com/x/y.go", {}, "vendored"),
        ("third_party/lib/a.c", {}, "vendored"),
        ("src/distance.py", {}, None),  # `dist` only as a folder
        ("api/service_pb2.py", {}, "generated"),
        ("api/service.pb.go", {}, "generated"),
        ("ui/__generated__/schema.ts", {}, "generated"),
        # the base's .gitattributes decide first
        ("src/schema.py", {GEN: "set"}, "generated (`.gitattributes`)"),
        ("src/schema.py", {GEN: "true"}, "generated (`.gitattributes`)"),
        ("lib/copied.js", {VEN: "set"}, "vendored (`.gitattributes`)"),
        # … and can keep a file the built-in rules would leave out
        ("vendor/ours/a.go", {VEN: "unset"}, None),
        ("vendor/ours/a.go", {VEN: "false"}, None),
        ("package-lock.json", {GEN: "unset"}, None),
        ("dist/app.min.js", {GEN: "false"}, "vendored"),  # not generated, still vendored
        ("dist/app.min.js", {GEN: "false", VEN: "false"}, None),
        ("src/app.py", {GEN: "unspecified"}, None),
    ],
)
def test_generated_and_vendored_files(path, attributes, expected):
    assert file_noise(path, attributes) == expected


def test_noise_files_reads_each_paths_attributes():
    found = noise_files(
        ["a.py", "gen/b.py", "yarn.lock", "vendor/c.go"],
        {"gen/b.py": {GEN: "set"}, "vendor/c.go": {VEN: "unset"}},
    )
    assert found == {"gen/b.py": "generated (`.gitattributes`)", "yarn.lock": "lock file"}


def test_the_plan_skips_noise_with_its_reason_after_ignore_and_removal():
    diff = parse_diff(
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x\n+y\n"
        "diff --git a/gen.py b/gen.py\n--- a/gen.py\n+++ b/gen.py\n@@ -1 +1 @@\n-x\n+y\n"
        "diff --git a/old.lock b/old.lock\ndeleted file mode 100644\n--- a/old.lock\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    )
    plan = plan_files(diff, RepoConfig(), {"gen.py": "generated", "old.lock": "lock file"})
    assert plan.reviewed == ("a.py",)
    assert plan.skipped == (("gen.py", "generated"), ("old.lock", "file removed"))


@pytest.mark.parametrize(
    ("severity", "min_severity", "expected"),
    [
        ("critical", "critical", False),
        ("major", "critical", True),
        ("nit", "minor", True),
        ("minor", "minor", False),
        ("major", "minor", False),
        ("nit", "nit", False),
        ("critical", "nit", False),
    ],
)
def test_findings_below_min_severity_fold(severity, min_severity, expected):
    assert DraftRules(min_severity=min_severity).folds(F(1, severity)) is expected


@dataclass(frozen=True)
class F:
    ordinal: int
    severity: str
    in_diff: bool = True
    confidence: int | None = None


@pytest.mark.parametrize(
    ("confidence", "min_confidence", "expected"),
    [
        (49, 50, True),
        (50, 50, False),
        (0, 0, False),
        (None, 100, False),  # drafted before confidences were asked: folded by severity only
        (100, 100, False),
    ],
)
def test_findings_below_min_confidence_fold_like_minor_ones(confidence, min_confidence, expected):
    rules = DraftRules(min_severity="nit", min_confidence=min_confidence)
    assert rules.folds(F(1, "critical", confidence=confidence)) is expected
    assert rules.folds(F(1, "nit", confidence=confidence)) is expected


@pytest.mark.parametrize(
    ("findings", "cap", "expected"),
    [
        ([F(1, "nit"), F(2, "major")], None, set()),
        ([F(1, "nit"), F(2, "major")], 5, set()),
        # the most severe go inline first, then in F order
        ([F(1, "nit"), F(2, "major"), F(3, "critical")], 2, {1}),
        ([F(1, "minor"), F(2, "minor"), F(3, "minor")], 1, {2, 3}),
        # a finding that is not on the diff is in the body anyway: it takes no inline place
        ([F(1, "critical", in_diff=False), F(2, "nit"), F(3, "nit")], 2, set()),
    ],
)
def test_inline_comments_past_max_findings(findings, cap, expected):
    assert DraftRules(max_findings=cap).over_cap(findings) == expected


# What the code before typed review fields wrote (`json.dumps`): rows keep reading and
# new writes stay the same text.
RULES = (
    '{"commit": "c0ffee", "used": [{"source": "`REVIEW.md`", "files": 0, "cut": false}],'
    ' "left_out": [], "edited": [], "min_severity": "major", "max_findings": 3,'
    ' "noise": ["a.lock"], "noise_dropped": 2, "ignored": [], "ignored_dropped": 0}'
)
NOT_REVIEWED = '[["a.lock", "lock file"], ["b.min.js", "minified"]]'
REVISION = '{"by": "claude", "after": "codex", "kept": [1], "added": [3], "withdrawn": [2]}'
LEDGER = (
    '{"since": null, "head": "bbb", "earlier": 0, "new": [1, 2], "open": [], "published": [],'
    ' "fixed": [], "fixed_published": [], "dropped": [], "suppressed": 0}'
)


@pytest.mark.backends
async def test_a_review_reads_its_stored_json_once_and_writes_it_back_the_same(db):
    review_id = await stored_review(db)
    review = await get_review(db, review_id)
    # stored before rules existed: folds and caps nothing
    assert (review.rules, review.ledger, review.revision_note) == (DraftRules(), None, None)
    assert not review.rules.folds(F(1, "nit")) and review.rules.over_cap([F(2, "nit")]) == set()
    await db.execute(
        "UPDATE reviews SET rules = ?, not_reviewed = ?, revision_note = ?, ledger = ?"
        " WHERE id = ?",
        (RULES, NOT_REVIEWED, REVISION, LEDGER, review_id),
    )
    review = await get_review(db, review_id)
    rules = DraftRules(
        commit="c0ffee",
        used=(UsedSource("`REVIEW.md`", 0, False),),
        min_severity="major",
        max_findings=3,
        noise=("a.lock",),
        noise_dropped=2,
    )
    assert review.rules == rules and review.files_left_out() == {"a.lock": "lock file"}
    assert review.not_reviewed == (("a.lock", "lock file"), ("b.min.js", "minified"))
    assert review.revision_note == RevisionNote("claude", "codex", (1,), (3,), (2,))  # no dropped
    assert review.ledger == LedgerNote(None, "bbb", 0, (1, 2), (), (), (), (), (), 0)
    await update_review(
        db,
        review_id,
        rules=rules,
        not_reviewed=review.not_reviewed,
        revision_note=replace(review.revision_note, dropped=(4,)),
        ledger=replace(review.ledger, resolve_error="no permission"),
    )
    [row] = await db.fetchall(
        "SELECT rules, not_reviewed, revision_note, ledger FROM reviews WHERE id = ?", (review_id,)
    )
    # older rules fold none by confidence
    assert row["rules"] == RULES[:-1] + ', "verify_publish": "not_refuted", "min_confidence": 0}'
    assert row["not_reviewed"] == NOT_REVIEWED
    assert row["revision_note"] == REVISION[:-1] + ', "dropped": [4]}'
    assert row["ledger"] == LEDGER[:-1] + ', "unconfirmed": [], "not_open": [],' + (
        ' "resolve_error": "no permission"}'
    )
