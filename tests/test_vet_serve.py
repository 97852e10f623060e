"""#30 end to end through a real `cockpit serve`: `/cockpit vet` with no sign-in replies with
a link; alice follows it (GitHub's authorize page, the callback), the vet goes on by itself
and the reply says so; in Files changed she edits one comment, deletes one and submits; the
status comment, the findings' rows, the ledger and `cockpit stats` (run from another folder)
show one published by her (edited) and one dropped by her. Her token is in no log line, page,
request body to GitHub, nor in plain text in the database file. Both backends."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.test_signin import (
    SECRET_KEY,
    Cockpit,
    access_tokens,
    assert_secret_nowhere,
    browser,
    follow,
)
from tests.test_stats import cockpit as cockpit_cli
from tests.test_vet import comments_of, pending_of, submitted
from tests.world import NOTHING_FOLDED, build_world, comment_payload

pytestmark = pytest.mark.backends


async def deliver(server_url: str, event: str, data: dict, delivery_id: str) -> None:
    body = json.dumps(data).encode()
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{server_url}/webhooks/github",
            data=body,
            headers=deliveries.headers(event, body, WEBHOOK_SECRET, delivery_id),
        ) as response,
    ):
        assert response.status == 202, await response.text()


async def test_vet_sign_in_edit_delete_submit_through_a_real_server(
    github, tmp_path, database_url, anthropic_standin
):
    world = build_world(
        github, tmp_path, permissions={"alice": "write", "octocat": "admin"}, files=NOTHING_FOLDED
    )
    extra = {"COCKPIT_SECRET_KEY": SECRET_KEY} if database_url else {}
    extra["ANTHROPIC_BASE_URL"] = anthropic_standin.url
    running = Cockpit(github, tmp_path, database_url, **extra)
    await running.server.start()
    try:
        await deliver(running.url, "pull_request", world.pull_request_payload("opened"), "d-1")
        await wait_for(lambda: bool(world.pending_reviews()), timeout=60)
        vet = comment_payload(world, "/cockpit vet", user="alice")
        vet["comment"]["user"]["id"] = vet["sender"]["id"] = github.oauth.user_id("alice")
        await deliver(running.url, "issue_comment", vet, "d-2")

        def reply() -> str | None:
            found = [
                c for c in github.issue_comments.values() if "Sign in with GitHub" in c["body"]
            ]
            return found[0]["body"] if found else None

        await wait_for(lambda: reply() is not None, timeout=30)
        link = reply().split("](", 1)[1].split(")", 1)[0]
        assert link.startswith(f"{running.url}/auth/github/login?state=")
        github.web_user = "alice"
        async with browser() as http:
            status, page, _ = await follow(http, link)
        assert status == 200 and "Signed in as @alice" in page

        def vetted() -> bool:
            return any(
                "your pending review now" in c["body"] for c in github.issue_comments.values()
            )

        await wait_for(vetted, timeout=30)
        [theirs] = pending_of(world, "alice")
        held = comments_of(world, theirs)
        assert sorted(held) == [1, 2]
        assert [r for r in world.pending_reviews() if r is not theirs] == []  # the bot's: gone
        assert "The draft is @alice's pending review" in world.status_body()

        github.edit_pending_comment(held[1]["id"], held[1]["body"] + "\n\nPlease add a test.")
        github.delete_pending_comment(held[2]["id"])
        await deliver(running.url, "pull_request_review", submitted(world, theirs["id"]), "d-3")
        await wait_for(lambda: "Published by @alice" in world.status_body(), timeout=30)
        assert "Published by @alice in their review**: F1 (F1 edited) · removed: F2" in (
            world.status_body()
        )
        rows = await running.rows(
            "SELECT ordinal, state, checked_by, edited, dropped_by, why FROM findings"
            " ORDER BY ordinal"
        )
        assert [tuple(r) for r in rows] == [
            (1, "kept", "human", 1, None, None),
            (2, "dropped", "human", None, "alice", "removed from their review"),
        ]
        [(state, posted_by)] = await running.rows("SELECT state, posted_by FROM reviews")
        assert (state, posted_by) == ("posted", "alice")
    finally:
        running.server.terminate()

    # the ledger: F1 published, F2 dropped by a person (with her reason)
    from bot.backend import open_database
    from bot.review import ledger

    db = await open_database(running.settings, read_only=True)
    try:
        items = {item.ordinal: item for item in await ledger.load(db, 1)}
    finally:
        await db.close()
    assert (items[1].status, items[2].status, items[2].why) == (
        "published",
        "dropped",
        "removed from their review",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"COCKPIT_DATA_DIR": str(running.data_dir)}
    if database_url:
        env["COCKPIT_DATABASE_URL"] = database_url
    done = cockpit_cli(["stats", "--json"], elsewhere, **env)
    assert done.returncode == 0, done.stderr
    [model] = json.loads(done.stdout)["models"]
    assert (model["published"], model["dropped_by_people"], model["acceptance"]) == (1, 1, 0.5)
    assert_secret_nowhere(running, access_tokens(github, "alice"), [page])
