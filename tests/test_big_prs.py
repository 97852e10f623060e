"""End to end, through the real server, the GitHub stand-in and the model stand-in: PRs of
thousands of files end in a draft. No git command line grows with the PR (a command line
over the kernel's limit fails to start with "Argument list too long"), and the status
comment says which files were not reviewed."""

from __future__ import annotations

import json
import re

import pytest

from bot.server import make_app
from handlers import router
from tests.bigpr import import_pr, service_files, vendored_files
from tests.conftest import wait_for
from tests.world import BASE, HEAD, INSTALLATION, NAME, OWNER, World

pytestmark = pytest.mark.backends

KEPT = "internal/codec/codec_01234.go"
BIG = 300.0  # seconds a review of 30,000 files may take on a loaded machine (not a target)


async def opened(github, settings, tmp_path, aiohttp_client, model, *, base, head) -> World:
    pr = import_pr(tmp_path / "origin", base=base, head=head)
    repo = github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    world = World(github, pr, repo)
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = model
    await world.send("pull_request", world.pull_request_payload("opened"))

    async def ended():
        rows = await world.review_rows()
        return bool(rows) and rows[-1]["state"] in ("draft", "failed")

    await wait_for(ended, timeout=BIG)
    [review] = await world.review_rows()
    assert (review["state"], review["error"]) == ("draft", None)
    await world.wait_idle(BIG)  # the job still edits GitHub after the state is set
    return world


def seen_diff(world: World) -> str:
    final = world.model.normalise(world.model.requests[-1])
    calls = zip(final.tool_calls, final.tool_results, strict=True)
    [diff] = [result for (name, _), result in calls if name == "git_diff"]
    return diff


async def test_a_pr_of_30000_files_in_folders_of_their_own_ends_in_a_draft(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    head = {**HEAD, **service_files(30_000), "package-lock.json": '{"lockfileVersion": 3}\n'}
    world = await opened(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, base=BASE, head=head
    )
    diff = seen_diff(world)  # the whole PR's diff but the lock file, cut to the tool's cap
    note, _, diff = diff.partition("\n")
    assert note.startswith("[1 changed file(s) left out of this diff")
    assert diff.startswith("diff --git a/calc.py b/calc.py") and "package-lock.json" not in diff
    [review] = await world.review_rows()
    assert review["error"] is None and review["verdict"] == "request_changes"
    not_reviewed = dict(json.loads(review["not_reviewed"]))
    assert len(not_reviewed) == 30_002 - 60  # `max_files` is 60
    assert not_reviewed["package-lock.json"] == "lock file"
    stored = await world.ctx.db.fetchall("SELECT path FROM findings")
    assert {f["path"] for f in stored} == {"calc.py"}
    status = world.status_body()
    assert "29942 file(s) not reviewed" in status
    assert "`package-lock.json` — lock file" in status
    # the first 200 are named, the rest counted: the comment stays under GitHub's limit
    assert "- … and 29742 more: 29742 over the limit of 60 files\n" in status
    assert "/cockpit approve" in status  # the comment is whole: nothing after the list is cut
    [pending] = world.pending_reviews()
    assert {c["path"] for c in pending["comments"]} == {"calc.py"}
    _system, request = first_request(world)
    assert len(request) < 100_000  # the model is not told 30,000 file names one by one


def first_request(world: World) -> tuple[str, str]:
    conversation = world.model.normalise(world.model.requests[0])
    return conversation.system, conversation.user_texts[0]


async def test_a_vendored_tree_of_3000_folders_under_team_rules_ends_in_a_draft(
    github, settings, tmp_path, aiohttp_client, anthropic_standin
):
    """Every changed file sits in folders of its own: a REVIEW.md, an AGENTS.md or a
    `.gitattributes` could be in each of them (12,000 places, over 2 MB of paths)."""
    vendored = vendored_files(3_000)
    marked = "vendor/github.com/example-org-01234/library-01234"
    assert f"{marked}/{KEPT}" in vendored
    base = {
        **BASE,
        "REVIEW.md": "Flag every print() call.\n",
        f"{marked}/REVIEW.md": "Vendored code: never review.\n",
        f"{marked}/.gitattributes": "* -linguist-vendored\n",
    }
    world = await opened(
        github,
        settings,
        tmp_path,
        aiohttp_client,
        anthropic_standin,
        base=base,
        head={**HEAD, **vendored},
    )
    note, _, diff = seen_diff(world).partition("\n")
    assert note.startswith("[2999 changed file(s) left out of this diff")
    # only the vendored file its folder's `.gitattributes` keeps in the review is shown
    assert re.findall(r"^\+\+\+ b/(.*)$", diff, re.M) == ["calc.py", f"{marked}/{KEPT}"]
    _system, request = first_request(world)
    assert "Flag every print() call." in request
    status = world.status_body()
    # the vendored folder whose `.gitattributes` keeps its file in the review is reviewed
    assert "🧹 2999 generated, vendored, lock or minified file(s) left out" in status
    assert f"`{marked}/REVIEW.md` (for 1 file(s))" in status
    [review] = await world.review_rows()
    assert review["error"] is None and review["state"] == "draft"
