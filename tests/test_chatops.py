"""Every command through the real server, the GitHub stand-in and a scripted model."""

from __future__ import annotations

import asyncio

import pytest

from bot.commands.draft import cmd_approve
from bot.commands.parse import parse_commands
from bot.commands.pr import PullRequest
from bot.queue import sqlite as queue
from bot.records.pulls import get_pull
from bot.server import CONTEXT, make_app
from handlers import router
from tests.conftest import wait_for
from tests.world import (
    NOTHING_FOLDED,
    build_world,
    comment_payload,
    review_thread_payload,
    settle,
)

pytestmark = pytest.mark.backends

PEOPLE = {
    "octocat": "admin",
    "maint": "maintain",
    "writer": "write",
    "reader": "read",
    "stranger": "none",
    "forker": "outside",
}


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    world = build_world(github, tmp_path, permissions=PEOPLE, files=NOTHING_FOLDED)
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    world.settings = settings
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    return world


def reactions(world, comment_id):
    return [r["content"] for r in world.github.reactions if r["comment_id"] == comment_id]


def replies(world):
    return [
        c["body"]
        for c in world.github.issue_comments.values()
        if "<!-- pr-cockpit:status -->" not in c["body"]
    ]


def submits(world):
    return world.github.calls("POST", r"/reviews/\d+/events$")


async def comment(world, body, *, user="octocat", comment_id=9001, delivery_id=None):
    await world.send(
        "issue_comment", comment_payload(world, body, user=user, comment_id=comment_id), delivery_id
    )
    await world.wait_idle()


async def test_approve_publishes_the_draft(world):
    await comment(world, "Looks right to me.\n\n/cockpit approve")
    [review] = await world.review_rows()
    assert (review["state"], review["posted_by"], review["posted_event"]) == (
        "posted",
        "octocat",
        "REQUEST_CHANGES",
    )
    [published] = world.github.reviews.values()
    assert published["state"] == "CHANGES_REQUESTED" and len(published["comments"]) == 2
    assert submits(world)[0]["body"] == {"event": "REQUEST_CHANGES"}
    assert reactions(world, 9001) == ["eyes", "rocket"]
    assert "Published" in world.status_body()
    checked = await world.ctx.db.fetchall("SELECT checked_by FROM findings")
    assert {r["checked_by"] for r in checked} == {"human"}
    assert world.github.violations == []


async def test_redelivered_approve_publishes_once(world):
    await comment(world, "/cockpit approve", delivery_id="approve-1")
    await comment(world, "/cockpit approve", delivery_id="approve-1")  # GitHub redelivers
    await comment(world, "/cockpit approve", user="maint", comment_id=9002)  # a second person
    assert len(submits(world)) == 1
    assert any("already published" in body for body in replies(world))


async def test_two_concurrent_approves_publish_once(world):
    ctx = world.client.app[CONTEXT]
    pull = await get_pull(ctx.db, world.full_name, 1)
    repo = {"full_name": world.full_name, "name": "widgets", "owner": {"login": "octo"}}
    gh = ctx.github.installation_api(7)
    [command] = parse_commands("/cockpit approve")
    answers = await asyncio.gather(
        *[
            cmd_approve(PullRequest(ctx, gh, repo, 1, pull, user), command)
            for user in ("octocat", "maint")
        ]
    )
    assert len(submits(world)) == 1
    assert sum("Published the review" in a for a in answers) == 1
    assert sum("being published" in a or "already published" in a for a in answers) == 1


async def test_approve_a_subset_as_a_comment(world):
    await comment(world, "/cockpit approve F2 --comment")
    [published] = world.github.reviews.values()
    assert published["state"] == "COMMENTED"
    assert [c["body"].split(" · ")[0] for c in published["comments"]] == ["**F2"]
    checked = await world.ctx.db.fetchall("SELECT ordinal, checked_by FROM findings")
    assert {r["ordinal"]: r["checked_by"] for r in checked} == {1: "auto", 2: "human"}


async def test_drop_then_approve(world):
    await comment(world, "/cockpit drop F2")
    [pending] = world.pending_reviews()
    assert len(pending["comments"]) == 1
    assert "~~Compare with None using `is`~~ (dropped by octocat)" in world.status_body()
    await comment(world, "/cockpit approve", comment_id=9003)
    [published] = world.github.reviews.values()
    assert len(published["comments"]) == 1 and published["state"] != "PENDING"


async def findings_as_stored(world) -> list[tuple]:
    rows = await world.ctx.db.fetchall(
        "SELECT ordinal, state, checked_by, dropped_by, why FROM findings ORDER BY ordinal"
    )
    return [tuple(row) for row in rows]


async def test_drop_needs_the_approve_permission_and_records_who_dropped(world):
    """Dropping decides what is published (a dropped finding is suppressed for the rest of
    the PR): with `approve_permission = "maintain"` a writer may run commands but neither
    approve nor drop; a maintainer's drop keeps their login and reason."""
    config = 'min_severity = "nit"\napprove_permission = "maintain"\n'
    world.github.repos[world.full_name].files[".github/cockpit.toml"] = config
    before = await findings_as_stored(world)
    assert [row[1:4] for row in before] == [("kept", "auto", None)] * 2

    await comment(world, "/cockpit drop F1 it is only a fixture", user="writer")
    assert reactions(world, 9001) == ["eyes", "confused"]
    refused = [b for b in replies(world) if "/cockpit drop` did not work" in b]
    assert len(refused) == 1 and "needs `maintain` permission" in refused[0]
    assert await findings_as_stored(world) == before  # nothing dropped
    [pending] = world.pending_reviews()
    assert len(pending["comments"]) == 2

    await comment(world, "/cockpit approve", user="writer", comment_id=9002)
    assert reactions(world, 9002) == ["eyes", "confused"] and submits(world) == []

    await comment(world, "/cockpit drop F1 it is only a fixture", user="maint", comment_id=9003)
    assert reactions(world, 9003) == ["eyes", "rocket"]
    dropped, kept = await findings_as_stored(world)
    assert dropped == (1, "dropped", "human", "maint", "it is only a fixture")
    assert kept == before[1]
    [pending] = world.pending_reviews()
    assert len(pending["comments"]) == 1
    assert "(dropped by maint)" in world.status_body()


async def test_approve_of_a_stale_draft_is_refused(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = false\n"
    world.ctx.github._etags.clear()
    new_head = world.push({"calc.py": "x = 1\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=new_head))
    await world.wait_idle()
    await comment(world, "/cockpit approve")
    assert submits(world) == []
    assert reactions(world, 9001) == ["eyes", "confused"]
    assert any("stale" in body and "/cockpit review" in body for body in replies(world))


@pytest.mark.parametrize("user", ["reader", "stranger", "forker"])
async def test_people_without_write_access_get_one_reply_and_nothing_runs(world, user):
    before = len(await world.review_rows())
    await comment(world, "/cockpit review\n/cockpit approve", user=user)
    assert reactions(world, 9001) == ["confused"]
    not_allowed = [b for b in replies(world) if "can only be run by people with write" in b]
    assert len(not_allowed) == 1
    assert submits(world) == [] and len(await world.review_rows()) == before


async def test_write_access_is_enough_for_commands(world):
    await comment(world, "/cockpit status", user="writer")
    assert reactions(world, 9001) == ["eyes", "rocket"]


async def test_review_command_with_another_provider(world, openai_standin):
    await comment(world, "/cockpit review --provider codex")
    rows = await world.review_rows()
    assert [r["provider"] for r in rows] == ["claude", "codex"]
    assert rows[-1]["state"] == "draft" and openai_standin.requests
    assert any("queued with `codex`" in body for body in replies(world))


async def test_stop_cancels_a_running_review(world):
    world.model.gate.clear()
    requests = len(world.model.requests)
    await world.send("issue_comment", comment_payload(world, "/cockpit review"))
    await world.wait_review("running", index=1)
    await wait_for(lambda: len(world.model.requests) > requests)  # its check run is made
    await world.send("issue_comment", comment_payload(world, "/cockpit stop", comment_id=9004))
    await world.wait_review("cancelled", index=1)
    world.model.gate.set()
    await world.wait_idle()
    assert any("Stopped the running review" in body for body in replies(world))
    assert world.github.check_runs[max(world.github.check_runs)]["conclusion"] == "cancelled"


async def test_help_and_unknown_commands(world):
    await comment(world, "/cockpit help")
    await comment(world, "/cockpit frobnicate", comment_id=9005)
    bodies = replies(world)
    assert any("PR Cockpit commands" in b and "/cockpit approve" in b for b in bodies)
    assert any("`/cockpit frobnicate` is not a command" in b for b in bodies)
    assert reactions(world, 9005) == ["eyes", "confused"]


async def test_several_commands_run_in_order(world):
    await comment(world, "/cockpit drop F1\n/cockpit approve")
    [published] = world.github.reviews.values()
    assert [c["body"].split(" · ")[0] for c in published["comments"]] == ["**F2"]


async def test_unknown_finding_reference_fails_clearly(world):
    await comment(world, "/cockpit drop F9")
    assert any("the draft has no F9" in body for body in replies(world))


async def test_edited_comments_never_execute(world):
    data = comment_payload(world, "/cockpit approve", action="edited")
    data["installation"] = {"id": 7}
    await world.send("issue_comment", data)
    await world.wait_idle()
    await settle()
    assert submits(world) == [] and reactions(world, 9001) == []


async def test_commands_in_review_threads(world):
    await world.send(
        "pull_request_review_comment",
        review_thread_payload(world, "/cockpit status", comment_id=7001),
    )
    await world.wait_idle()
    kinds = [(r["kind"], r["content"]) for r in world.github.reactions if r["comment_id"] == 7001]
    assert kinds == [("review_comment", "eyes"), ("review_comment", "rocket")]


async def test_model_commands_are_rate_limited(world):
    from bot.ratelimit import CommandLimits, Limit

    world.ctx.limits = CommandLimits(per_pr=Limit(1, 3600))
    await comment(world, "/cockpit review")
    await comment(world, "/cockpit review", comment_id=9006)
    assert len(await world.review_rows()) == 2  # the opened review + one command
    assert any("Too many model runs" in body for body in replies(world))


async def test_crash_between_claim_and_submit_is_recovered_once(world, settings, aiohttp_client):
    [review] = await world.review_rows()
    db = world.ctx.db
    await db.execute(
        "UPDATE reviews SET state = 'posting', posted_by = 'octocat',"
        " posted_event = 'COMMENT' WHERE id = ?",
        (review["id"],),
    )
    await db.execute("UPDATE findings SET checked_by = 'human'")
    await world.client.close()  # the server dies after claiming, before GitHub answered
    world.client = await aiohttp_client(make_app(settings, router))
    await world.wait_review("posted")
    assert len(submits(world)) == 1
    [published] = world.github.reviews.values()
    assert published["state"] == "COMMENTED"


async def test_recovery_does_not_resubmit_what_github_already_has(world, settings, aiohttp_client):
    await comment(world, "/cockpit approve")
    [review] = await world.review_rows()
    await world.ctx.db.execute(
        "UPDATE reviews SET state = 'posting' WHERE id = ?", (review["id"],)
    )  # GitHub answered, the process died first
    await world.client.close()
    world.client = await aiohttp_client(make_app(settings, router))
    await world.wait_review("posted")
    assert len(submits(world)) == 1


async def test_a_failed_submit_keeps_the_draft_and_a_retry_publishes_once(world):
    world.github.fail_next("POST", r"/reviews/\d+/events$", 502)
    await comment(world, "/cockpit approve")
    [review] = await world.review_rows()
    assert review["state"] == "draft"  # nothing went out, so approve may run again
    assert any("GitHub refused to publish" in body for body in replies(world))
    await comment(world, "/cockpit approve", comment_id=9010)
    published = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert len(published) == 1 and len(published[0]["comments"]) == 2
    assert len(submits(world)) == 2  # the refused one, then the one that published


async def test_approving_a_dropped_finding_is_refused(world):
    await comment(world, "/cockpit drop F2")
    await comment(world, "/cockpit approve F2", comment_id=9011)
    assert any("F2 was dropped" in body for body in replies(world))
    assert all(r["state"] == "PENDING" for r in world.github.reviews.values())


async def test_a_failed_partial_approve_does_not_shrink_the_next_full_one(world):
    world.github.fail_next("POST", r"/reviews/\d+/events$", 502)
    await comment(world, "/cockpit approve F2")
    [review] = await world.review_rows()
    assert review["state"] == "draft"
    await comment(world, "/cockpit approve", comment_id=9012)
    published = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert len(published) == 1
    assert sorted(c["body"].split(" · ")[0] for c in published[0]["comments"]) == ["**F1", "**F2"]
    assert any("with 2 finding(s)" in body for body in replies(world))
    assert world.pending_reviews() == []


async def test_approve_checks_the_live_head_even_without_a_synchronize_delivery(world):
    world.push({"calc.py": "x = 1\n"})  # GitHub has the push; its delivery never arrived
    await comment(world, "/cockpit approve")
    assert submits(world) == []
    assert any("stale" in body and "/cockpit review" in body for body in replies(world))
    [review] = await world.review_rows()
    assert review["stale"] == 1 and review["state"] == "draft"
    assert "Stale draft" in world.status_body()


async def test_a_strangers_command_flood_gets_one_answer_an_hour(world):
    for n in range(6):
        await comment(world, "/cockpit review", user="stranger", comment_id=9100 + n)
    await comment(world, "/cockpit approve", user="reader", comment_id=9200)  # someone else
    not_allowed = [b for b in replies(world) if "can only be run by people with write" in b]
    assert len(not_allowed) == 2
    stranger = [r for r in world.github.reactions if 9100 <= r["comment_id"] < 9200]
    assert [r["content"] for r in stranger] == ["confused"]
    assert len(await world.review_rows()) == 1  # nothing started


@pytest.mark.sqlite_only("times its retries through the SQLite queue's backoff and jobs table")
async def test_publishing_waits_for_github_as_long_as_it_takes(world, monkeypatch):
    monkeypatch.setattr(queue, "backoff_seconds", lambda attempts: 0.05)  # minutes, in life
    world.github.fail_next("POST", r"/reviews/\d+/events$", 0)  # unreachable
    world.github.fail_next("GET", r"/reviews/\d+$", 0, times=8)  # aiohttp retries a GET once
    await comment(world, "/cockpit approve")
    await world.wait_review("posted")
    assert any("publishing is waiting for GitHub" in body for body in replies(world))
    edits = [c["body"]["body"] for c in world.github.calls("PATCH", r"/issues/comments/\d+$")]
    assert any("waiting for GitHub" in e and "retried automatically" in e for e in edits)
    assert "Published" in world.status_body()
    published = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert len(published) == 1 and len(published[0]["comments"]) == 2
    job = await world.ctx.db.fetchone("SELECT * FROM jobs WHERE kind = 'recover_posting'")
    assert job["state"] == "done" and job["attempts"] > 3  # past the old limit of 3


async def test_a_refused_recovery_gives_the_draft_back(world, monkeypatch):
    monkeypatch.setattr(queue, "backoff_seconds", lambda attempts: 0.05)
    world.github.fail_next("POST", r"/reviews/\d+/events$", 0)  # unreachable, then …
    world.github.fail_next("POST", r"/reviews/\d+/events$", 422)  # … no (e.g. PR locked)
    world.github.fail_next("GET", r"/reviews/\d+$", 0, times=2)  # aiohttp retries a GET once
    await comment(world, "/cockpit approve")
    review = await world.wait_review("draft")
    assert review["progress"].startswith("publishing failed: GitHub answered 422")
    assert "The last approve did not go through" in world.status_body()
