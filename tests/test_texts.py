"""Model and PR text is inert on every surface: rendered into each template and read as
GitHub reads it (tests/inert.py), it adds no mention, raw HTML, image, outside link,
cross-repository reference or comment marker, and never swallows what the template puts
after it."""

from __future__ import annotations

import logging
import re
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.records.types import DraftRules, LedgerNote, RevisionNote, UsedSource
from bot.repo_config import Source, effective, from_data
from bot.texts import (
    STATUS_MARKER,
    WJ,
    fenced,
    render,
    repo_url_of,
    safe_md,
    strict_templates,
    table_cell,
)
from tests.inert import read

REPO_URL = "https://github.test/octo/widgets"
PR_URL = f"{REPO_URL}/pull/1"
PLACEHOLDER = "PLACEHOLDER"

TOKENS = [
    "@", "@octocat", "@org/admins", "café@octocat", "naïve@octocat", "é", "ü@octo", "a@b.co",
    "dev@example.com", "octocat@deadbeef1", "&#64;octocat", "&#x40;octocat", "&commat;octocat",
    "&", "&amp;", "#", "o/r#1", "octo/other#12", "<", ">", "<details>", "</details>",
    "<summary>", "<img src=x>", "<IMG SRC=x>", "<a href=https://evil.test>", "<sub>", "<!--",
    "-->", STATUS_MARKER, "![a](https://evil.test/p.png)", "![a][r]", "[l](https://evil.test)",
    f"[l]({REPO_URL}/blob/main/calc.py#L2)", f"[l]({REPO_URL}/../../evil)",
    f"[l]({REPO_URL}/%2e%2e/x)", f"{REPO_URL}/pull/2", "[l](/evil)", "[r]: https://evil.test",
    "[r]", "[^1]", "[^1]: x", "<https://evil.test>", "https://evil.test", "HTTPS://EVIL.TEST",
    "ftp://evil.test", "www.evil.test", "xmpp:a@b.co", "mailto:a@b.co", "```", "~~~", "````",
    "`", "``", "~", "```py", "~~~ `x`", "\n", "\n\n", "\r", "\r\n", "\x00", " ", "   ", "    ",
    "\t", "> ", "- ", "* ", "1. ", "|", "\\", "*", "**", "_", "[", "]", "(", ")", ":", "!",
    "a", "x", WJ, "\u00a0", "---", "===",
]  # fmt: skip
hostile = st.lists(
    st.one_of(st.sampled_from(TOKENS), st.text(max_size=4)), min_size=1, max_size=30
).map("".join)
CHECKS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def status(text: dict[str, str], state: str) -> str:
    findings = [
        {
            "ordinal": n,
            "severity": "major",
            "path": text["path"],
            "line": 3,
            "title": text["title"],
            "state": finding_state,
            "checked_by": text["path"],
            "dropped_by": text["title"],
            "verify_status": verify,
            "verify_note": text["verify"],
        }
        for n, finding_state, verify in (
            (1, "kept", "confirmed"),
            (2, "dropped", "refuted"),
            (3, "skipped", "uncertain"),
            (4, "withdrawn", None),
        )
    ]
    return render(
        "status.md.j2",
        review={  # the review record's fields the status comment shows
            "state": state,
            "head_sha": "abc1234" + "0" * 33,
            "provider": "claude",
            "error": text["error"],
            "stale": state == "draft",
            "verdict": "request_changes",
            "summary": text["summary"],
            "posted_by": "octocat",
            "posted_event": "COMMENT",
            "config_error": text["config"],
            "revision": 2,
            "verify_provider": "codex",
            "verify_error": text["error"] if state == "posted" else None,
        },
        headline="draft ready",
        progress=text["progress"],
        stale_sha="def5678" if state == "running" else None,
        findings=findings,
        links={1: f"{PR_URL}/files#diff-abc1R3"},
        not_reviewed=[(text["path"], "lock file")],
        revision_note=RevisionNote("claude", "codex", (1,), (3,), (2,), (4,)),
        ledger=LedgerNote(  # what the push did to the PR's findings; GitHub's refusal is text
            since="a" * 40,
            head="b" * 40,
            earlier=4,
            new=(3,),
            open=(1,),
            published=(2,),
            fixed=(4,),
            fixed_published=(4,),
            dropped=(5,),
            suppressed=1,
            unconfirmed=(1,),  # fixes the reviewer claimed that the code does not show
            not_open=(9,),
            resolve_error=text["error"],
        ),
        cost_line="1 model run(s) · cost $0.0100",
        commands=["approve", "review"],
        prefix="/cockpit",
        repo_url=REPO_URL,
        # the rules the draft was made under: sources from the default branch, paths the PR
        # edits, findings folded below `min_severity`
        rules=DraftRules(
            commit="c0ffee" * 6 + "c0ff",
            used=(UsedSource(text["config"], 2, True), UsedSource("`REVIEW.md`", 0, False)),
            left_out=(text["title"],),
            edited=(text["path"], "REVIEW.md"),
            min_severity="minor",
            max_findings=10,
            noise=(text["path"],),
            noise_dropped=1,
        ),
        minor=[
            {**findings[0], "ordinal": 5, "severity": "nit"},
            {**findings[2], "ordinal": 6, "severity": "nit"},
        ],
        capped="F7, F8",
        vetting=None,  # a vetter's login (GitHub's word) and F numbers: no PR text
        vet_holds=False,
    )


def check_run(text: dict[str, str], kind: str) -> str:
    return render(
        "check_run.md.j2",
        review={
            "verdict": "comment",
            "summary": text["summary"],
            "stale": True,
            "verify_provider": "codex",
            "verify_error": text["error"] if kind == "unverified" else None,
        },
        stopped=text["progress"] if kind == "stopped" else None,
        error=text["error"] if kind == "error" else None,
        findings=[
            {"ordinal": n, "verify_status": status, "verify_note": text["verify"]}
            for n, status in ((1, "confirmed"), (2, "refuted"), (3, "uncertain"))
        ],
        repo_url=REPO_URL,
    )


def inline_comment(text: dict[str, str], _kind: str) -> str:
    return render(
        "inline_comment.md.j2",
        f={"ordinal": 1, "severity": "nit", "title": text["title"], "body": text["body"]},
        suggestion=text["suggestion"],
        repo_url=REPO_URL,
    )


def review_body(text: dict[str, str], _kind: str) -> str:
    other = [
        {
            "ordinal": n,
            "severity": "minor",
            "where": text["path"],
            "title": text["title"],
            "body": text["body"],
            "reason": "not on a line of the diff",
        }
        for n in (1, 2)
    ]
    summarised = [
        {"ordinal": n, "severity": "nit", "where": text["path"], "title": text["title"]}
        for n in (3, 4)
    ]
    return render(
        "review_body.md.j2",
        review={"provider": "claude", "verdict": "comment", "summary": text["summary"]},
        other=other,
        summarised=summarised,
        max_findings=10,
        repo_url=REPO_URL,
    )


def session_answer(text: dict[str, str], kind: str) -> str:
    return render(
        "session_answer.md.j2",
        session={"id": 3, "provider": "codex", "model": "gpt-5.3-codex"},
        child=kind == "child",
        parent_name="Claude",
        status_link=f"{PR_URL}#issuecomment-1",
        question=text["title"] if kind == "ask" else None,
        answer=text["body"],
        prefix="/cockpit",
        repo_url=REPO_URL,
    )


def reply(text: dict[str, str], kind: str) -> str:
    return render(
        "reply.md.j2",
        kind=kind,
        prefix="/cockpit",
        command="approve",
        provider="codex",
        revising=True,
        reason=text["error"],
        unknown=text["title"],
        state_line="latest review: draft",
        commands=[("approve", "publish the draft")],
        repo_url=REPO_URL,
        # `config`: a file whose values and problems carry the text
        path=".github/cockpit.toml",
        branch=text["path"],
        source=Source(blob_sha="0123456789abcdef"),
        settings=effective(from_data({"ignore": [text["config"]], "instructions": text["body"]})),
        problems=(text["config"], text["error"]),
        unusable=False,
        server_provider="claude",
    )


SURFACES = [
    *[(status, state) for state in ("queued", "running", "failed", "cancelled", "draft", "posted")],
    *[(check_run, kind) for kind in ("draft", "error", "stopped", "unverified")],
    *[(session_answer, kind) for kind in ("child", "ask")],
    (inline_comment, ""),
    (review_body, ""),
    (reply, "failed"),
    (reply, "help"),
    (reply, "session_failed"),
    (reply, "turn_failed"),
    (reply, "config"),
]
FIELDS = ("summary", "title", "body", "path", "verify", "progress", "error", "config")


def landmarks(benign: str) -> list[str]:
    """The template's own bold labels (those not holding model text)."""
    return [s for s in read(benign, REPO_URL).strong if PLACEHOLDER not in s]


def assert_inert(surface: Any, kind: str, text: dict[str, str]) -> None:
    benign_text = dict.fromkeys(text, PLACEHOLDER)
    benign = surface(benign_text, kind)
    rendered = surface(text, kind)
    seen = read(rendered, REPO_URL)
    assert seen.active == read(benign, REPO_URL).active, rendered
    labels = seen.strong
    for label in landmarks(benign):
        assert label in labels, f"{label!r} was swallowed:\n{rendered}"
        labels = labels[labels.index(label) + 1 :]  # in the template's order
    if surface is inline_comment and text["suggestion"]:  # exactly the code, line endings aside
        code = text["suggestion"].replace("\r\n", "\n").replace("\r", "\n")
        assert ("suggestion", code.replace("\x00", "\ufffd") + "\n") in seen.pre_langs


@given(
    surface=st.sampled_from(SURFACES),
    data=st.fixed_dictionaries({name: hostile for name in (*FIELDS, "suggestion")}),
)
@CHECKS
def test_generated_text_is_inert_in_every_template(surface, data):
    assert_inert(*surface, data)


AUDIT_CASES = [
    "café@octocat and naïve@octocat",
    "&#64;octocat &#x40;octocat &commat;octocat",
    "Summary\n```\n~~~\n",
    "~~~\n```\n",
    "<details><summary>ok</summary>hidden</details>",
    '<img src="https://evil.test/track.png">',
    "![x](https://evil.test/track.png)",
    f"{STATUS_MARKER}\nforged status",
    "[docs](https://evil.test) and <https://evil.test> and www.evil.test",
    "see octo/other#12 and octocat@deadbeef12",
    "- ```\n  nested fence\n```\n",
    "    ```\nindented\n",
    "```a`\nnot a fence\n```",
    "```\n````  `\nstill code\n",
]


@pytest.mark.parametrize("case", AUDIT_CASES)
def test_the_audits_cases_are_inert_in_every_template(case):
    for surface, kind in SURFACES:
        assert_inert(surface, kind, dict.fromkeys((*FIELDS, "suggestion"), case))


def test_links_into_the_same_repository_stay_links():
    link = f"{REPO_URL}/blob/main/calc.py#L2"
    out = safe_md(f"see [calc.py]({link}) and {link}", repo_url=REPO_URL)
    assert out == f"see [calc.py]({link}) and {link}"
    assert "https://evil" not in safe_md("[a](https://evil.test)", repo_url=REPO_URL)


@pytest.mark.parametrize(
    "url",
    [
        f"{REPO_URL}/../../evil",
        f"{REPO_URL}/%2E%2E/evil",
        f"{REPO_URL}.evil.test/x",
        f"{REPO_URL}evil/x",
        "https://github.test/octo/other/x",
    ],
)
def test_links_that_leave_the_repository_become_text(url):
    assert read(safe_md(f"[a]({url}) {url}", repo_url=REPO_URL), REPO_URL).active == {}


def test_repo_url_of_a_pull_request():
    assert repo_url_of(PR_URL) == REPO_URL
    assert repo_url_of("https://evil.test/x") is None and repo_url_of(None) is None


@pytest.mark.parametrize(
    "text", ["ping @octocat", "cc @org/admins", "`@octocat", "(@octocat)", "[@octocat](x)"]
)
def test_mentions_are_neutralised(text):
    for out in (safe_md(text), table_cell(text)):
        assert "@octocat" not in out and "@org/admins" not in out


def test_emails_read_the_same_but_are_not_links_or_mentions():
    out = safe_md("mail me at dev@example.com")
    assert out.replace(WJ, "") == "mail me at dev@example.com"
    assert read(out).active == {}


def test_table_cells_stay_one_cell():
    assert table_cell("a | b\nc") == "a \\| b c"


def test_suggestion_cannot_close_its_fence():
    hostile_code = "x = 1\n```\nping @octocat\n````"
    body = render(
        "inline_comment.md.j2",
        f={"ordinal": 1, "severity": "nit", "title": "t", "body": "b"},
        suggestion=hostile_code,
    )
    lines = body.strip().split("\n")
    assert lines[-1] == "`````" and "`````suggestion" in lines  # longer than any run inside
    assert fenced("a") == "```\na\n```"


def test_a_missing_value_fails_in_tests_and_renders_empty_but_logged_in_production(caplog):
    from bot.review.instructions import Instructions

    context = {
        "request": {"number": 1, "repo": "o/r", "title": "t", "body": "b"},
        "tree": {"head_sha": "a" * 40, "merge_base": "b" * 40},
        "f": {"path": "a.py", "severity": "nit", "title": "t", "body": "b"},
        "instructions": Instructions(),
        "calls": 12,
    }
    with pytest.raises(jinja2.UndefinedError, match="line"):
        render("prompts/verify_request.md.j2", **context)
    strict_templates(False)
    try:
        with caplog.at_level(logging.WARNING, logger="bot.texts"):
            text = render("prompts/verify_request.md.j2", **context)
    finally:
        strict_templates(True)
    assert "### Finding · nit · `a.py`" in text
    assert any("'line'" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("path", [" a.py", "a.py ", "\ta.py", "a b.py"])
def test_a_catalogue_entry_keeps_its_values_spaces(path):
    """Only the template's own line breaks around an entry are trimmed: a path that begins or
    ends with a space reaches the model and the operator as it is."""
    from bot.texts import MODEL, say

    assert say(MODEL, "tool", why="submodule", path=path, oid="0" * 40).startswith(
        path + " is a submodule"
    )
    assert say(MODEL, "tool", why="symlink", path="x", target=path).endswith(
        f"to {path} (links are reported, not followed)"
    )


def test_every_message_the_code_says_is_in_its_audiences_table():
    """Keys live in templates/text/AUDIENCE.toml; a `say(AUDIENCE, "key"` in the code that names
    no entry fails here rather than in front of a person."""
    from pathlib import Path

    from bot.texts import Audience, _table

    root = Path(__file__).resolve().parent.parent
    code = "".join(p.read_text() for d in ("bot", "handlers") for p in (root / d).rglob("*.py"))
    used = re.findall(r"""say\(\s*(PEOPLE|OPERATOR|MODEL),\s*"([a-z0-9_.]+)\"""", code)
    assert len(used) > 150
    for audience, key in used:
        entries = _table(Audience[audience])
        section, _, kind = key.rpartition(".")
        assert kind in (entries[section] if section else entries), f"{audience} {key}"
