"""The review pipeline's own work stays off the event loop."""

from __future__ import annotations

import sys
import threading

from bot.diff import parse_diff
from bot.records.types import Session
from bot.repo_config import parse_repo_config
from bot.review.pipeline import Reviewer, ReviewRequest, pr_diff, review_worktree, revise_review
from bot.standin.repo import make_pr
from bot.texts import PEOPLE, say
from bot.worktrees import Mirrors

FILES, LINES = 10, 20_000  # each file under git's 1 MB big-file threshold (else "binary")


async def test_a_huge_diff_is_parsed_off_the_event_loop(tmp_path):
    big = "".join(f"line {n} {'x' * 30}\n" for n in range(LINES))
    head = {f"big{n}.txt": big for n in range(FILES)}
    pr = make_pr(tmp_path / "origin", base={"a.txt": "a\n"}, head=head, number=2)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/big", pr.clone_url, ["refs/heads/main", "refs/pull/2/head"])
    tree = await mirrors.add_worktree(
        "octo/big", name="b", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    # Which threads parse: a profile hook on this (the event loop's) thread sees every
    # Python call made on it; the worker thread that should do the parse has none.
    on_the_loop: list[str] = []

    def watch(frame, event, _arg):
        if event == "call" and frame.f_code is parse_diff.__code__:
            on_the_loop.append(threading.current_thread().name)

    sys.setprofile(watch)
    try:
        diff = await pr_diff(tree)
    finally:
        sys.setprofile(None)
    assert sum(f.added for f in diff.files.values()) == FILES * LINES
    assert on_the_loop == []  # parsed, but not on the event loop's thread


async def test_a_revision_submitted_before_a_restart_is_placed_without_a_model_run(tmp_path):
    pr = make_pr(
        tmp_path / "origin", base={"a.py": "x = 1\n"}, head={"a.py": "x = 1\ny = x\n"}, number=3
    )
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/r", pr.clone_url, ["refs/heads/main", "refs/pull/3/head"])
    tree = await mirrors.add_worktree(
        "octo/r", name="r", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    session = Session(7, "claude", "m", "primary", "busy", 1, 2, None)
    finding = {"path": "a.py", "line": 2, "severity": "minor", "title": "T", "body": "B"}
    finding |= {"evidence": "a.py:2", "confidence": 70}
    stored = {"summary": "S", "verdict": "comment", "findings": [finding], "resolved": ["F1"]}
    # no database and no models: a model run would fail at once
    reviewer = Reviewer(db=None, models=None, budget=None)  # type: ignore[arg-type]
    draft = await revise_review(
        reviewer, tree, session, None, stored=stored, left_out={"gen.py": "generated"}
    )
    assert (draft.summary, draft.verdict, draft.run_id, draft.session_id) == (
        "S",
        "comment",
        None,
        7,
    )
    [placed] = draft.findings
    assert (placed.path, placed.line, placed.in_diff) == ("a.py", 2, True)
    assert draft.left_out == {"gen.py": "generated"}


async def test_a_pr_whose_every_file_is_ignored_gets_a_draft_without_a_model_run(tmp_path):
    pr = make_pr(tmp_path / "origin", base={"a.py": "x = 1\n"}, head={"a.py": "x = 2\n"}, number=4)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("octo/i", pr.clone_url, ["refs/heads/main", "refs/pull/4/head"])
    tree = await mirrors.add_worktree(
        "octo/i", name="i", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    config = parse_repo_config('ignore = ["*.py"]\n')
    request = ReviewRequest("octo/i", 4, "t", "", "main", "claude", config)
    # no database and no models: a model run would fail at once
    reviewer = Reviewer(db=None, models=None, budget=None)  # type: ignore[arg-type]
    draft = await review_worktree(reviewer, tree, request)
    assert draft.summary == say(PEOPLE, "nothing_to_review")
    assert (draft.findings, draft.session_id, draft.run_id) == ([], None, None)
    assert [path for path, _why in draft.skipped] == ["a.py"]
    assert draft.rules.ignored == ("a.py",) and draft.rules.ignored_dropped == 0
    assert dict(draft.left_out) == dict(draft.skipped) and draft.diff is not None
