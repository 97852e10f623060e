"""End to end, through the server, the GitHub stand-in and a careful model stand-in (a call
per file's diff, then a call per file, as a frontier model reviews): a PR whose review needs
more tool calls than the budget ends in a pending draft that says what it covered, never in
"review failed: budget exhausted"."""

from __future__ import annotations

from functools import partial

import pytest

from bot.standin.scripted import careful_reviewer
from tests.bigpr import service_files
from tests.test_big_prs import opened
from tests.world import BASE, HEAD

pytestmark = pytest.mark.backends

MAX_FILES = 60  # the default `max_files`: the rest of a larger PR is listed as not reviewed


@pytest.mark.parametrize("files", [60, 200])
async def test_a_careful_model_on_a_large_pr_ends_in_a_draft_saying_what_it_covered(
    files, github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """40 tool calls do not read 60 diffs: with 3 left only `submit_review` is offered, and
    the model submits what it found in the 37 diffs it read."""
    anthropic_standin.policy = careful_reviewer
    head = {**HEAD, **service_files(files - 1)}  # calc.py's eval() and its services
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=head
    )
    status = world.status_body()
    assert "Draft ready" in status and "review failed" not in status
    assert "**Cut short** (budget nearly spent: 37 of 40 tool calls)" in status
    # every diff was in its first request (bot/review/excerpt.py): all seen, though the
    # careful model read 37 of them again with git_diff
    assert f"It reviewed {MAX_FILES} of {MAX_FILES} files" in status
    if files > MAX_FILES:
        assert f"{files - MAX_FILES} file(s) not reviewed" in status
    [pending] = world.pending_reviews()
    assert {c["path"] for c in pending["comments"]} == {"calc.py"}
    # what the model was told: its budget every turn, and at the end only the finishing tool
    seen = [anthropic_standin.normalise(r) for r in anthropic_standin.requests]
    assert len(seen) == 38
    assert "[budget left: 40 of 40 tool calls" in seen[0].user_texts[0]
    assert "[budget left: 4 of 40 tool calls" in seen[-2].tool_results[-1]
    assert [c.tools for c in seen].count(["submit_review"]) == 1 == len(seen[-1].tools)
    assert "only submit_review is offered" in seen[-1].tool_results[-1]


async def test_a_model_that_never_submits_ends_in_a_draft_saying_what_it_covered(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """The model keeps exploring past the offer to finish: its calls are refused and count,
    and when the budget is spent the draft has no findings and says so, which budget ran out
    and how many files the model saw."""
    anthropic_standin.policy = partial(careful_reviewer, heeds_budget=False)
    head = {**HEAD, **service_files(MAX_FILES - 1)}
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=head
    )
    status = world.status_body()
    assert "Draft ready" in status and "review failed" not in status
    assert "**Cut short** (budget exhausted: more than 40 tool calls)" in status
    assert "the model submitted no review before it ran out" in status
    assert f"It reviewed {MAX_FILES} of {MAX_FILES} files" in status  # all in its first request
    [review] = await world.review_rows()
    run = await world.ctx.db.fetchone(
        "SELECT status, error FROM runs WHERE id = ?", (review["run_id"],)
    )
    assert (run["status"], run["error"]) == ("done", "budget exhausted: more than 40 tool calls")
