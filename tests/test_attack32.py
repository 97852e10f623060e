"""Attacks on large PRs in groups and `passes = N` (issue 32), end to end: the server, the
GitHub stand-in and the Anthropic stand-in, rows read back from the database."""

from __future__ import annotations

import json

import pytest

from bot.server import make_app
from bot.standin.models import Action
from bot.standin.scripted import careful_reviewer
from handlers import router
from tests import test_review_local as local
from tests.test_review_groups import (
    CONFIG,
    EVAL,
    PASSES_HEAD,
    by_order,
    hunch,
    listed,
    module,
    scan_diff_of,
    sessions_told,
)
from tests.world import build_world

repo, elsewhere, env = local.repo, local.elsewhere, local.env  # its fixtures
cockpit, git, write_files = local.cockpit, local.git, local.write_files


@pytest.mark.backends
@pytest.mark.parametrize("value", ["9", "0"])
async def test_passes_out_of_range_says_the_range_it_takes(
    value, github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """`passes = 9` was told "must be at least 1": true of 9, and no help; it says 1 to 5."""
    anthropic_standin.policy = by_order
    world = build_world(github, tmp_path, head=PASSES_HEAD, files={CONFIG: f"passes = {value}\n"})
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    status = world.status_body()
    assert "`passes` must be from 1 to 5 (the default applies)" in status
    assert "independent passes" not in status and len(sessions_told(anthropic_standin)) == 1


async def test_review_local_counts_every_group_when_the_first_group_fails(
    repo, elsewhere, env, anthropic_standin, openai_standin
):
    """A PR over the size budget in groups, the first group's (the primary session's) request
    refused: the draft took the next group's session as its own, so review-local's tokens
    and USD counted that one group's runs only (and its verify sessions hung under it)."""
    write_files(repo, {f"pkg/part_{n // 10}/module_{n:02d}.py": module(n) for n in range(40)})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "many modules")

    def first_group_refused(conversation):
        if "app/calc.py" in listed(conversation.user_texts[0]):
            return Action(status=400, error_message="the first group is refused")
        return careful_reviewer(conversation)

    anthropic_standin.policy = first_group_refused
    code, out, err = await cockpit("review-local", str(repo), "--json", env=env, cwd=elsewhere)
    assert code == 0, err
    draft = json.loads(out)
    assert "the first group is refused" in draft["summary"]
    groups = len({tuple(files) for files in sessions_told(anthropic_standin)})
    assert groups >= 4
    spent = sum(sum(usage.values()) for usage in anthropic_standin.usages)
    assert draft["tokens"] == spent  # every group's runs, not the second group's alone


@pytest.mark.backends
async def test_passes_with_the_verifier_down_keep_what_one_pass_raised_unverified(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """`passes = 2` and every verify request refused: what one pass raised had no verdict, yet
    was left out "not confirmed by the verify pass", and the draft was empty under a status
    saying "the findings above are unverified; the draft stands". They stay, unverified."""
    anthropic_standin.policy = by_order
    openai_standin.policy = lambda conversation: Action(status=400, error_message="verifier down")
    config = 'min_severity = "nit"\npasses = 2\n'
    world = build_world(github, tmp_path, head=PASSES_HEAD, files={CONFIG: config})
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    status = world.status_body()
    assert "verifier down" in status and "left out of the draft" not in status
    [review] = await world.review_rows()
    rows = await world.ctx.db.fetchall(
        "SELECT path, title, verify_status FROM findings WHERE review_id = ?", (review["id"],)
    )
    patterns = {(f["path"], f["title"]) for f in scan_diff_of(PASSES_HEAD)}
    raised = {
        key
        for files in sessions_told(anthropic_standin)
        for key in {k for k in patterns if k[0] in files[:2]} | {hunch(files[0])}
    }
    assert raised and {(r["path"], r["title"]) for r in rows} == raised
    assert {r["verify_status"] for r in rows} == {None}


@pytest.mark.backends
async def test_passes_raising_once_only_on_ignored_files_run_no_verify_pass_and_claim_none(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """`passes = 2`: both passes raise the eval() (kept), and each a finding of its own on an
    ignored file (dropped). `Draft.once` still counted the dropped ones, so the review went
    "verifying" and stored a verify provider as if a verify pass had run on the draft (the
    check run says "Verify pass (codex): 0 confirmed, 0 refuted, 0 uncertain")."""

    def eval_and_a_generated_hunch(conversation):
        action = by_order(conversation)
        if [name for name, _ in action.tools] == ["submit_review"]:
            first = listed(conversation.user_texts[0])[0]
            said = "Overflow in counter" if first == "calc.py" else "Unicode normalisation skipped"
            hunch = {**EVAL, "path": "gen/out.py", "line": 1, "title": said, "body": said}
            action.tools[0][1]["findings"] = [dict(EVAL), hunch]
        return action

    anthropic_standin.policy = eval_and_a_generated_hunch
    head = {**PASSES_HEAD, "gen/out.py": "X = 1\n"}
    config = 'min_severity = "nit"\npasses = 2\nignore = ["gen/**"]\n'
    world = build_world(github, tmp_path, head=head, files={CONFIG: config})
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft", timeout=60)
    await world.wait_idle(60)
    [review] = await world.review_rows()
    rows = await world.ctx.db.fetchall(
        "SELECT path, title FROM findings WHERE review_id = ?", (review["id"],)
    )
    assert [tuple(r) for r in rows] == [("calc.py", EVAL["title"])]
    assert not openai_standin.requests and review["verify_provider"] is None
    assert "1 finding raised by two passes or more; 0 raised by one" in world.status_body()
