"""The verify pass: a second read-only run labels each finding; refuted ones stay visible,
marked, and are left out of `approve` unless listed; a failed pass never fails the review."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.agents.answers import InvalidAnswer, Verdict, parse_verification
from bot.records.types import DraftFinding, DraftRules
from bot.repo_config import parse_repo_config
from bot.review.verify import Verification, apply_verification, choose_provider
from bot.server import make_app
from bot.standin.models import call, fail
from bot.standin.scripted import scripted_reviewer
from bot.texts import render
from handlers import router
from tests.world import BASE, build_world, comment_payload

HEAD = {
    "calc.py": "def parse(text):\n    return eval(text)\n\n\ndef total(values):\n"
    "    return sum(values)\n",
    "tests/test_calc.py": 'token = "test-token-1234"\n\n\ndef test_parse():\n'
    '    assert parse("1") == 1\n',
}
# Every finding goes through verify and publishing: nothing folded below a `min_severity`.
VERIFY_CONFIG = {".github/cockpit.toml": 'verify = true\nmin_severity = "nit"\n'}


EVAL = {"evidence": "a.py:2  calls eval", "would_post": True}
READ = "input '1+1' -> a.py:2 -> eval runs it"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"status": "confirmed", "reproduction": READ, **EVAL},
            Verdict(3, "confirmed", "a.py:2 calls eval", READ, would_post=True),
        ),
        (  # a `confirmed` without a reproduction is taken as `uncertain`
            {"status": "confirmed", **EVAL},
            Verdict(3, "uncertain", "a.py:2 calls eval", would_post=True, unreproduced=True),
        ),
        (
            {"status": "confirmed", "reproduction": "  ", **EVAL},
            Verdict(3, "uncertain", "a.py:2 calls eval", would_post=True, unreproduced=True),
        ),
        (  # lowered: kept; the same or a higher severity: ignored
            {"status": "uncertain", "severity": "minor", **EVAL},
            Verdict(3, "uncertain", "a.py:2 calls eval", severity="minor", would_post=True),
        ),
        (
            {"status": "refuted", "severity": "critical", **EVAL, "would_post": False},
            Verdict(3, "refuted", "a.py:2 calls eval", would_post=False),
        ),
        (
            {"status": "refuted", "severity": "major", "reproduction": READ, **EVAL},
            Verdict(3, "refuted", "a.py:2 calls eval", would_post=True),
        ),
    ],
)
def test_a_verdict_is_read_for_its_one_finding(data, expected):
    """Was: verdicts on every finding in one answer (missing ones uncertain); now each
    session answers for its one finding, so the shape is one verdict."""
    assert parse_verification(data, finding=3, severity="major") == expected


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ([], "input must be an object"),
        ({"status": "maybe", "evidence": "x", "would_post": True}, "`status` must be"),
        ({"status": "refuted", "evidence": " ", "would_post": True}, "evidence"),
        ({"status": "refuted", "evidence": "x"}, "missing `would_post`"),
        ({"status": "refuted", "evidence": "x", "would_post": True, "severity": "low"}, "severity"),
        ({"status": "refuted", "evidence": "x", "would_post": True, "finding": 1}, "finding"),
    ],
)
def test_invalid_verdicts_say_what_to_fix(data, problem):
    with pytest.raises(InvalidAnswer, match=problem):
        parse_verification(data, finding=1, severity="major")


@pytest.mark.parametrize(
    ("reviewer", "configured", "available", "expected"),
    [
        ("claude", None, {"claude", "codex"}, "codex"),
        ("codex", None, {"claude", "codex"}, "claude"),
        ("claude", None, {"claude"}, "claude"),
        ("claude", "claude", {"claude", "codex"}, "claude"),
        ("claude", "codex", {"claude"}, "codex"),  # chosen but missing: the pass says why
        ("claude", None, {"claude", "chat"}, "chat"),
        ("claude", None, {"claude", "codex", "chat"}, "codex"),
        ("chat", None, {"claude", "codex", "chat"}, "claude"),
        ("chat", None, {"codex", "chat"}, "codex"),
        ("chat", None, {"chat"}, "chat"),  # local models only: a fresh session on the same
        ("codex", None, {"codex", "chat"}, "chat"),
        ("chat", "chat", {"claude", "chat"}, "chat"),
    ],
)
def test_verify_uses_the_other_provider_unless_the_repository_chooses(
    reviewer, configured, available, expected
):
    assert choose_provider(reviewer, configured, available) == expected


@pytest.mark.parametrize(
    ("text", "provider", "error"),
    [
        ('verify = true\nverify_provider = "codex"\n', "codex", None),
        ("verify = true\n", None, None),
        ('verify_provider = "gemini"\n', None, '`verify_provider` must be one of "claude"'),
        ("verify_provider = 1\n", None, "`verify_provider` must be one of"),
        ('verify_provider = "chat"\nprovider = "chat"\n', "chat", None),
    ],
)
def test_repository_config_reads_verify_provider(text, provider, error):
    config = parse_repo_config(text)
    assert config.verify_provider == provider
    assert (error in config.error) if error else config.error is None


def test_verdicts_land_on_their_findings_in_order():
    a, b = (DraftFinding("x.py", "minor", title, "body", line=1) for title in "ab")
    verification = Verification("codex", {2: Verdict(2, "refuted", "x.py:1 is a test")})
    assert apply_verification([a, b], verification) == [
        a,
        replace(b, verify_status="refuted", verify_note="x.py:1 is a test"),
    ]
    lowered = Verdict(1, "confirmed", "x.py:1", "-1 -> x.py:1 -> wrong", "nit", would_post=False)
    [checked] = apply_verification([a], Verification("codex", {1: lowered}))
    assert (checked.severity, checked.verify_status) == ("nit", "confirmed")
    assert checked.verify_note == (
        "x.py:1 Reproduction: -1 -> x.py:1 -> wrong Severity lowered from minor to nit. "
        "A senior reviewer would not post it."
    )


@given(note=st.text(max_size=300), title=st.text(min_size=1, max_size=100))
def test_verify_notes_stay_inside_their_status_table_cell(note, title):
    finding = {
        "ordinal": 1,
        "severity": "major",
        "path": "a.py",
        "line": 1,
        "title": title,
        "state": "kept",
        "checked_by": "auto",
        "verify_status": "refuted",
        "verify_note": note,
    }
    review = {
        "state": "draft",
        "head_sha": "abcdef0" + "0" * 33,
        "provider": "claude",
        "verdict": "comment",
        "summary": "s",
        "revision": 1,
        "verify_provider": "codex",
        "verify_error": None,
        "config_error": None,
        "error": None,
        "stale": False,
        "posted_by": None,
        "posted_event": None,
    }
    body = render(
        "status.md.j2",
        review=review,
        headline="draft ready",
        progress="draft ready",
        stale_sha=None,
        findings=[finding],
        links={},
        not_reviewed=[],
        revision_note=None,
        ledger=None,
        cost_line="",
        commands=[],
        prefix="/cockpit",
        rules=DraftRules(),
        minor=[],
        capped="none",
        vetting=None,
        vet_holds=False,
    )
    [row] = [line for line in body.splitlines() if line.startswith("| F1 |")]
    assert row.replace("\\|", "").count("|") == 7  # six cells, whatever the model wrote
    assert "<!--" not in body.replace("<!-- pr-cockpit:status -->", "")
    assert "@octocat" not in body.replace("@\u2060", "")


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    world = build_world(
        github, tmp_path, head=HEAD, files=VERIFY_CONFIG, permissions={"octocat": "admin"}
    )
    world.client = await aiohttp_client(make_app(settings, router))
    world.claude, world.codex = anthropic_standin, openai_standin
    return world


async def test_verify_refutes_a_false_positive_and_approve_leaves_it_out(world):
    assert BASE["calc.py"] != HEAD["calc.py"]
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_provider"] == "codex" and review["verify_error"] is None

    findings = await world.ctx.db.fetchall("SELECT * FROM findings ORDER BY ordinal")
    by_title = {f["title"]: f for f in findings}
    eval_finding = by_title["eval() runs untrusted input"]
    token = by_title["Hard-coded credential"]
    assert eval_finding["verify_status"] == "confirmed"
    assert (token["verify_status"], token["path"]) == ("refuted", "tests/test_calc.py")
    assert token["verify_note"].startswith("tests/test_calc.py:1 is test code")

    runs = await world.ctx.db.fetchall("SELECT * FROM runs ORDER BY id")
    assert [(r["kind"], r["subkind"], r["provider"]) for r in runs] == [
        ("review", None, "claude"),
        ("review", "verify", "codex"),  # one verify session (and run) per finding
        ("review", "verify", "codex"),
    ]
    assert all(r["review_id"] == review["id"] and r["status"] == "done" for r in runs)
    verify_request = world.codex.normalise(world.codex.requests[0])
    assert "submit_verification" in verify_request.tools
    assert "submit_review" not in verify_request.tools
    assert {"read_file", "search_code", "git_diff"} <= set(verify_request.tools)

    status = world.status_body()
    assert f"| F{eval_finding['ordinal']} | critical |" in status
    assert "✓ confirmed by codex" in status
    assert "✗ refuted by codex: tests/test_calc.py:1 is test code" in status
    assert "claude: 1 model run(s)" in status and "codex: 2 model run(s)" in status
    [check] = world.github.check_runs.values()
    assert "1 confirmed, 1 refuted, 0 uncertain" in check["output"]["summary"]
    refuted_note = next(a for a in check["annotations"] if a["path"] == "tests/test_calc.py")
    assert refuted_note["title"].endswith("(refuted by codex)")
    [pending] = world.pending_reviews()
    assert [c["path"] for c in pending["comments"]] == ["calc.py"]

    await world.send("issue_comment", comment_payload(world, "/cockpit approve"))
    await world.wait_review("posted")
    [published] = world.github.reviews.values()
    assert [c["path"] for c in published["comments"]] == ["calc.py"]
    states = await world.ctx.db.fetchall("SELECT state FROM findings ORDER BY ordinal")
    assert sorted(s["state"] for s in states) == ["kept", "skipped"]


async def test_a_refuted_finding_is_published_when_listed(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    token = await world.ctx.db.fetchone(
        "SELECT ordinal FROM findings WHERE verify_status = 'refuted'"
    )
    await world.send(
        "issue_comment", comment_payload(world, f"/cockpit approve F{token['ordinal']}")
    )
    await world.wait_review("posted")
    [published] = world.github.reviews.values()
    assert [c["path"] for c in published["comments"]] == ["tests/test_calc.py"]


async def test_a_failed_verify_pass_leaves_the_draft_standing_and_says_why(world):
    world.codex.policy = lambda conversation: fail(400, "invalid_request_error")
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_error"] == 'codex rejected the request (400: "stand-in error")'
    findings = await world.ctx.db.fetchall("SELECT verify_status FROM findings")
    assert len(findings) == 2 and {f["verify_status"] for f in findings} == {None}
    status = world.status_body()
    assert "The verify pass (codex) did not run: codex rejected the request (400" in status
    assert "Draft ready" in status
    [pending] = world.pending_reviews()
    assert len(pending["comments"]) == 2
    verify_run = await world.ctx.db.fetchone("SELECT * FROM runs WHERE subkind = 'verify'")
    assert verify_run["status"] == "failed"


async def test_review_verify_command_runs_the_pass_on_the_same_provider_without_a_second_key(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    world = build_world(github, tmp_path, head=HEAD, permissions={"octocat": "admin"})
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    first = await world.wait_review("draft")
    assert first["verify_provider"] is None  # verify is off for this repository
    await world.send("issue_comment", comment_payload(world, "/cockpit review --verify"))
    await world.wait_review("draft", index=1)
    second = (await world.review_rows())[1]
    assert second["verify_provider"] == "claude" and second["verify_error"] is None
    statuses = await world.ctx.db.fetchall(
        "SELECT verify_status FROM findings WHERE review_id = ? ORDER BY ordinal", (second["id"],)
    )
    assert sorted(s["verify_status"] for s in statuses) == ["confirmed", "refuted"]


def submits(findings: list[dict]):
    """A reviewer that submits `findings` at once (a verifier answers as the scripted one)."""

    def policy(conversation):
        if "submit_review" in conversation.tools:
            return call("submit_review", summary="Findings.", verdict="comment", findings=findings)
        return scripted_reviewer(conversation)

    return policy


EVERY_SHAPE = [  # each optional field of `submit_review` absent in one finding, present in another
    {"path": "calc.py", "line": 2, "severity": "critical", "title": "eval on input",
     "body": "eval runs input.", "suggestion": "    return int(text)", "evidence": "calc.py:2",
     "confidence": 95},
    {"path": "calc.py", "line": 1, "end_line": 2, "side": "RIGHT", "severity": "major",
     "title": "parse is unsafe", "body": "the whole function.", "evidence": "calc.py:1-2",
     "confidence": 80},
    {"path": "calc.py", "line": 2, "side": "LEFT", "severity": "minor",
     "title": "int() was safer", "body": "the removed line.", "suggestion": "unused",
     "evidence": "calc.py:2 (base)", "confidence": 70},
    {"path": "calc.py", "severity": "minor", "title": "no tests for parse", "body": "add some.",
     "evidence": "no test names parse", "confidence": 60},
    {"path": "README.md", "line": 1, "severity": "nit", "title": "README says nothing",
     "body": "describe parse.", "evidence": "README.md:1", "confidence": 60},
]  # fmt: skip


async def test_every_optional_field_absent_or_present_goes_through_verify_and_publishing(world):
    world.claude.policy = submits(EVERY_SHAPE)
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_error"] is None, review["verify_error"]
    stored = await world.ctx.db.fetchall("SELECT * FROM findings ORDER BY ordinal")
    by_title = {f["title"]: f for f in stored}
    assert len(stored) == 5 and all(f["verify_status"] for f in stored)
    requests = [world.codex.normalise(r).user_texts[0] for r in world.codex.requests]
    request = "\n".join(requests)  # one session per finding: the five requests together
    assert "`calc.py:1-2`" in request and "(removed line, base version)" in request
    assert "`calc.py`" in request and "`README.md:1`" in request

    await world.send("issue_comment", comment_payload(world, "/cockpit approve"))
    await world.wait_review("posted")
    [review] = world.github.reviews.values()
    comments = {c["body"].split("** · ", 1)[1].split("\n")[0]: c for c in review["comments"]}
    assert sorted(comments) == ["eval on input", "int() was safer", "parse is unsafe"]
    assert "```suggestion\n    return int(text)\n```" in comments["eval on input"]["body"]
    assert (comments["parse is unsafe"]["start_line"], comments["parse is unsafe"]["line"]) == (
        1,
        2,
    )
    assert comments["int() was safer"]["side"] == "LEFT"
    assert "suggestion" not in comments["int() was safer"]["body"]
    assert "no tests for parse" in review["body"] and "README says nothing" in review["body"]
    assert by_title["no tests for parse"]["line"] is None
    [check] = world.github.check_runs.values()
    assert sorted(a["title"].split(" · ")[-1] for a in check["annotations"]) == [
        "README says nothing",
        "eval on input",
        "int() was safer",
        "parse is unsafe",
    ]


def verifier(answers: dict[str, object]):
    """A verifier per finding: the session whose finding is on `path` answers `answers[path]`
    (a stand-in action, or the `submit_verification` arguments after one read); the others
    answer as the scripted one."""

    def policy(conversation):
        request = conversation.user_texts[0] if conversation.user_texts else ""
        for path, answer in answers.items():
            if f"· `{path}:" not in request:
                continue
            if not isinstance(answer, dict):
                return answer
            if conversation.result_of("read_file") is None:
                return call("read_file", path=path, start_line=1, end_line=2)
            return call("submit_verification", **answer)
        return scripted_reviewer(conversation)

    return policy


async def test_a_failed_finding_session_leaves_the_others_verified(world):
    world.codex.policy = verifier({"tests/test_calc.py": fail(400, "invalid_request_error")})
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_error"] == (
        '1 of 2 findings were not checked (codex rejected the request (400: "stand-in error"))'
    )
    findings = await world.ctx.db.fetchall("SELECT * FROM findings ORDER BY ordinal")
    by_path = {f["path"]: f for f in findings}
    assert by_path["calc.py"]["verify_status"] == "confirmed"
    assert "Reproduction: input reaching calc.py:2" in by_path["calc.py"]["verify_note"]
    assert by_path["tests/test_calc.py"]["verify_status"] is None
    runs = await world.ctx.db.fetchall("SELECT status FROM runs WHERE subkind = 'verify'")
    assert sorted(r["status"] for r in runs) == ["done", "failed"]
    assert "The verify pass (codex) did not check every finding: 1 of 2" in world.status_body()


CHECKED = {"evidence": "calc.py:2 reads `return eval(text)`", "would_post": True}
RULES = "Never hard-code a token, not even in tests.\n"


async def test_a_confirmed_verdict_needs_a_reproduction_and_a_lowered_severity_is_stored(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    world = build_world(
        github, tmp_path, base={**BASE, "REVIEW.md": RULES}, head=HEAD, files=VERIFY_CONFIG
    )
    world.client = await aiohttp_client(make_app(settings, router))
    openai_standin.policy = verifier(
        {
            "calc.py": {"status": "confirmed", **CHECKED},  # no reproduction
            "tests/test_calc.py": {
                "status": "confirmed",
                "evidence": "tests/test_calc.py:1 hard-codes a token; REVIEW.md forbids it",
                "reproduction": "REVIEW.md's rule -> tests/test_calc.py:1 -> a token in git",
                "severity": "minor",
                "would_post": False,
            },
        }
    )
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_error"] is None
    rows = await world.ctx.db.fetchall("SELECT * FROM findings ORDER BY ordinal")
    by_path = {f["path"]: f for f in rows}
    unreproduced, token = by_path["calc.py"], by_path["tests/test_calc.py"]
    assert (unreproduced["verify_status"], unreproduced["severity"]) == ("uncertain", "critical")
    assert "confirmed without a reproduction: taken as uncertain" in unreproduced["verify_note"]
    assert (token["verify_status"], token["severity"]) == ("confirmed", "minor")
    assert "Severity lowered from major to minor." in token["verify_note"]
    assert "A senior reviewer would not post it." in token["verify_note"]

    # each session saw its one finding, the PR's text fenced as untrusted, the team's rules
    requests = [openai_standin.normalise(r).user_texts[0] for r in openai_standin.requests]
    firsts = {text for text in requests if "### Finding" in text}
    assert len(firsts) == 2 and all(text.count("### Finding") == 1 for text in firsts)
    for text in firsts:
        assert "<pr_title>\nParse input and total values\n</pr_title>" in text
        assert "<pr_description>\nPlease review." in text
        assert "<team_rules>\n<rules>\nSource: `REVIEW.md`" in text and RULES in text


async def test_verify_publish_confirmed_publishes_only_confirmed_findings_on_approve(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    config = {".github/cockpit.toml": VERIFY_CONFIG[".github/cockpit.toml"]}
    config[".github/cockpit.toml"] += 'verify_publish = "confirmed"\n'
    world = build_world(github, tmp_path, head=HEAD, files=config)
    world.client = await aiohttp_client(make_app(settings, router))
    uncertain = {"status": "uncertain", "evidence": "tests/test_calc.py:1 unclear"}
    openai_standin.policy = verifier({"tests/test_calc.py": {**uncertain, "would_post": True}})
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    rows = await world.ctx.db.fetchall("SELECT path, verify_status FROM findings")
    assert {r["path"]: r["verify_status"] for r in rows} == {
        "calc.py": "confirmed",
        "tests/test_calc.py": "uncertain",
    }
    [pending] = world.pending_reviews()
    assert [c["path"] for c in pending["comments"]] == ["calc.py"]
    assert "(left out of approve unless listed)" in world.status_body()

    await world.send("issue_comment", comment_payload(world, "/cockpit approve"))
    await world.wait_review("posted")
    [published] = world.github.reviews.values()
    assert [c["path"] for c in published["comments"]] == ["calc.py"]


async def test_verify_publish_confirmed_changes_nothing_when_the_verify_pass_did_not_run(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    config = {".github/cockpit.toml": 'verify_publish = "confirmed"\nmin_severity = "nit"\n'}
    world = build_world(github, tmp_path, head=HEAD, files=config)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verify_provider"] is None
    [pending] = world.pending_reviews()
    assert sorted(c["path"] for c in pending["comments"]) == ["calc.py", "tests/test_calc.py"]
