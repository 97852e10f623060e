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
