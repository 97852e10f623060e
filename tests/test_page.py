"""The cockpit page (#31): its queries narrowed to what a viewer may see (both backends), the
pages rendered with hostile PR and model text (escaped, no script), the session cookie and
CSRF, access by the person's own user token (two people, one repository each sees or not),
and the drop / approve forms going through the slash commands' own functions and permission
checks, rows read back from the database."""

from __future__ import annotations

import dataclasses
import re
import time
from html.parser import HTMLParser

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from bot.auth.oauth import GitHubUser, TokenPair
from bot.auth.session import COOKIE, start_session
from bot.backend import open_database
from bot.config import Secret
from bot.records import pages
from bot.records.reviews import load_findings
from bot.records.stats import recount_stale
from bot.records.types import Finding, Pull, Review
from bot.server import make_app
from bot.texts import render
from bot.web.charts import line_chart
from bot.web.views import CSP
from handlers import router
from tests.test_stats import History, finding
from tests.world import NOTHING_FOLDED, build_world

pytestmark = pytest.mark.backends

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>"\'&{{7*7}}'


class Tags(HTMLParser):
    """Every start tag and attribute a browser would build from the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def assert_inert(page: str) -> None:
    """No script, no event handler attribute, no javascript: URL, from any text."""
    tags = parsed(page)
    assert not [t for t, _ in tags.tags if t in ("script", "iframe", "object", "embed", "img")]
    for _, attrs in tags.tags:
        assert not [a for a in attrs if a.lower().startswith("on")]
        assert not any(str(v or "").lower().startswith("javascript:") for v in attrs.values())


# -- the queries --------------------------------------------------------------------------------


async def seed(db) -> dict[str, int]:
    """Two repositories with a draft each (one with a hostile title), runs with costs."""
    h = History(db)
    found = {}
    for repo, number, head in (("octo/widgets", 1, "a"), ("octo/secret", 2, "b")):
        pull = await h.pull(repo, number, head)
        numbered = [(1, finding(1)), (2, finding(2, verify_status="confirmed"))]
        found[repo] = await h.draft(
            pull, head, numbered, provider="claude", model="claude-x", usd=[0.25, 0.5]
        )
    await db.execute(
        "UPDATE pulls SET title = ?, state = 'open' WHERE repo = ?", (HOSTILE, "octo/widgets")
    )
    return found


async def test_the_inbox_runs_and_figures_show_only_the_viewers_repositories(db):
    await seed(db)
    drafts, total = await pages.inbox_drafts(db, {"octo/widgets"})
    assert [(d.repo, d.number, d.major, d.confirmed) for d in drafts] == [("octo/widgets", 1, 2, 1)]
    assert total == 1
    everyone, total = await pages.inbox_drafts(db, None)
    assert total == 2 and [d.repo for d in everyone] == ["octo/secret", "octo/widgets"]
    assert (await pages.inbox_drafts(db, frozenset()))[1] == 0  # sees nothing: nothing
    paged, total = await pages.inbox_drafts(db, None, offset=1, limit=1)
    assert total == 2 and [d.repo for d in paged] == ["octo/widgets"]

    runs, total = await pages.run_list(db, {"octo/widgets"})
    assert total == 2 and {r.repo for r in runs} == {"octo/widgets"}
    runs, total = await pages.run_list(db, None, limit=1000)
    assert total == 4 and len(runs) == 4  # limit capped at PAGE_LIMIT, not more rows
    assert (await pages.run_list(db, {"octo/gone"}))[1] == 0

    await recount_stale(db)
    [model] = await pages.models_of(db, {"octo/widgets"})
    assert (model.reviews, model.findings, model.usd) == (1, 2, pytest.approx(0.75))
    [week] = await pages.weekly(db, {"octo/secret"})
    assert (week.reviews, week.findings) == (1, 2)
    assert await pages.weekly(db, frozenset()) == []

    page = await pages.draft_page(db, "octo/widgets", 1)
    assert page is not None and page.pull.title == HOSTILE
    assert [f.ordinal for f in page.findings] == [1, 2]
    assert len(page.runs) == 2 and len(page.ledger) == 2
    assert await pages.draft_page(db, "octo/widgets", 9) is None


# -- rendering ----------------------------------------------------------------------------------


class _Viewer:
    login, operator, csrf, repos = "alice", False, "c" * 64, None


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=1, max_size=80) | st.sampled_from([HOSTILE, "</pre><script>x"]))
def test_every_pr_and_model_text_is_escaped(text):
    draft = pages.InboxDraft(
        1,
        "o/r",
        1,
        text,
        "https://github.test/o/r/pull/1",
        "a" * 40,
        "draft",
        False,
        time.time(),
        text,  # the vetter's login: GitHub's word, shown escaped like any other
        1,
        0,
        0,
        0,
        0,
        0,
        0,
    )
    failed = pages.FailedReview(2, "o/r", 2, None, text, time.time())
    page = render(
        "web/inbox.html.j2",
        viewer=_Viewer(),
        drafts=[draft],
        held=[draft],
        prefix="/cockpit",
        total=1,
        offset=0,
        limit=25,
        failed=[failed],
        sessions=[],
        now=time.time(),
        age=lambda t: "now",
        link=lambda url: url,
    )
    assert_inert(page)
    tags = parsed(page)

    def lines(found: str) -> str:
        return found.replace("\r\n", "\n").replace("\r", "\n")

    assert lines(text) in lines("".join(tags.text))  # shown as written
    chart = line_chart(text, [text, text], {text: [1.0, None]})
    assert_inert(str(chart))


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(min_size=1, max_size=60) | st.sampled_from([HOSTILE, "javascript:alert(1)"]))
def test_a_drafts_page_escapes_every_model_and_pr_text(text):
    pull = Pull(
        1, 7, "o/r", 1, "a" * 40, "main", None, text, text, text, text, "open", False, None, 3
    )
    finding = Finding(
        1,
        1,
        1,
        text,
        3,
        None,
        "RIGHT",
        "major",
        text,
        text,
        text,
        True,
        "confirmed",
        text,
        "kept",
        None,
        text,
        text,
        text,
    )
    review = Review.from_row(
        {
            **{f.name: None for f in dataclasses.fields(Review)},
            **{"id": 1, "pull_id": 1, "head_sha": "a" * 40, "state": "draft", "stale": 0},
            **{"created_at": 0.0, "updated_at": 0.0, "revision": 1, "summary": text},
            **{"not_reviewed": "[]", "rules": None, "ledger": None, "suppressed": 0},
            "revision_note": None,
        }
    )
    run = pages.RunLine(1, "review", None, "claude", text, "done", 1, None, 0.0, None, 1, 1, 1)
    line = pages.SessionLine(1, "child", "codex", text, 0, "assistant", {})
    page = pages.DraftPage(
        pull, review, [finding], [pages.LedgerLine(1, "a" * 40, "draft", finding)], [line], [run]
    )
    html = render(
        "web/draft.html.j2",
        viewer=_Viewer(),
        repo="o/r",
        page=page,
        messages=[(line, text)],
        can_decide=True,
        notice=text,
        open_draft=True,
        kept="kept",
        age=lambda t: "now",
        money=lambda v: "n/a",
        link=lambda url: url if url and url.startswith("https://") else None,
    )
    assert_inert(html)
    shown = "".join(parsed(html).text).replace("\r", "\n")
    assert text.replace("\r\n", "\n").replace("\r", "\n") in shown


def test_the_session_cookie_is_httponly_lax_expires_and_secure_behind_https(settings):
    for public, secure in (("http://127.0.0.1:8080", False), ("https://cockpit.example", True)):
        response = web.Response()
        csrf = start_session(
            response, dataclasses.replace(settings, public_url=public), 7001, "alice"
        )
        morsel = response.cookies[COOKIE]
        assert morsel["httponly"] is True and morsel["samesite"] == "Lax"
        assert bool(morsel["secure"]) is secure and int(morsel["max-age"]) == 7 * 86400
        assert morsel["path"] == "/" and len(csrf) == 64
        assert "alice" not in morsel.value  # sealed, not readable


# -- through the server -----------------------------------------------------------------------

PEOPLE = {"octocat": "admin", "alice": "admin", "reader": "read"}


def session_cookie(settings, login: str, user_id: int) -> str:
    response = web.Response()
    start_session(response, settings, user_id, login)
    return response.cookies[COOKIE].value


@pytest.fixture
async def page_world(github, settings, tmp_path, aiohttp_client, anthropic_standin):
    world = build_world(github, tmp_path, permissions=PEOPLE, files=NOTHING_FOLDED)
    settings = dataclasses.replace(
        settings,
        operators=frozenset({"carol"}),
        client_id=github.oauth.client_id,
        client_secret=Secret(github.oauth.client_secret),
        public_url="http://127.0.0.1:9",
    )
    world.client = await aiohttp_client(make_app(settings, router))
    world.settings = settings
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    # A repository of another installation, which only bob can see.
    secret = History(world.ctx.db)
    pull = await secret.pull("octo/secret", 2, "b")
    await secret.draft(pull, "b", [(1, finding(1))], provider="claude", model="claude-x", usd=[0.1])
    await world.ctx.db.execute("UPDATE pulls SET title = ? WHERE repo = 'octo/widgets'", (HOSTILE,))
    secret = github.add_repo(
        "octo", "secret", clone_url="https://example.test/x.git", installation_id=9
    )
    # Its PR as a delivery would have stored it: with GitHub's id of the repository.
    await world.ctx.db.execute(
        "UPDATE pulls SET repo_id = ? WHERE repo = 'octo/secret'", (secret.id,)
    )
    github.user_access.grant("alice", "octo/widgets")
    github.user_access.grant("reader", "octo/widgets")
    github.user_access.grant("bob", "octo/widgets", "octo/secret")
    return world


async def signed_in(world, login: str) -> dict[str, str]:
    """`login` as after "Sign in with GitHub": their token stored, the page's cookie."""
    ctx = world.ctx
    user_id = world.github.oauth.user_id(login)
    token = world.github.user_token_for(login)
    pair = TokenPair(token, time.time() + 8 * 3600, None, None)
    await ctx.user_tokens.store(GitHubUser(user_id, login), pair)
    return {COOKIE: session_cookie(world.settings, login, user_id)}


async def get(world, path: str, cookies: dict | None = None) -> tuple[int, str, dict]:
    async with world.client.get(path, cookies=cookies or {}, allow_redirects=False) as response:
        return response.status, await response.text(), dict(response.headers)


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)


async def test_two_people_each_see_only_what_their_token_reaches(page_world, github):
    world = page_world
    status, page, headers = await get(world, "/")
    assert status == 401 and 'href="/auth/github/login"' in page
    assert headers["Content-Security-Policy"] == CSP and "script-src" not in CSP

    alice = await signed_in(world, "alice")
    status, page, headers = await get(world, "/", alice)
    assert status == 200, page
    assert headers["Content-Security-Policy"] == CSP
    assert "octo/widgets#1" in page and "octo/secret" not in page
    assert "&lt;script&gt;" in page
    assert_inert(page)
    status, page, _ = await get(world, "/r/octo/secret/pull/2", alice)
    assert status == 404 and "HOSTILE" not in page
    status, page, _ = await get(world, "/stats", alice)
    assert status == 200 and "<svg" in page and "octo/secret" not in page
    assert "Eval runs" not in page  # operators only
    asked = world.github.requests
    lists = [r for r in asked if r["path"].startswith("/user/installations")]
    await get(world, "/", alice)
    assert len([r for r in asked if r["path"].startswith("/user/installations")]) == len(lists)

    bob = await signed_in(world, "bob")
    status, page, _ = await get(world, "/", bob)
    assert status == 200 and "octo/widgets#1" in page and "octo/secret#2" in page
    status, page, _ = await get(world, "/r/octo/secret/pull/2", bob)
    assert status == 200 and "F1" in page

    # A revoked sign-in sees nothing, even with its repositories cached.
    await world.ctx.user_tokens.forget(github.oauth.user_id("alice"))
    status, page, _ = await get(world, "/", alice)
    assert status == 401 and "octo/widgets" not in page

    forged = {COOKIE: alice[COOKIE][:-4] + "AAAA"}
    assert (await get(world, "/", forged))[0] == 401


async def test_drop_from_the_page_goes_through_the_command_and_its_checks(page_world):
    world = page_world
    db = world.ctx.db
    review = (await world.review_rows())[0]
    alice = await signed_in(world, "alice")
    status, page, _ = await get(world, "/r/octo/widgets/pull/1", alice)
    assert status == 200 and 'id="drop-1"' in page and 'id="approve"' in page
    assert_inert(page)
    token = csrf_of(page)
    path = "/r/octo/widgets/pull/1/drop"

    # No CSRF token, or another session's: refused, nothing changed.
    form = {"finding": "1", "reason": "a fixture"}
    async with world.client.post(path, data=form, cookies=alice) as response:
        assert response.status == 403
    bob = await signed_in(world, "bob")
    async with world.client.post(path, data={**form, "csrf": token}, cookies=bob) as response:
        assert response.status == 403
    # Someone with read access only sees no forms, and a forged POST is refused by the
    # command's own permission check.
    reader = await signed_in(world, "reader")
    status, page, _ = await get(world, "/r/octo/widgets/pull/1", reader)
    assert status == 200 and 'id="drop-1"' not in page and 'id="approve"' not in page
    data = {**form, "csrf": csrf_of(page)}
    async with world.client.post(path, data=data, cookies=reader) as response:
        assert response.status == 409
    assert next(f.state for f in await load_findings(db, review["id"])) == "kept"

    data = {**form, "csrf": token}
    async with world.client.post(path, data=data, cookies=alice, allow_redirects=False) as resp:
        assert resp.status == 303
        assert resp.headers["Location"] == "/r/octo/widgets/pull/1?done=drop"
    [first, *_] = await load_findings(db, review["id"])
    assert (first.state, first.dropped_by, first.why) == ("dropped", "alice", "a fixture")
    status, page, _ = await get(world, "/r/octo/widgets/pull/1?done=drop", alice)
    assert 'id="drop-1"' not in page and 'id="notice"' in page

    # Approve: what `/cockpit approve` publishes, as the person who clicked.
    approve = "/r/octo/widgets/pull/1/approve"
    data = {"csrf": csrf_of(page)}
    async with world.client.post(approve, data=data, cookies=alice, allow_redirects=False) as r:
        assert r.status == 303
    [row] = [r for r in await world.review_rows() if r["id"] == review["id"]]
    assert (row["state"], row["posted_by"]) == ("posted", "alice")
    submitted = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert len(submitted) == 1 and "F1" not in str(submitted[0].get("comments"))
    status, page, _ = await get(world, "/r/octo/widgets/pull/1", alice)
    assert 'id="approve"' not in page  # published: nothing left to decide


async def test_an_operator_sees_every_repository_and_the_eval_runs(page_world):
    world = page_world
    carol = await signed_in(world, "carol")
    status, page, _ = await get(world, "/stats", carol)
    assert status == 200 and "octo/secret" in page and "Eval runs" in page
    status, page, _ = await get(world, "/", carol)
    assert "octo/secret#2" in page
    assert not [r for r in world.github.requests if r["path"].startswith("/user/installations")]


# -- a real `cockpit serve` -------------------------------------------------------------------


@pytest.fixture
async def cockpit(github, tmp_path, database_url):
    from tests.test_signin import SECRET_KEY, Cockpit

    extra = {"COCKPIT_SECRET_KEY": SECRET_KEY} if database_url else {}
    running = Cockpit(github, tmp_path, database_url, COCKPIT_OPERATORS="carol", **extra)
    await running.server.start()
    db = await open_database(running.settings)
    try:
        await seed(db)
    finally:
        await db.close()
    yield running
    running.server.terminate()


async def test_sign_in_from_the_page_then_inbox_draft_figures_and_sign_out(cockpit, github):
    from tests.test_signin import access_tokens, assert_secret_nowhere, browser, follow, forms_of

    db = await open_database(cockpit.settings)
    try:  # the seeded PRs carry GitHub's ids of these repositories, as deliveries would
        for name, installation in (("widgets", 1), ("secret", 2)):
            repo = github.add_repo(
                "octo",
                name,
                clone_url=f"https://example.test/{name}.git",
                installation_id=installation,
            )
            await db.execute(
                "UPDATE pulls SET repo_id = ? WHERE repo = ?", (repo.id, repo.full_name)
            )
    finally:
        await db.close()
    github.user_access.grant("alice", "octo/widgets")
    github.web_user = "alice"
    seen = []
    async with browser() as http:
        status, page, _ = await follow(http, cockpit.url + "/")
        assert status == 401 and 'id="signin" href="/auth/github/login"' in page
        status, page, _ = await follow(http, cockpit.url + "/auth/github/login")
        assert status == 200 and "Signed in as @alice" in page, page
        for path, expected in (
            ("/", 200),
            ("/r/octo/widgets/pull/1", 200),
            ("/r/octo/secret/pull/2", 404),
            ("/stats", 200),
        ):
            async with http.get(cockpit.url + path) as response:
                page = await response.text()
                assert response.status == expected, (path, page)
                assert response.headers["Content-Security-Policy"] == CSP
                assert "octo/secret" not in page
                assert_inert(page)
                seen.append(page)
        assert "octo/widgets#1" in seen[0] and "&lt;script&gt;" in seen[0]
        assert "<svg" in seen[3] and "Eval runs" not in seen[3]
        [signout] = [f for f in forms_of(seen[0]) if f["action"] == "/auth/logout"]
        async with http.post(cockpit.url + "/auth/logout", data=signout["fields"]) as response:
            assert response.status == 200
        async with http.get(cockpit.url + "/") as response:
            assert response.status == 401
    assert_secret_nowhere(cockpit, access_tokens(github, "alice"), seen)
    lists = [r for r in github.requests if r["path"].startswith("/user/installations")]
    assert lists and all(r["headers"]["Authorization"].startswith("Bearer ghu_") for r in lists)


async def test_a_drafts_history_says_new_carried_fixed_and_who_dropped_why(db):
    from tests.test_stats import make_history

    await make_history(db)
    page = await pages.draft_page(db, "octo/widgets", 1)
    assert page is not None
    lines = {(line.head_sha[0], line.ordinal): line for line in page.ledger}
    assert lines[("a", 1)].new and lines[("a", 1)].fixed_in == "b" * 40
    assert (lines[("a", 2)].finding.dropped_by, lines[("a", 2)].finding.why) == (
        "maint",
        "a style choice",
    )
    assert lines[("b", 6)].new and lines[("b", 6)].fixed_in is None
    # The failed review of octo/gadgets is in the inbox's last 24 hours, for its viewers only.
    assert [f.repo for f in await pages.failed_reviews(db, None)] == ["octo/gadgets"]
    assert await pages.failed_reviews(db, {"octo/widgets"}) == []


async def test_unset_sign_in_and_github_down_say_so(page_world, github, settings, aiohttp_client):
    # Sign-in not set up: the page says which variables to set.
    client = await aiohttp_client(make_app(settings, router))
    async with client.get("/") as response:
        assert response.status == 503
        page = await response.text()
        assert "GITHUB_CLIENT_ID" in page and "COCKPIT_PUBLIC_URL" in page
    # GitHub cannot say what a person may see: a page that says so, nothing shown.
    alice = await signed_in(page_world, "alice")
    github.fail_next("GET", r"^/user/installations", 502)
    status, page, _ = await get(page_world, "/", alice)
    assert status == 502 and "did not answer" in page and "octo/widgets" not in page
    status, page, _ = await get(page_world, "/", alice)  # it answers again
    assert status == 200 and "octo/widgets#1" in page


async def test_vet_from_the_page_makes_the_draft_the_persons_pending_review(page_world):
    """The page's Vet is `/cockpit vet` by the person who clicked: their pending review holds
    the findings, the inbox lists it as theirs (and as someone's to the others), and a person
    without the approve permission neither sees the form nor gets anything from a forged one."""
    world = page_world
    review = (await world.review_rows())[0]
    path = "/r/octo/widgets/pull/1/vet"
    reader = await signed_in(world, "reader")
    status, page, _ = await get(world, "/r/octo/widgets/pull/1", reader)
    assert status == 200 and 'id="vet"' not in page
    async with world.client.post(path, data={"csrf": csrf_of(page)}, cookies=reader) as response:
        assert response.status == 409
    assert world.github.pending_of("octo/widgets", 1, "reader") is None

    alice = await signed_in(world, "alice")
    status, page, _ = await get(world, "/r/octo/widgets/pull/1", alice)
    assert 'id="vet"' in page
    data = {"csrf": csrf_of(page)}
    async with world.client.post(path, data=data, cookies=alice, allow_redirects=False) as r:
        assert r.status == 303 and r.headers["Location"] == "/r/octo/widgets/pull/1?done=vet"
    held = world.github.pending_of("octo/widgets", 1, "alice")
    assert held is not None and "**F1" in str(held.get("comments"))
    [row] = [r for r in await world.review_rows() if r["id"] == review["id"]]
    assert (row["state"], row["vetter"]) == ("draft", "alice")

    status, page, _ = await get(world, "/", alice)
    mine = page.split('<ul id="held">', 1)
    assert len(mine) == 2 and "octo/widgets#1" in mine[1].split("</ul>", 1)[0]
    bob = await signed_in(world, "bob")
    status, page, _ = await get(world, "/", bob)
    assert '<ul id="held">' not in page and "<td>in @alice's pending review</td>" in page
