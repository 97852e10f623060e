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
from tests.test_review_groups import CONFIG, PASSES_HEAD, by_order, listed, module, sessions_told
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
