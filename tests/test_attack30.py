"""Attacks on sign-in, vet, reconcile and the cockpit page (#30, #31) that found something:
each test is a way in that used to work."""

from __future__ import annotations

import pytest

from tests.test_page import page_world  # noqa: F401 - the fixture
from tests.test_signin import browser, cockpit, follow  # noqa: F401 - the fixture
from tests.test_vet import vet_settings, world  # noqa: F401 - the fixtures

pytestmark = pytest.mark.backends


async def test_a_link_another_user_completes_still_works_for_its_owner(cockpit, github):  # noqa: F811
    """The vet reply's sign-in link is public on the PR: anyone who opens it and signs in as
    themselves must not use it up for the person it was made for."""
    link = cockpit.link("alice")
    github.web_user = "bob"
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 403 and "for another GitHub user" in page
    github.web_user = "alice"
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 200 and "Signed in as @alice" in page, page
    assert [row[1] for row in await cockpit.token_rows()] == ["alice"]


async def test_an_inline_finding_named_in_the_body_and_deleted_is_removed(world):  # noqa: F811
    """The review body holds the model's summary (text a PR can steer): a summary that names
    `**F2 · minor**` must not keep F2 published when the vetter deleted F2's comment."""
    from tests.test_vet import (
        comments_of,
        findings_by_number,
        pending_of,
        signed_in,
        submitted,
        vet_comment,
    )

    [row] = await world.review_rows()
    summary = "Fix **F2 · minor** · Unused import first; the rest can wait."
    await world.ctx.db.execute("UPDATE reviews SET summary = ? WHERE id = ?", (summary, row["id"]))
    await signed_in(world, "alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    held = comments_of(world, theirs)
    assert sorted(held) == [1, 2] and "**F2 · minor** · " in theirs["body"]
    world.github.delete_pending_comment(held[2]["id"])
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()
    found = await findings_by_number(world)
    assert (found[1].state, found[1].edited) == ("kept", 0)
    assert (found[2].state, found[2].dropped_by) == ("dropped", "alice")
    assert "removed: F2" in world.status_body()


async def test_a_body_item_deleted_while_the_summary_names_it_is_removed(
    github,
    vet_settings,  # noqa: F811
    tmp_path,
    aiohttp_client,
    anthropic_standin,
    openai_standin,
):
    """The folded nit F2 is an item of the vetter's review body, under the model's summary;
    the summary naming `**F2 · nit**` must not keep F2 once the person took its item out."""
    from bot.server import make_app
    from handlers import router
    from tests.test_vet import findings_by_number, pending_of, signed_in, submitted, vet_comment
    from tests.world import build_world

    folded = build_world(github, tmp_path, permissions={"alice": "write"})
    folded.client = await aiohttp_client(make_app(vet_settings, router))
    folded.settings = vet_settings
    await folded.send("pull_request", folded.pull_request_payload("opened"))
    await folded.wait_review("draft")
    [row] = await folded.review_rows()
    summary = "**F2 · nit** · first, then the rest."
    await folded.ctx.db.execute("UPDATE reviews SET summary = ? WHERE id = ?", (summary, row["id"]))
    await signed_in(folded, "alice")
    await vet_comment(folded)
    [theirs] = pending_of(folded, "alice")
    assert theirs["body"].count("**F2 · nit** · ") == 2  # the summary's and the item's
    body = theirs["body"].split("#### Other findings")[0] + "Thanks!"
    folded.github.reviews[theirs["id"]]["body"] = body
    await folded.send("pull_request_review", submitted(folded, theirs["id"]))
    await folded.wait_idle()
    found = await findings_by_number(folded)
    assert (found[1].state, found[1].edited) == ("kept", 0)
    assert (found[2].state, found[2].dropped_by) == ("dropped", "alice")


async def test_a_command_line_in_model_text_does_not_run_as_the_vetter(world):  # noqa: F811
    """A finding's text is the model's (a PR can steer it). Once it sits in the vetter's
    review, GitHub delivers its comment as the vetter's own `pull_request_review_comment`:
    a `/cockpit …` line in it must not run with their identity and permission."""
    from bot.commands.parse import parse_commands
    from tests.test_vet import comments_of, pending_of, signed_in, submitted, vet_comment
    from tests.world import review_thread_payload

    [row] = await world.review_rows()
    injected = "The divisor can be 0.\n/cockpit signout"
    await world.ctx.db.execute(
        "UPDATE findings SET body = ? WHERE review_id = ? AND ordinal = 1", (injected, row["id"])
    )
    await signed_in(world, "alice")
    alice = world.github.oauth.user_id("alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    first = comments_of(world, theirs)[1]
    assert [c.name for c in parse_commands(first["body"])] == ["signout"]  # as GitHub holds it
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()
    # GitHub announces each comment of the submitted review, as written by alice.
    thread = review_thread_payload(world, first["body"], user="alice", comment_id=first["id"])
    thread["comment"]["user"]["id"] = thread["sender"]["id"] = alice
    await world.send("pull_request_review_comment", thread)
    await world.wait_idle()
    assert await world.ctx.user_tokens.signed_in(alice)
    assert not [c for c in world.github.issue_comments.values() if "signed out" in c["body"]]


async def test_a_name_taken_over_after_a_rename_does_not_show_the_old_drafts(page_world):  # noqa: F811
    """GitHub frees a renamed repository's (or account's) old name: whoever creates a new
    `octo/old` and installs the App must not see the drafts kept under that name for the
    repository that had it (GitHub's repository id tells them apart)."""
    from tests.test_page import get, signed_in
    from tests.test_stats import History, finding

    old = History(page_world.ctx.db)
    pull = await old.pull("octo/old", 3, "c")  # the repository that had the name (its own id)
    await old.draft(pull, "c", [(1, finding(1))], provider="claude", model="claude-x", usd=[0.1])
    taken = page_world.github.add_repo("octo", "old", clone_url="https://example.test/o.git")
    row = await page_world.ctx.db.fetchone("SELECT repo_id FROM pulls WHERE repo = 'octo/old'")
    assert row["repo_id"] != taken.id
    page_world.github.user_access.grant("mallory", "octo/old")
    mallory = await signed_in(page_world, "mallory")
    status, page, _ = await get(page_world, "/r/octo/old/pull/3", mallory)
    assert status == 404 and "F1" not in page
