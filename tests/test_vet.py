"""#30 `/cockpit vet`: the draft as the vetter's own pending review, and reconciling what they
submit by `F` number (published by a person, edited, dropped by a person; their own comments
left alone)."""

from __future__ import annotations

import pytest

from bot.review.reconcile import number_of, reconcile
from bot.standin.github_reviews import review_node_id

F1 = "**F1 · major** · Division by zero\n\nThe divisor can be 0."
F2 = "**F2 · minor** · Unused import\n\n`os` is never used."
F3 = "**F3 · critical** · SQL injection\n\nThe name goes into the query."
F4 = "- **F4 · major** · `a.py:90` — **Outside the diff** (not on a line of the diff)"


def test_reconcile_by_number_published_edited_removed_and_own_comments():
    placed = {1: F1, 2: F2, 3: F3, 4: F4}
    comments = [
        F1.replace("\n", "\r\n") + " ",  # GitHub's line endings: not an edit
        "**F3 · critical** · SQL injection\n\nUse a bound parameter here.",  # edited
        "I would also rename this.",  # the person's own
        "**F9 · nit** · typed by the person",  # no finding of ours: theirs
    ]
    body = "Looks good overall.\n\n" + F4 + "\n"
    outcome = reconcile(placed, comments, body)
    assert {n: edited for n, (_, edited) in outcome.published.items()} == {
        1: False,
        3: True,
        4: False,
    }
    assert outcome.published[3][0].endswith("Use a bound parameter here.")
    assert outcome.removed == (2,)
    assert outcome.own == 2


def test_a_body_finding_deleted_from_the_body_is_removed():
    outcome = reconcile({4: F4}, [], "Nothing else.")
    assert outcome.removed == (4,) and outcome.published == {}


def test_number_of():
    assert number_of(F1) == 1
    assert number_of("  **F12 · nit** · x") == 12
    assert number_of("F1 is wrong") is None
    assert number_of("") is None


# -- what a vetter's submission stores, counted like approve and drop (both backends) ---------


@pytest.mark.backends
async def test_a_vetters_decisions_count_like_approve_and_drop(db):
    from bot.evals.from_reviews import golden_from_reviews
    from bot.records import review_state
    from bot.records.reviews import get_review, load_findings
    from bot.records.stats import model_figures
    from tests.test_stats import History, finding

    h = History(db)
    pull_id = await h.pull("octo/widgets", 1, "a")
    numbered = [(n, finding(n)) for n in (1, 2, 3, 4)]
    review_id = await h.draft(pull_id, "a", numbered, provider="claude", model="claude-x")
    placed = {1: F1, 2: F2, 3: F3}  # F4 was not put in the vetter's review
    assert await review_state.hand_to_vetter(db, review_id, "alice", 77, placed)
    assert (await get_review(db, review_id)).vetter == "alice"
    outcome = reconcile(placed, [F1, F3 + " (reworded)"], "")
    why = "removed from their review"
    assert not await review_state.published_by_person(
        db, review_id, "mallory", "COMMENT", outcome.published, outcome.removed, why
    )  # only the person holding the draft
    assert await review_state.published_by_person(
        db, review_id, "alice", "COMMENT", outcome.published, outcome.removed, why
    )
    review = await get_review(db, review_id)
    assert (review.state, review.posted_by) == ("posted", "alice")
    found = {f.ordinal: f for f in await load_findings(db, review_id)}
    assert [(found[n].state, found[n].checked_by, found[n].edited) for n in (1, 2, 3, 4)] == [
        ("kept", "human", 0),
        ("dropped", "human", None),
        ("kept", "human", 1),
        ("skipped", "auto", None),
    ]
    assert found[3].published_text == F3 + " (reworded)"
    assert (found[2].dropped_by, found[2].why) == ("alice", why)
    [figures] = await model_figures(db)
    assert (figures.published, figures.dropped_by_people) == (2, 1)
    golden = await golden_from_reviews(db, "octo/widgets")
    [case] = golden["cases"]
    assert [label["title"] for label in case["labels"]] == ["problem 1", "problem 3"]
    assert [label["title"] for label in case["known_false_positives"]] == ["problem 2"]


@pytest.mark.backends
async def test_an_upgrade_adds_the_vetters_columns_and_older_rows_still_read(
    backend, tmp_path, request
):

    from bot.records import schema
    from bot.records.reviews import get_review, load_findings
    from tests.schema_steps import open_from_before

    [step] = [s for s in schema.STEPS if ("reviews", "vetter", "TEXT") in s.columns]
    rows = [
        "INSERT INTO pulls (repo, number) VALUES ('octo/widgets', 7)",
        "INSERT INTO reviews (pull_id, head_sha, state, created_at, updated_at)"
        " VALUES (1, 'abc', 'draft', 0, 0)",
        "INSERT INTO findings (review_id, ordinal, path, severity, title, state)"
        " VALUES (1, 1, 'a.py', 'critical', 'older', 'kept')",
    ]
    db = await open_from_before(backend, tmp_path, request, step, rows)
    try:
        assert await db.schema_version() == schema.SCHEMA_VERSION
        review = await get_review(db, 1)
        assert (review.vetter, review.vetter_review_id) == (None, None)
        [older] = await load_findings(db, 1)
        assert (older.vetted_text, older.published_text, older.edited) == (None, None, None)
    finally:
        await db.close()


# -- `/cockpit vet` through the real server, the GitHub stand-in and a scripted model ---------


@pytest.fixture
def vet_settings(settings, github):
    import dataclasses

    from bot.config import Secret

    github.oauth.callback_urls = ["http://cockpit.test/auth/github/callback"]
    return dataclasses.replace(
        settings,
        client_id=github.oauth.client_id,
        client_secret=Secret(github.oauth.client_secret),
        public_url="http://cockpit.test",
    )


@pytest.fixture
async def world(github, vet_settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    from bot.server import make_app
    from handlers import router
    from tests.world import NOTHING_FOLDED, build_world

    people = {"octocat": "admin", "alice": "write", "reader": "read"}
    world = build_world(github, tmp_path, permissions=people, files=NOTHING_FOLDED)
    world.client = await aiohttp_client(make_app(vet_settings, router))
    world.settings = vet_settings
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    return world


async def signed_in(world, login: str) -> str:
    """`login` signs in (a real code exchange with the stand-in, stored as the callback
    stores it); their access token."""
    from tests.test_signin_tokens import _signed_in

    _, access = await _signed_in(world.github, world.ctx.user_tokens, login)
    return access


async def vet_comment(world, body="/cockpit vet", *, user="alice", comment_id=9001):
    from tests.world import comment_payload

    data = comment_payload(world, body, user=user, comment_id=comment_id)
    data["comment"]["user"]["id"] = data["sender"]["id"] = world.github.oauth.user_id(user)
    await world.send("issue_comment", data)
    await world.wait_idle()


def pending_of(world, login: str) -> list[dict]:
    return [r for r in world.pending_reviews() if world.github.review_author(r) == login]


def comments_of(world, review: dict) -> dict[int, dict]:
    """F number → the review's comment (None key: the person's own)."""
    return {number_of(c["body"]): c for c in world.github.review_comments_of(review["id"])}


def submitted(world, review_id: int) -> dict:
    """The person presses Submit review: GitHub's published `pull_request_review`
    `submitted` example, pointed at the world's repository and installation, carrying the
    stand-in's review (its id, node id, author and state) as GitHub would."""
    from tests import deliveries
    from tests.world import INSTALLATION, NAME, OWNER

    sent = world.github.submit_as_person(review_id)
    data = deliveries.payload("pull_request_review.submitted")
    deliveries.retarget(
        data,
        owner=OWNER,
        name=NAME,
        clone_url=world.pr.clone_url,
        installation_id=INSTALLATION,
        repo_id=world.repo.id,
    )
    data["pull_request"]["number"] = world.pr.number
    for key in ("id", "node_id", "user", "state", "body", "commit_id"):
        data["review"][key] = sent["review"][key]
    data["sender"] = sent["sender"]
    return data


def replies(world) -> list[str]:
    return [
        c["body"]
        for c in world.github.issue_comments.values()
        if "<!-- pr-cockpit:status -->" not in c["body"]
    ]


async def findings_by_number(world) -> dict:
    from bot.records.reviews import load_findings

    [review] = await world.review_rows()
    return {f.ordinal: f for f in await load_findings(world.ctx.db, review["id"])}


@pytest.mark.backends
async def test_vet_then_edit_one_delete_one_and_submit(world, caplog):
    import json

    from bot.records.stats import model_figures

    caplog.set_level("DEBUG")

    token = await signed_in(world, "alice")
    [bots] = world.pending_reviews()
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    assert theirs["commit_id"] == world.pr.head_sha
    held = comments_of(world, theirs)
    assert sorted(held) == [1, 2]
    assert held[1]["body"].startswith("**F1 · ") and held[2]["body"].startswith("**F2 · ")
    [created] = world.github.calls("POST", r"/pulls/1/reviews$")[-1:]
    assert created["headers"]["Authorization"].endswith(token)  # as alice, never submitted
    assert "event" not in created["body"]
    assert world.github.calls("POST", r"/reviews/\d+/events$") == []
    assert bots["id"] not in world.github.reviews  # the bot's own pending review is gone
    status = world.status_body()
    assert (
        "The draft is @alice's pending review**: in Files changed, edit or delete comments,"
        " add your own, then Submit review." in status
    )
    assert any("The draft is your pending review now: added F1, F2" in r for r in replies(world))
    [row] = await world.review_rows()
    assert (row["vetter"], row["vetter_review_id"]) == ("alice", theirs["id"])

    # In Files changed: alice rewords F1, deletes F2, adds a comment of her own, submits.
    world.github.edit_pending_comment(held[1]["id"], held[1]["body"] + "\n\nAlso add a test.")
    world.github.delete_pending_comment(held[2]["id"])
    own = {"pullRequestReviewId": review_node_id(theirs["id"]), "path": "calc.py"}
    world.github.add_pending_thread("alice", {**own, "line": 2, "body": "Nice catch."})
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()

    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"], row["posted_event"]) == ("posted", "alice", "COMMENT")
    found = await findings_by_number(world)
    assert (found[1].state, found[1].checked_by, found[1].edited) == ("kept", "human", 1)
    assert found[1].published_text.endswith("Also add a test.")
    assert (found[2].state, found[2].dropped_by, found[2].why) == (
        "dropped",
        "alice",
        "removed from their review",
    )
    assert (
        "Published by @alice in their review**: F1 (F1 edited) · removed: F2" in world.status_body()
    )
    [figures] = await model_figures(world.ctx.db)
    assert (figures.published, figures.dropped_by_people) == (1, 1)
    assert world.github.reviews[theirs["id"]]["state"] == "COMMENTED"  # as she submitted it
    assert world.github.calls("POST", r"/reviews/\d+/events$") == []  # the bot never submits
    # the token: only in the Authorization header of alice's own review's requests
    assert all(token not in json.dumps(r["body"]) for r in world.github.requests)
    assert all(token not in c["body"] for c in world.github.issue_comments.values())
    assert token not in caplog.text
    assert world.github.violations == []


async def test_a_vetter_with_their_own_pending_review_keeps_their_comment(world):
    await signed_in(world, "alice")
    pull = world.github.pulls[(world.full_name, world.pr.number)]
    # alice had started a review of her own in Files changed
    mine = {"id": 4242, "repo": world.full_name, "number": world.pr.number, "state": "PENDING"}
    world.github.reviews[4242] = {**mine, "body": "", "commit_id": pull.head_sha, "user": "alice"}
    world.github.reviews[4242]["comments"] = []
    world.github.reviews[4242]["html_url"] = ""
    world.github._add_review_comment(
        pull, 4242, {"path": "calc.py", "line": 2, "body": "My own note."}, "alice"
    )
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    assert theirs["id"] == 4242  # added to, never replaced
    held = comments_of(world, theirs)
    assert held[None]["body"] == "My own note."  # untouched
    assert sorted(n for n in held if n) == [1, 2]
    added = world.github.calls("POST", r"graphql$")
    assert any("addPullRequestReviewThread" in c["body"]["query"] for c in added)
    assert "The draft is @alice's pending review" in world.status_body()
    assert world.github.violations == []


async def test_without_a_token_the_reply_is_a_sign_in_link_and_the_vet_goes_on_after(world):
    from urllib.parse import parse_qs, urlsplit

    from bot.auth.state import read_state

    await vet_comment(world)
    [reply] = replies(world)
    assert "[Sign in with GitHub](http://cockpit.test/auth/github/login?state=" in reply
    state_text = parse_qs(urlsplit(reply.split("](")[1].split(")")[0]).query)["state"][0]
    state = read_state(world.settings, state_text)
    assert state.user_id == world.github.oauth.user_id("alice")
    assert state.then["job"] == "vet"
    assert pending_of(world, "alice") == []
    # alice completes the link: the callback stores her token and enqueues `then`
    await signed_in(world, "alice")
    then = state.then
    await world.ctx.jobs.enqueue(then["job"], then["key"], then["args"], queue="reviews")
    await world.wait_idle()
    [theirs] = pending_of(world, "alice")
    assert sorted(n for n in comments_of(world, theirs) if n) == [1, 2]
    [reply] = replies(world)  # the same reply, edited
    assert "The draft is your pending review now: added F1, F2" in reply


async def test_vet_without_sign_in_set_up_says_what_to_set(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    from bot.server import make_app
    from handlers import router
    from tests.world import NOTHING_FOLDED, build_world

    world = build_world(github, tmp_path, permissions={"alice": "write"}, files=NOTHING_FOLDED)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    await vet_comment(world)
    [reply] = replies(world)
    assert "GITHUB_CLIENT_ID, GITHUB_CLIENT_SECRET, COCKPIT_PUBLIC_URL" in reply


async def test_vet_needs_approve_permission(world):
    world.github.repos[world.full_name].files[".github/cockpit.toml"] += (
        'approve_permission = "admin"\n'
    )
    await signed_in(world, "alice")
    await vet_comment(world)
    assert pending_of(world, "alice") == []
    assert any("needs `admin` permission" in r for r in replies(world))


async def test_a_push_makes_the_new_draft_the_bots_again_and_vet_adds_only_what_is_missing(
    world,
):
    await signed_in(world, "alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    before = {n: c["body"] for n, c in comments_of(world, theirs).items()}
    head = world.push(
        {"store.py": "def load():\n    try:\n        return 1\n    except:\n        return 0\n"}
    )
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=head))
    await world.wait_review("draft", index=1)
    status = world.status_body()
    assert f"@alice's pending review holds the findings of `{world.pr.head_sha[:7]}`" in status
    assert "this new draft is the bot's again" in status
    assert (
        len([r for r in world.pending_reviews() if world.github.review_author(r) != "alice"]) == 1
    )
    await vet_comment(world, comment_id=9002)
    [still] = pending_of(world, "alice")
    assert still["id"] == theirs["id"]
    now = {n: c["body"] for n, c in comments_of(world, still).items()}
    assert sorted(now) == [1, 2, 3] and all(now[n] == before[n] for n in (1, 2))
    assert now[3].startswith("**F3 · minor** · Bare except")
    assert any("added F3; already in it F1, F2" in r for r in replies(world))
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()
    rows = await world.review_rows()
    assert (rows[1]["state"], rows[1]["posted_by"]) == ("posted", "alice")
    assert "Published by @alice in their review**: F1, F2, F3 · removed: none" in (
        world.status_body()
    )


async def test_findings_outside_the_inline_comments_are_items_of_the_body(
    github, vet_settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """With the default `min_severity` the nit of HEAD is folded: it is an item of the
    vetter's review body; taking it out of the body drops it."""
    from bot.server import make_app
    from handlers import router
    from tests.world import build_world

    world = build_world(github, tmp_path, permissions={"alice": "write"})
    world.client = await aiohttp_client(make_app(vet_settings, router))
    world.settings = vet_settings
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    await signed_in(world, "alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    assert sorted(n for n in comments_of(world, theirs) if n) == [1]
    assert "**F2 · nit** · " in theirs["body"]
    # alice keeps F1, deletes F2's item from the body and says something of her own
    body = theirs["body"].split("#### Other findings")[0] + "Thanks!"
    world.github.reviews[theirs["id"]]["body"] = body
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()
    found = await findings_by_number(world)
    assert (found[1].state, found[1].edited) == ("kept", 0)
    assert (found[2].state, found[2].dropped_by) == ("dropped", "alice")


async def test_a_review_by_someone_not_holding_the_draft_changes_nothing(world):
    pull = world.github.pulls[(world.full_name, world.pr.number)]
    world.github.reviews[4343] = {
        "id": 4343,
        "repo": world.full_name,
        "number": world.pr.number,
        "state": "PENDING",
        "body": "LGTM",
        "commit_id": pull.head_sha,
        "comments": [],
        "html_url": "",
        "user": "octocat",
    }
    await world.send("pull_request_review", submitted(world, 4343))
    await world.wait_idle()
    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"]) == ("draft", None)


# -- the GitHub stand-in, as strict as GitHub about a person's pending review -----------------


async def test_the_standin_keeps_pending_reviews_per_user_as_github_does(github, tmp_path):
    import time

    import aiohttp

    from tests.world import build_world

    world = build_world(github, tmp_path, permissions={"alice": "write", "bob": "write"})
    installation = "ghs_" + "i" * 36
    github.tokens[installation] = (world.repo.installation_id, time.time() + 600)
    alice, bob = github.user_token_for("alice"), github.user_token_for("bob")
    reviews = f"{github.api_url}/repos/{world.full_name}/pulls/{world.pr.number}/reviews"
    line = {"path": "calc.py", "line": 2, "side": "RIGHT", "body": "**F1 · major** · x"}

    async def call(token, method, url, body=None):
        headers = {"Authorization": f"token {token}"}
        async with (
            aiohttp.ClientSession() as http,
            http.request(method, url, json=body, headers=headers) as response,
        ):
            return response.status, await response.json()

    async def graphql(token, query, **variables):
        return (await call(token, "POST", github.graphql_url, {"query": query, **variables}))[1]

    status, mine = await call(alice, "POST", reviews, {"body": "", "comments": [line]})
    assert status == 200 and mine["state"] == "PENDING" and mine["user"]["login"] == "alice"
    status, again = await call(alice, "POST", reviews, {"body": "", "comments": []})
    assert status == 422 and "one pending review" in again["errors"][0]
    assert (await call(bob, "POST", reviews, {"body": "", "comments": []}))[0] == 200
    for token, login in ((alice, "alice"), (bob, "bob"), (installation, None)):
        _, listed = await call(token, "GET", reviews)
        assert [r["user"]["login"] for r in listed] == ([login] if login else [])
    assert (await call(bob, "GET", f"{reviews}/{mine['id']}"))[0] == 404
    assert (await call(installation, "DELETE", f"{reviews}/{mine['id']}"))[0] == 404

    add = (
        "mutation($input: AddPullRequestReviewThreadInput!) {"
        " addPullRequestReviewThread(input: $input) { thread { id path line } } }"
    )
    thread = {"pullRequestReviewId": mine["node_id"], "path": "calc.py", "body": "b"}
    added = await graphql(alice, add, variables={"input": {**thread, "line": 2}})
    assert added["data"]["addPullRequestReviewThread"]["thread"]["line"] == 2
    refused = await graphql(bob, add, variables={"input": {**thread, "line": 2}})
    assert refused["errors"][0]["type"] == "NOT_FOUND"  # not bob's review
    off = await graphql(alice, add, variables={"input": {**thread, "line": 99}})
    assert "must be part of the diff" in off["errors"][0]["message"]
    read = (
        "query($id: ID!) { node(id: $id) { ... on PullRequestReview {"
        " state comments(first: 10) { nodes { body } } } } }"
    )
    seen = await graphql(alice, read, variables={"id": mine["node_id"]})
    assert len(seen["data"]["node"]["comments"]["nodes"]) == 2
    hidden = await graphql(installation, read, variables={"id": mine["node_id"]})
    assert hidden["data"]["node"] is None  # a pending review is its author's alone
    assert github.violations == []


async def test_vet_on_github_enterprise_server_goes_under_api_v3(
    tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    import dataclasses

    from bot.config import Secret
    from bot.server import make_app
    from bot.standin.github import GitHubStandin
    from bot.standin.openapi import OpenAPIValidator
    from handlers import router
    from tests import deliveries
    from tests.conftest import WEBHOOK_SECRET
    from tests.world import NOTHING_FOLDED, build_world

    ghes = GitHubStandin(
        validator=OpenAPIValidator.from_file(deliveries.OPENAPI),
        graphql_schema=deliveries.GRAPHQL_SCHEMA,
    )
    await ghes.start(enterprise=True)
    try:
        settings = dataclasses.replace(
            ghes.settings(tmp_path / "data", WEBHOOK_SECRET),
            client_id=ghes.oauth.client_id,
            client_secret=Secret(ghes.oauth.client_secret),
            public_url="http://cockpit.test",
        )
        world = build_world(ghes, tmp_path, permissions={"alice": "write"}, files=NOTHING_FOLDED)
        world.client = await aiohttp_client(make_app(settings, router))
        world.settings = settings
        await world.send("pull_request", world.pull_request_payload("opened"))
        await world.wait_review("draft")
        await signed_in(world, "alice")
        await vet_comment(world)
        [theirs] = pending_of(world, "alice")
        assert sorted(n for n in comments_of(world, theirs) if n) == [1, 2]
        await world.send("pull_request_review", submitted(world, theirs["id"]))
        await world.wait_idle()
        assert "Published by @alice in their review**: F1, F2" in world.status_body()
        assert all(r["url_path"].startswith(("/api/v3/", "/api/graphql", "/login/oauth/"))
                   for r in ghes.requests)  # fmt: skip
        assert ghes.violations == []
    finally:
        await ghes.stop()


async def test_a_vetter_who_cancelled_and_submitted_another_review_publishes_nothing_of_ours(
    world,
):
    await signed_in(world, "alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    world.github.reviews.pop(theirs["id"])  # "Cancel review" in Files changed …
    pull = world.github.pulls[(world.full_name, world.pr.number)]
    world.github.reviews[4444] = {  # … then a review of her own
        "id": 4444,
        "repo": world.full_name,
        "number": world.pr.number,
        "state": "PENDING",
        "body": "Needs tests.",
        "commit_id": pull.head_sha,
        "comments": [],
        "html_url": "",
        "user": "alice",
    }
    await world.send("pull_request_review", submitted(world, 4444))
    await world.wait_idle()
    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"]) == ("draft", None)
    assert {f.state for f in (await findings_by_number(world)).values()} == {"kept"}


async def test_approve_still_publishes_a_vetted_draft_as_the_bot(world):
    await signed_in(world, "alice")
    await vet_comment(world)
    [theirs] = pending_of(world, "alice")
    await vet_comment(world, "/cockpit approve", user="octocat", comment_id=9003)
    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"]) == ("posted", "octocat")
    [published] = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert world.github.review_author(published) == world.github.bot_login
    assert pending_of(world, "alice") == [theirs]  # hers stays hers
    await world.send("pull_request_review", submitted(world, theirs["id"]))
    await world.wait_idle()
    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"]) == ("posted", "octocat")  # unchanged
