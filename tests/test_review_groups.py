"""A PR above the first request's size budget is reviewed in groups of related files, a session
each within the review's one budget, merged into one draft by the one finding identity; and
`passes = N` reviews a PR N times in different file orders, keeping a finding two passes raise
or one raises and the verify pass confirms. End to end: the server, the GitHub stand-in and
the Anthropic stand-in, rows read back from the database."""

from __future__ import annotations

import re

import pytest

from bot.review.pipeline import merged
from bot.review.plan import grouped
from bot.server import make_app
from bot.standin.models import Action, call
from bot.standin.scripted import careful_reviewer, scan_diff, scripted_reviewer
from handlers import router
from tests.test_big_prs import opened
from tests.test_sessions import say_on_pr, start_world
from tests.world import BASE, HEAD, build_world

CONFIG = ".github/cockpit.toml"

pytestmark = pytest.mark.backends

_FILES = re.compile(r"^Files to review \(\d+\):\n((?:- .*\n?)*)", re.M)
EVAL = {
    "path": "calc.py",
    "line": 2,
    "side": "RIGHT",
    "severity": "critical",
    "title": "eval() runs untrusted input",
    "body": "`eval` executes arbitrary code from its argument.",
    "evidence": "calc.py:2 adds `return eval(text)`; any caller that reaches this line runs it",
    "confidence": 90,
}


def listed(text: str) -> list[str]:
    """The files a session was asked to review, in the order it was told."""
    section = _FILES.search(text)
    return [line[2:] for line in (section.group(1) if section else "").splitlines()]


def sessions_told(model) -> list[list[str]]:
    """Each review session's files, from its first request."""
    firsts = dict.fromkeys(model.normalise(r).user_texts[0] for r in model.requests)
    return [listed(text) for text in firsts if "Files to review" in text]


def module(n: int) -> str:
    """About 2.4 kB of diff: 20 such files are past the 60,000-character budget."""
    lines = "".join(f"    value_{k} = request.get({k!r})  # {'y' * 60}\n" for k in range(28))
    return f'"""Module {n}."""\n\n\ndef handle_{n}(request):\n{lines}    return None\n'


def large_head() -> dict[str, str]:
    files = {f"pkg/part_{n // 10}/module_{n:02d}.py": module(n) for n in range(40)}
    files["tests/test_module_07.py"] = module(99).replace("Module", "Tests of module")
    return {**HEAD, **files}


def every_group_reports_the_eval(conversation):
    """The careful model, each group also reporting calc.py's eval() (read as a neighbour)."""
    action = careful_reviewer(conversation)
    if [name for name, _ in action.tools] == ["submit_review"]:
        arguments = action.tools[0][1]
        arguments["findings"] = [f for f in arguments["findings"] if f["path"] != "calc.py"]
        arguments["findings"].append(dict(EVAL))
        arguments["verdict"] = "request_changes"
    return action


async def test_a_pr_over_the_size_budget_is_reviewed_in_groups_merged_into_one_draft(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    anthropic_standin.policy = every_group_reports_the_eval
    head = large_head()
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=head
    )
    told = sessions_told(anthropic_standin)
    reviewed = sorted(path for path in head if path.endswith(".py"))
    assert sorted(path for files in told for path in files) == reviewed  # each file once
    assert len(told) >= 5 and all(len(files) <= 10 for files in told)
    [with_test] = [files for files in told if "tests/test_module_07.py" in files]
    assert "pkg/part_0/module_07.py" in with_test  # a file and its test together
    status = world.status_body()
    assert "Draft ready" in status and "review failed" not in status
    groups = len(told)
    assert f"Reviewed in {groups} groups of related files" in status
    assert f"together they read {len(reviewed)} of {len(reviewed)} files" in status
    assert f"**Group {groups} of {groups}**" in status
    # every group raised calc.py's eval(): one finding, once in the pending review
    [review] = await world.review_rows()
    findings = await world.ctx.db.fetchall(
        "SELECT path, line, title FROM findings WHERE review_id = ?", (review["id"],)
    )
    assert [tuple(f) for f in findings] == [("calc.py", 2, EVAL["title"])]
    [pending] = world.pending_reviews()
    assert [c["path"] for c in pending["comments"]] == ["calc.py"]
    assert review["verdict"] == "request_changes"
    sessions = await world.ctx.db.fetchall(
        "SELECT id, role, parent_session_id FROM sessions WHERE review_id = ? ORDER BY id",
        (review["id"],),
    )
    assert [s["role"] for s in sessions] == ["primary"] + ["part"] * (groups - 1)
    primary = sessions[0]["id"]  # the groups are started from it (they end with it)
    assert [s["parent_session_id"] for s in sessions] == [None] + [primary] * (groups - 1)
    runs = await world.ctx.db.fetchall(
        "SELECT session_id, status FROM runs WHERE review_id = ? ORDER BY id", (review["id"],)
    )
    assert sorted(r["session_id"] for r in runs) == [s["id"] for s in sessions]
    assert {r["status"] for r in runs} == {"done"}
    first = await world.ctx.db.fetchone(
        "SELECT id FROM runs WHERE session_id = ?", (sessions[0]["id"],)
    )
    assert review["run_id"] == first["id"]  # the draft's run: its primary session's


def by_order(conversation):
    """A model whose findings depend on the order it reads the files in: the patterns on the
    first two files it is told, and a hunch about the first (which a verifier cannot
    confirm)."""
    if "submit_review" not in conversation.tools:
        return scripted_reviewer(conversation)
    if any(name == "submit_review" for name, _ in conversation.tool_calls):
        return scripted_reviewer(conversation)
    diff = conversation.result_of("git_diff")
    if diff is None:
        return call("git_diff")
    files = listed(conversation.user_texts[0])
    found = [f for f in scan_diff(diff) if f["path"] in files[:2]]
    path, title = hunch(files[0])
    said = {"title": title, "body": "Nothing reproduces it.", "evidence": f"{path}:1"}
    found.append({**EVAL, "path": path, "line": 1, "severity": "major", **said})
    return call("submit_review", summary="Reviewed.", verdict="comment", findings=found)


PASSES_HEAD = {
    **HEAD,
    "jobs.py": "import subprocess\n\n\ndef run(cmd):\n    subprocess.run(cmd, shell=True)\n",
    "store.py": "def load(path):\n    f = open(path)\n    return f.read()\n",
    "tidy.py": "def tidy(x):\n    try:\n        return x()\n    except:\n        return None\n",
}


async def test_passes_keep_what_two_raise_or_verify_confirms_and_show_each_pass_cost(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    anthropic_standin.policy = by_order
    world = build_world(
        github, tmp_path, head=PASSES_HEAD, files={CONFIG: 'min_severity = "nit"\npasses = 3\n'}
    )
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    told = sessions_told(anthropic_standin)
    assert len(told) == 3 and len({tuple(files) for files in told}) == 3  # three orders
    raised: dict[tuple[str, str], int] = {}
    patterns = {(f["path"], f["title"]) for f in scan_diff_of(PASSES_HEAD)}
    for files in told:
        for key in {k for k in patterns if k[0] in files[:2]} | {hunch(files[0])}:
            raised[key] = raised.get(key, 0) + 1
    # kept: two passes or more; raised once: a pattern the verifier confirms, never a hunch
    expected = {k for k, n in raised.items() if n >= 2 or k in patterns}
    once_dropped = {k for k, n in raised.items() if n == 1 and k not in patterns}
    assert once_dropped and any(n == 1 for k, n in raised.items() if k in patterns)
    [review] = await world.review_rows()
    rows = await world.ctx.db.fetchall(
        "SELECT path, title, verify_status FROM findings WHERE review_id = ?", (review["id"],)
    )
    assert {(r["path"], r["title"]) for r in rows} == expected
    for r in rows:
        if raised[(r["path"], r["title"])] == 1:
            assert r["verify_status"] == "confirmed"
    status = world.status_body()
    assert "Reviewed in 3 independent passes" in status
    assert f"{len(once_dropped)} finding" in status and "left out of the draft" in status
    for number in (1, 2, 3):
        assert f"pass {number}: 1 run, $" in status
    subkinds = await world.ctx.db.fetchall(
        "SELECT subkind FROM runs WHERE review_id = ? ORDER BY id", (review["id"],)
    )
    kinds = sorted(str(r["subkind"]) for r in subkinds)
    verifies = sum(1 for n in raised.values() if n == 1)  # a verify run each raised once
    assert kinds == ["pass-1", "pass-2", "pass-3", *["verify"] * verifies]


def hunch(path: str) -> tuple[str, str]:
    return path, f"Hunch that {path} is read first"


def scan_diff_of(files: dict[str, str]) -> list[dict]:
    """The patterns the scripted reviewer finds on the files' lines (all taken as added)."""
    return scan_diff(
        "".join(
            f"+++ b/{path}\n@@ -0,0 +1,{len(text.splitlines())} @@\n"
            + "".join(f"+{line}\n" for line in text.splitlines())
            for path, text in files.items()
        )
    )


def test_groups_keep_a_folder_and_a_file_with_its_test_together():
    files = [f"a/m{n}.py" for n in range(9)] + [f"b/n{n}.py" for n in range(9)] + ["t/test_n3.py"]
    groups = grouped(files, dict.fromkeys(files, 5_000), 60_000)
    assert [len(g) for g in groups] == [9, 10]
    assert groups[1] == (*(f"b/n{n}.py" for n in range(9)), "t/test_n3.py")
    assert grouped(files, dict.fromkeys(files, 100), 60_000) == (tuple(files),)


def test_merged_keeps_one_of_a_finding_several_parts_raise_with_their_count():
    from bot.records.types import DraftFinding

    a = DraftFinding("x.py", "minor", "Leaks the file handle", "b", line=3)
    a2 = DraftFinding("x.py", "major", "File handle leaks", "b", line=4)
    other = DraftFinding("x.py", "minor", "Leaks the file handle", "b", line=40)
    assert merged([[a], [a2, other], []]) == [(a2, (1, 2)), (other, (2,))]


async def test_a_revision_of_a_draft_merged_from_passes_is_told_every_finding_in_it(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """`send-back` continues the first pass's session, which wrote only part of the draft: the
    reviser is given the draft's findings (the other passes' too), since its revision
    replaces the whole draft."""
    anthropic_standin.policy = by_order
    config = 'min_severity = "nit"\npasses = 3\n'
    world = await start_world(
        github,
        settings,
        tmp_path,
        aiohttp_client,
        anthropic_standin,
        openai_standin,
        head=PASSES_HEAD,
        files={CONFIG: config},
    )
    await world.wait_idle()
    [review] = await world.review_rows()
    kept = await world.ctx.db.fetchall(
        "SELECT ordinal, title FROM findings WHERE review_id = ?", (review["id"],)
    )
    [first_pass] = [set(f[:2]) for f in sessions_told(anthropic_standin) if f[0] == "calc.py"]
    assert any(  # a finding the first pass's session never raised
        not title.startswith("Hunch") and path not in first_pass
        for path, title in {
            (r["path"], r["title"])
            for r in await world.ctx.db.fetchall(
                "SELECT path, title FROM findings WHERE review_id = ?", (review["id"],)
            )
        }
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    seen = [anthropic_standin.normalise(r).last_user_text for r in anthropic_standin.requests]
    [told] = dict.fromkeys(t for t in seen if t.startswith("[Review feedback from"))
    assert "The draft was merged from 3 review sessions" in told
    for row in kept:
        assert f"F{row['ordinal']} · " in told and row["title"] in told


async def test_a_group_whose_session_fails_is_named_and_the_others_findings_stand(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """One group's model request is refused (400: never retried): the draft says which group
    was not reviewed and why, and holds what the other groups found."""

    def one_group_refused(conversation):
        if "pkg/part_2/module_20.py" in listed(conversation.user_texts[0]):
            return Action(status=400, error_message="this group is refused")
        return every_group_reports_the_eval(conversation)

    anthropic_standin.policy = one_group_refused
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=large_head()
    )
    status = world.status_body()
    assert "Draft ready" in status and "review failed" not in status
    [refused] = re.findall(
        r"\*\*Group \d+ of \d+\*\* \(\d+ files\) was not reviewed: [^\n]*", status
    )
    assert "this group is refused" in refused
    [pending] = world.pending_reviews()
    assert [c["path"] for c in pending["comments"]] == ["calc.py"]


async def test_a_pass_whose_session_fails_leaves_the_other_passes_draft_saying_why(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """`passes = 2` and the first pass's request refused: the draft is the second pass's, its
    findings each raised by one pass (verified: the patterns are confirmed), and it says
    why the first pass gave none."""

    def first_pass_refused(conversation):
        if listed(conversation.user_texts[0])[:1] == ["calc.py"]:  # the first pass's order
            return Action(status=400, error_message="the first pass is refused")
        return by_order(conversation)

    anthropic_standin.policy = first_pass_refused
    world = build_world(
        github, tmp_path, head=PASSES_HEAD, files={CONFIG: 'min_severity = "nit"\npasses = 2\n'}
    )
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    status = world.status_body()
    assert "Reviewed in 2 independent passes" in status
    assert "was not reviewed: " in status and "the first pass is refused" in status
    [review] = await world.review_rows()
    rows = await world.ctx.db.fetchall(
        "SELECT path, title, verify_status FROM findings WHERE review_id = ?", (review["id"],)
    )
    [second] = [files for files in sessions_told(anthropic_standin) if files[0] != "calc.py"]
    patterns = {(f["path"], f["title"]) for f in scan_diff_of(PASSES_HEAD)}
    expected = {k for k in patterns if k[0] in second[:2]}
    assert {(r["path"], r["title"]) for r in rows} == expected and expected
    assert {r["verify_status"] for r in rows} == {"confirmed"}


async def test_a_careful_model_on_a_200_file_pr_over_the_budget_ends_in_a_draft_of_groups(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """200 files of about 2.4 kB of diff each: the 60 under review (`max_files`) go in groups,
    the careful model reads each group's diffs and files, and the draft says what the groups
    read together and what was not reviewed."""
    anthropic_standin.policy = careful_reviewer
    head = {**HEAD, **{f"pkg/part_{n // 10:02d}/module_{n:03d}.py": module(n) for n in range(199)}}
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=head
    )
    told = sessions_told(anthropic_standin)
    assert sum(len(files) for files in told) == 60 and all(len(f) <= 10 for f in told)
    status = world.status_body()
    assert "Draft ready" in status and "review failed" not in status
    assert f"Reviewed in {len(told)} groups of related files" in status
    assert "together they read 60 of 60 files" in status
    assert "140 file(s) not reviewed" in status
    [pending] = world.pending_reviews()
    assert {c["path"] for c in pending["comments"]} == {"calc.py"}


async def test_a_question_on_a_draft_merged_from_passes_comes_with_every_finding_in_it(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    anthropic_standin.policy = by_order
    config = 'min_severity = "nit"\npasses = 2\n'
    world = await start_world(
        github,
        settings,
        tmp_path,
        aiohttp_client,
        anthropic_standin,
        openai_standin,
        head=PASSES_HEAD,
        files={CONFIG: config},
    )
    await world.wait_idle()
    [review] = await world.review_rows()
    kept = await world.ctx.db.fetchall(
        "SELECT ordinal, title FROM findings WHERE review_id = ?", (review["id"],)
    )
    await say_on_pr(world, "/cockpit ask why these findings?")
    seen = [anthropic_standin.normalise(r).last_user_text for r in anthropic_standin.requests]
    [asked] = [t for t in dict.fromkeys(seen) if t.startswith("why these findings?")]
    assert "The draft was merged from 2 review sessions" in asked
    assert "Answer about the whole draft" in asked
    for row in kept:
        assert f"F{row['ordinal']} · " in asked and row["title"] in asked
