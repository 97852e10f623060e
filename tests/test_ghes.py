"""GitHub Enterprise Server: GITHUB_API_URL=https://HOST/api/v3, GraphQL at /api/graphql.

The GitHub stand-in serves as GHES does (REST only under /api/v3, GraphQL at /api/graphql,
git at <host>/<owner>/<repo>.git, pagination links as <host>/api/v3/repositories/{id}/…), and
the deliveries are GHES's published example payloads, their absolute URLs moved onto the
stand-in's host: every one of them is a live URL there, so only the client's refusal keeps
the bot from calling one. The whole flow runs through the real server app.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from unittest.mock import ANY

import aiohttp
import gidgethub
import pytest

from bot.github import AbsoluteURLError, GitHubApp, graphql_url
from bot.server import make_app
from bot.standin.github import GitHubStandin
from bot.standin.openapi import OpenAPIValidator
from bot.standin.repo import make_pr
from bot.worktrees import GitError, Mirrors
from handlers import router
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.gitserver import TokenGitServer
from tests.serverproc import ServerProcess
from tests.tls import private_ca
from tests.world import BASE, HEAD, INSTALLATION, NAME, OWNER, World

NUMBER = 2  # the PR number of the published GHES examples

# The query that finds a review comment's thread, and the mutation that resolves a thread.
FIND_THREAD = """
query ($owner: String!, $name: String!, $number: Int!, $cursor: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $cursor) {
        pageInfo { hasNextPage endCursor }
        nodes { id isResolved comments(first: 1) { nodes { databaseId } } }
      }
    }
  }
}
"""
RESOLVE_THREAD = """
mutation ($thread: ID!) {
  resolveReviewThread(input: {threadId: $thread}) { thread { id isResolved } }
}
"""


@pytest.mark.parametrize(
    ("api_url", "graphql"),
    [
        ("https://api.github.com", "https://api.github.com/graphql"),
        ("https://api.github.com/", "https://api.github.com/graphql"),
        ("https://github.example.com/api/v3", "https://github.example.com/api/graphql"),
        ("https://github.example.com/api/v3/", "https://github.example.com/api/graphql"),
        ("https://github.example.com:8443/api/v3", "https://github.example.com:8443/api/graphql"),
        ("https://example.com/github/api/v3", "https://example.com/github/api/graphql"),
        ("https://api.acme.ghe.com", "https://api.acme.ghe.com/graphql"),  # GHE.com
        ("http://127.0.0.1:9000", "http://127.0.0.1:9000/graphql"),
        ("http://127.0.0.1:9000/api/v3", "http://127.0.0.1:9000/api/graphql"),
    ],
)
def test_graphql_endpoint_follows_the_rest_base(api_url: str, graphql: str) -> None:
    assert graphql_url(api_url) == graphql


# -- the stand-in as GHES, and a world on it --------------------------------------------------


@pytest.fixture
async def ghes():
    standin = GitHubStandin(
        validator=OpenAPIValidator.from_file(deliveries.OPENAPI),
        graphql_schema=deliveries.GRAPHQL_SCHEMA,
    )
    await standin.start(enterprise=True)
    yield standin
    await standin.stop()


@pytest.fixture
def ghes_settings(ghes: GitHubStandin, tmp_path):
    found = ghes.settings(tmp_path / "data", WEBHOOK_SECRET)
    assert found.api_url == f"{ghes.url}/api/v3"
    return found


@pytest.fixture
async def world(ghes, ghes_settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    pr = make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=NUMBER)
    repo = ghes.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    ghes.serve_git(repo, pr.path / ".git", private=False)
    world = World(ghes, pr, repo)
    world.client = await aiohttp_client(make_app(ghes_settings, router))
    world.anthropic, world.openai = anthropic_standin, openai_standin
    return world


def pr_event(world: World, action: str = "opened") -> dict:
    data = deliveries.ghes_payload(
        "pull_request.opened", host=world.github.url, full_name=world.full_name, number=NUMBER
    )
    data["action"] = action
    retarget(world, data)
    assert data["repository"]["clone_url"] == f"{world.github.url}/{OWNER}/{NAME}.git"
    pr = data["pull_request"]
    pr["head"]["sha"] = world.pr.head_sha
    pr["base"]["ref"], pr["base"]["sha"] = world.pr.base_ref, world.pr.base_sha
    pr["user"] = data["sender"] = {"login": "octocat", "id": 3, "type": "User"}
    return data


def retarget(world: World, data: dict) -> None:
    """The payload's repository is the world's (its URLs were moved already)."""
    clone_url = data["repository"]["clone_url"]
    deliveries.retarget(
        data, owner=OWNER, name=NAME, clone_url=clone_url, installation_id=INSTALLATION
    )
    data["repository"]["id"] = world.repo.id


COMMENT_IDS = iter(range(50_000, 60_000))


def comment_event(world: World, body: str) -> dict:
    data = deliveries.ghes_payload(
        "issue_comment.created", host=world.github.url, full_name=world.full_name, number=NUMBER
    )
    retarget(world, data)
    api = f"{world.github.api_url}/repos/{world.full_name}"
    web = f"{world.github.url}/{world.full_name}"
    data["issue"]["number"] = NUMBER
    data["issue"]["pull_request"] = {  # the published example is on a plain issue
        "url": f"{api}/pulls/{NUMBER}",
        "html_url": f"{web}/pull/{NUMBER}",
        "diff_url": f"{web}/pull/{NUMBER}.diff",
        "patch_url": f"{web}/pull/{NUMBER}.patch",
    }
    data["comment"]["id"] = next(COMMENT_IDS)
    data["comment"]["body"] = body
    data["comment"]["user"] = data["sender"] = {"login": "octocat", "id": 3, "type": "User"}
    return data


def review_thread_event(world: World, body: str, comment_id: int) -> dict:
    data = deliveries.ghes_payload(
        "pull_request_review_comment.created",
        host=world.github.url,
        full_name=world.full_name,
        number=NUMBER,
    )
    retarget(world, data)
    data["comment"]["id"] = comment_id
    data["comment"]["body"] = body
    data["comment"]["user"] = data["sender"] = {"login": "octocat", "id": 3, "type": "User"}
    return data


def payload_urls(data) -> set[str]:
    """Every absolute URL in a payload (templates like `{/number}` included)."""
    if isinstance(data, dict):
        return set().union(*(payload_urls(v) for v in data.values()))
    if isinstance(data, list):
        return set().union(*(payload_urls(v) for v in data)) if data else set()
    return {data} if isinstance(data, str) and "://" in data else set()


def drafted(world: World) -> bool:
    comments = world.github.status_comments(world.full_name, NUMBER)
    return len(comments) == 1 and "Draft ready" in comments[0]["body"]


def published_reviews(world: World) -> list[dict]:
    return [r for r in world.github.reviews.values() if r["state"] != "PENDING"]


# -- the whole flow ---------------------------------------------------------------------------


async def test_a_pr_on_enterprise_server_is_drafted_and_approved_once(world):
    opened = pr_event(world)
    await world.send("pull_request", opened)
    review = await world.wait_review("draft")
    assert review["head_sha"] == world.pr.head_sha

    [pending] = world.pending_reviews()
    assert pending["commit_id"] == world.pr.head_sha and pending["comments"]
    [check] = world.github.check_runs.values()
    assert (check["name"], check["conclusion"]) == ("PR Cockpit", "neutral")
    assert "Draft ready" in world.status_body()
    # git fetched the payload's clone URL on the GHES host, and nothing else
    assert world.github.calls("GET", rf"^/{OWNER}/{NAME}\.git/info/refs$")
    mirror = world.ctx.mirrors.mirror_path(world.full_name)
    assert f"url = {opened['repository']['clone_url']}" in (mirror / "config").read_text()
    # every API call went to /api/v3, each an operation of GitHub's REST description
    rest = [r for r in world.github.requests if ".git/" not in r["url_path"]]
    assert rest and all(r["url_path"].startswith("/api/v3/") for r in rest)
    assert world.github.violations == []
    row = await world.ctx.db.fetchone("SELECT clone_url, html_url FROM pulls")
    assert row["clone_url"] == opened["repository"]["clone_url"]
    assert row["html_url"] == f"{world.github.url}/{OWNER}/{NAME}/pull/{NUMBER}"

    approve = comment_event(world, "/cockpit approve")
    await world.send("issue_comment", approve, delivery_id="approve-1")
    await world.wait_review("posted")
    await world.send("issue_comment", approve, delivery_id="approve-1")  # redelivered
    await world.send("issue_comment", comment_event(world, "/cockpit approve"))  # again
    await world.wait_idle()
    assert len(world.github.calls("POST", r"/reviews/\d+/events$")) == 1
    [published] = published_reviews(world)
    assert published["state"] == "CHANGES_REQUESTED" and published["comments"]
    [row] = await world.review_rows()
    assert (row["state"], row["posted_by"]) == ("posted", "octocat")
    assert world.github.violations == []
    urls = payload_urls(opened) | payload_urls(approve)  # GHES-shaped, live on the stand-in
    assert f"{world.github.api_url}/repos/{OWNER}/{NAME}/pulls/{NUMBER}" in urls
    assert f"{world.github.api_url}/repos/{OWNER}/{NAME}/issues/{NUMBER}/comments" in urls


async def test_codex_review_runs_on_enterprise_server(world):
    await world.send("pull_request", pr_event(world))
    await world.wait_review("draft")
    await world.send("issue_comment", comment_event(world, "/cockpit codex-review"))
    await world.wait_idle()
    answers = [
        c["body"]
        for c in world.github.issue_comments.values()
        if c["body"].startswith("<!-- pr-cockpit:session")
    ]
    assert len(answers) == 1 and "Codex" in answers[0]
    assert f"{world.github.url}/{OWNER}/{NAME}/pull/{NUMBER}#issuecomment-" in answers[0]
    [link] = await world.ctx.db.fetchall("SELECT * FROM session_reviews")
    assert link["child_adapter"] == "codex"
    assert world.openai.requests and world.github.violations == []


async def test_a_review_thread_command_and_closing_the_pr_on_enterprise_server(world):
    await world.send("pull_request", pr_event(world))
    await world.wait_review("draft")
    thread = review_thread_event(world, "/cockpit status", 7001)
    assert thread["comment"]["pull_request_url"] == (
        f"{world.github.api_url}/repos/{OWNER}/{NAME}/pulls/{NUMBER}"
    )
    await world.send("pull_request_review_comment", thread)
    await world.wait_idle()
    kinds = [(r["kind"], r["content"]) for r in world.github.reactions if r["comment_id"] == 7001]
    assert kinds == [("review_comment", "eyes"), ("review_comment", "rocket")]

    assert list(world.ctx.mirrors.trees.iterdir())
    closed = deliveries.ghes_payload(
        "pull_request.closed", host=world.github.url, full_name=world.full_name, number=NUMBER
    )
    retarget(world, closed)
    closed["pull_request"]["head"]["sha"] = world.pr.head_sha
    closed["sender"] = {"login": "octocat", "id": 3, "type": "User"}
    await world.send("pull_request", closed)
    await world.wait_idle()
    assert list(world.ctx.mirrors.trees.iterdir()) == []
    assert world.github.violations == []


async def test_later_pages_are_followed_through_githubs_repository_id_links(world):
    ghes = world.github
    for n in range(45):  # a busy PR: the bot's status comment and its old draft on page 2
        ghes.issue_comments[n + 1] = {
            "id": n + 1,
            "repo": world.full_name,
            "number": NUMBER,
            "body": "lgtm",
            "user": {"login": "someone", "type": "User"},
        }
        ghes.reviews[n + 1] = {
            "id": n + 1,
            "repo": world.full_name,
            "number": NUMBER,
            "state": "COMMENTED",
            "body": "lgtm",
            "commit_id": world.pr.base_sha,
            "comments": [],
            "html_url": "",
            "user": "someone",
        }
    ghes.issue_comments[99] = {
        "id": 99,
        "repo": world.full_name,
        "number": NUMBER,
        "body": "<!-- pr-cockpit:status -->\nold",
        "user": {"login": ghes.bot_login, "type": "Bot"},
    }
    ghes.reviews[98] = {  # the bot's pending review from before: GitHub allows only one
        "id": 98,
        "repo": world.full_name,
        "number": NUMBER,
        "state": "PENDING",
        "body": "old draft",
        "commit_id": world.pr.base_sha,
        "comments": [],
        "html_url": "",
    }
    await world.send("pull_request", pr_event(world))
    await world.wait_review("draft")
    assert "Draft ready" in ghes.issue_comments[99]["body"]
    assert len(ghes.status_comments(world.full_name, NUMBER)) == 1
    assert 98 not in ghes.reviews and len(world.pending_reviews()) == 1
    by_id = rf"^/api/v3/repositories/{world.repo.id}/"
    for listing in (r"issues/\d+/comments$", r"pulls/\d+/reviews$"):
        followed = [r for r in ghes.requests if re.search(by_id + listing, r["url_path"])]
        assert followed and all(r["query"]["page"] == "2" for r in followed), listing
    assert ghes.violations == []


# -- the client: payload URLs, pagination links, GraphQL --------------------------------------


@pytest.fixture
async def app(ghes, ghes_settings):
    ghes.add_repo(OWNER, NAME, clone_url="unused", installation_id=INSTALLATION)
    async with aiohttp.ClientSession() as session:
        yield GitHubApp(ghes_settings, session)


async def test_jwt_token_etag_and_retries_work_under_api_v3(ghes, ghes_settings):
    ghes.add_repo(
        OWNER, NAME, clone_url="unused", installation_id=INSTALLATION, files={"a.toml": "x = 1"}
    )
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with aiohttp.ClientSession() as session:
        app = GitHubApp(ghes_settings, session, sleep=sleep)
        gh = app.installation_api(INSTALLATION)
        url = f"/repos/{OWNER}/{NAME}/contents/a.toml"
        assert await gh.getitem(url) == await gh.getitem(url)
        ghes.fail_next("GET", rf"^/repos/{OWNER}/{NAME}$", 403, headers={"Retry-After": "3"})
        assert (await gh.getitem(f"/repos/{OWNER}/{NAME}"))["full_name"] == f"{OWNER}/{NAME}"
    assert sleeps == [3.0]
    [token] = ghes.calls("POST", r"/access_tokens$")
    assert token["url_path"] == f"/api/v3/app/installations/{INSTALLATION}/access_tokens"
    assert token["headers"]["Authorization"].lower().startswith("bearer ")  # the App JWT
    contents = ghes.calls("GET", r"/contents/")
    assert [c["url_path"] for c in contents] == [f"/api/v3{url}"] * 2
    assert contents[1]["headers"]["If-None-Match"].startswith('"')
    assert len(ghes.calls("GET", rf"^/repos/{OWNER}/{NAME}$")) == 2
    assert ghes.violations == []


async def test_payload_urls_are_refused_even_on_the_api_host(app, ghes):
    gh = app.installation_api(INSTALLATION)
    data = deliveries.ghes_payload(
        "pull_request.opened", host=ghes.url, full_name=f"{OWNER}/{NAME}", number=NUMBER
    )
    await gh.getitem("/repos/{owner}/{repo}", {"owner": OWNER, "repo": NAME})  # the base works
    before = len(ghes.requests)
    for url in (data["repository"]["url"], data["pull_request"]["comments_url"]):
        assert url.startswith(f"{ghes.url}/api/v3/repos/{OWNER}/{NAME}")
        with pytest.raises(AbsoluteURLError):
            await gh.getitem(url)
        with pytest.raises(AbsoluteURLError):
            await gh.post(url, data={"body": "x"})
    assert len(ghes.requests) == before


async def test_a_page_link_is_followed_only_when_github_gave_it(app, ghes):
    repo = ghes.repos[f"{OWNER}/{NAME}"]
    for n in range(35):
        ghes.issue_comments[n] = {
            "id": n,
            "repo": repo.full_name,
            "number": 1,
            "body": f"c{n}",
            "user": {"login": "someone"},
        }
    gh = app.installation_api(INSTALLATION)
    page_two = f"{ghes.api_url}/repositories/{repo.id}/issues/1/comments?per_page=30&page=2"
    with pytest.raises(AbsoluteURLError):  # not handed out yet
        await gh.getitem(page_two)
    bodies = [c["body"] async for c in gh.getiter(f"/repos/{repo.full_name}/issues/1/comments")]
    assert len(bodies) == 35
    assert [r["url_path"] for r in ghes.calls("GET", r"/comments$")] == [
        f"/api/v3/repos/{repo.full_name}/issues/1/comments",
        f"/api/v3/repositories/{repo.id}/issues/1/comments",
    ]


async def test_page_links_naming_the_servers_own_hostname_are_followed_on_our_base(app, ghes):
    """A GHES reached by another name (an internal address) than the hostname it is configured
    with writes that hostname into its links: the link's path is followed on GITHUB_API_URL."""
    ghes.hostname_url = "https://github.example.test"
    repo = ghes.repos[f"{OWNER}/{NAME}"]
    for n in range(35):
        ghes.issue_comments[n] = {
            "id": n,
            "repo": repo.full_name,
            "number": 1,
            "body": f"c{n}",
            "user": {"login": "someone"},
        }
    gh = app.installation_api(INSTALLATION)
    bodies = [c["body"] async for c in gh.getiter(f"/repos/{repo.full_name}/issues/1/comments")]
    assert len(bodies) == 35
    [_, second] = ghes.calls("GET", r"/comments$")
    assert second["url_path"] == f"/api/v3/repositories/{repo.id}/issues/1/comments"
    assert second["query"] == {"per_page": "30", "page": "2"}
    with pytest.raises(AbsoluteURLError):  # not handed out as a page: refused, whatever its host
        await gh.getitem(f"https://github.example.test/api/v3/repos/{repo.full_name}")


async def test_graphql_goes_to_api_graphql_with_the_installation_token(app, ghes):
    ghes.app_permissions["contents"] = "write"  # resolving a thread needs it
    repo = ghes.repos[f"{OWNER}/{NAME}"]
    pull = ghes.add_pull(repo, 5, head_sha="b" * 40, base_sha="a" * 40, diff="")
    ours = ghes.add_review_thread(pull, path="calc.py", line=2, body="F1", user=ghes.bot_login)
    theirs = ghes.add_review_thread(pull, path="calc.py", line=6, body="hm", user="octocat")
    gh = app.installation_api(INSTALLATION)
    assert gh.graphql_url == f"{ghes.url}/api/graphql"

    found = await gh.graphql(FIND_THREAD, owner=OWNER, name=NAME, number=5, cursor=None)
    threads = found["repository"]["pullRequest"]["reviewThreads"]
    assert threads["pageInfo"] == {"hasNextPage": False, "endCursor": "cursor:2"}
    by_comment = {t["comments"]["nodes"][0]["databaseId"]: t for t in threads["nodes"]}
    assert set(by_comment) == {ours["id"], theirs["id"]}
    assert not any(t["isResolved"] for t in threads["nodes"])

    thread_id = by_comment[ours["id"]]["id"]
    resolved = await gh.graphql(RESOLVE_THREAD, thread=thread_id)
    assert resolved == {"resolveReviewThread": {"thread": {"id": thread_id, "isResolved": True}}}
    again = await gh.graphql(FIND_THREAD, owner=OWNER, name=NAME, number=5, cursor=None)
    states = {
        t["id"]: t["isResolved"]
        for t in again["repository"]["pullRequest"]["reviewThreads"]["nodes"]
    }
    assert states == {thread_id: True, by_comment[theirs["id"]]["id"]: False}

    [call, *_] = ghes.calls("POST", r"^/api/graphql$")
    assert call["headers"]["Authorization"].split(" ", 1)[1] in ghes.tokens
    assert call["body"]["variables"] == {"owner": OWNER, "name": NAME, "number": 5, "cursor": None}
    assert not ghes.calls(path_regex=r"^/graphql$")


@pytest.mark.parametrize(
    ("query", "variables", "expected"),
    [
        (
            'query { repository(owner: "octo", name: "widgets") { nope } }',
            {},
            {
                "message": "Field 'nope' doesn't exist on type 'Repository'",
                "extensions": {
                    "code": "undefinedField",
                    "typeName": "Repository",
                    "fieldName": "nope",
                },
            },
        ),
        (
            'query { repository(owner: "octo", name: "widgets", fast: true) { name } }',
            {},
            {
                "message": "Field 'repository' doesn't accept argument 'fast'",
                "extensions": {
                    "code": "argumentNotAccepted",
                    "name": "repository",
                    "typeName": "Field",
                    "argumentName": "fast",
                },
            },
        ),
        (
            'query { repository(owner: "octo") { name } }',
            {},
            {
                "message": "Field 'repository' is missing required arguments: name",
                "extensions": {
                    "code": "missingRequiredArguments",
                    "className": "Field",
                    "name": "repository",
                    "arguments": "name",
                },
            },
        ),
        (
            'mutation { resolveReviewThread(input: {threadId: "x"}) { thread } }',
            {},
            {
                "message": "Field must have selections (field 'thread' returns "
                "PullRequestReviewThread but has no selections. Did you mean 'thread { ... }'?)",
                "extensions": {"code": "selectionMismatch", "nodeName": "field 'thread'"},
            },
        ),
        (
            RESOLVE_THREAD,
            {},  # $thread not given
            {
                "message": "Variable $thread of type ID! was provided invalid value",
                "extensions": {
                    "problems": [
                        {
                            "path": [],
                            "explanation": "Expected a value of non-null type 'ID!' to be"
                            " provided.",
                        }
                    ]
                },
            },
        ),
    ],
)
async def test_graphql_refuses_what_githubs_schema_lacks(app, query, variables, expected):
    gh = app.installation_api(INSTALLATION)
    with pytest.raises(gidgethub.QueryError) as caught:
        await gh.graphql(query, **variables)
    answer = caught.value.response
    assert "data" not in answer
    [error] = answer["errors"]
    assert {k: error[k] for k in expected} == expected
    assert error["locations"][0]["line"] in (1, 2)


async def test_graphql_not_found_and_paging_limits_are_githubs(app, ghes):
    gh = app.installation_api(INSTALLATION)
    with pytest.raises(gidgethub.QueryError) as caught:
        await gh.graphql(RESOLVE_THREAD, thread="PRRT_nothing")
    answer = caught.value.response
    assert answer["data"] == {"resolveReviewThread": None}
    [error] = answer["errors"]
    assert error["type"] == "NOT_FOUND" and error["path"] == ["resolveReviewThread"]
    assert error["message"] == "Could not resolve to a node with the global id of 'PRRT_nothing'"

    ghes.add_pull(ghes.repos[f"{OWNER}/{NAME}"], 5, head_sha="b" * 40, base_sha="a" * 40, diff="")
    unbounded = FIND_THREAD.replace("first: 100, after: $cursor", "after: $cursor")
    with pytest.raises(gidgethub.QueryError) as caught:
        await gh.graphql(unbounded, owner=OWNER, name=NAME, number=5, cursor=None)
    [error] = caught.value.response["errors"]
    assert error["type"] == "MISSING_PAGINATION_BOUNDARIES"
    too_many = FIND_THREAD.replace("first: 100", "first: 101")
    with pytest.raises(gidgethub.QueryError) as caught:
        await gh.graphql(too_many, owner=OWNER, name=NAME, number=5, cursor=None)
    [error] = caught.value.response["errors"]
    assert error["type"] == "EXCESSIVE_PAGINATION" and "limit of 100" in error["message"]

    with pytest.raises(gidgethub.QueryError) as caught:
        await gh.graphql(FIND_THREAD, owner=OWNER, name="other", number=5, cursor=None)
    [error] = caught.value.response["errors"]
    assert error["type"] == "NOT_FOUND" and "octo/other" in error["message"]


async def test_graphql_without_a_token_is_refused(ghes, ghes_settings):
    async with aiohttp.ClientSession() as session:
        gh = gidgethub.aiohttp.GitHubAPI(session, "test", base_url=ghes.api_url)
        with pytest.raises(gidgethub.GraphQLAuthorizationFailure):
            await gh.graphql("query { viewer { login } }", endpoint=graphql_url(ghes.api_url))
    assert ghes.calls("POST", r"^/api/graphql$")


# -- a self-signed certificate: SSL_CERT_FILE ---------------------------------------------------


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "GIT_SSL_CAINFO"])
async def test_git_trusts_the_private_ca_the_environment_names(
    tmp_path, monkeypatch, variable: str
) -> None:
    for name in ("SSL_CERT_FILE", "GIT_SSL_CAINFO"):  # whatever this machine trusts
        monkeypatch.delenv(name, raising=False)
    pr = make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=NUMBER)
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(pr.path), str(served / "w.git")], check=True
    )
    subprocess.run(["git", "update-server-info"], cwd=served / "w.git", check=True)
    ca = private_ca(tmp_path / "ca")
    token = "ghs_" + "T" * 36
    server = TokenGitServer(served, token)
    await server.start(ssl_context=ca.server_context())
    try:
        url = f"{server.url}/w.git"
        assert url.startswith("https://")
        mirrors = Mirrors(tmp_path / "data")
        with pytest.raises(
            GitError, match=r"certificate verification failed"
        ):  # no CA named: refused
            await mirrors.sync("octo/first", url, ["refs/heads/main"], token=token)
        monkeypatch.setenv(variable, str(ca.ca_file))
        await mirrors.sync("octo/widgets", url, [f"refs/pull/{NUMBER}/head"], token=token)
    finally:
        await server.stop()
    assert server.authorised > 0


async def test_a_self_signed_enterprise_server_end_to_end(tmp_path, anthropic_standin) -> None:
    """`cockpit serve` with SSL_CERT_FILE naming the CA of a GHES whose certificate it signed:
    the API over TLS under /api/v3, git over TLS with the installation token, a draft."""
    ca = private_ca(tmp_path / "ca")
    ghes = GitHubStandin(validator=OpenAPIValidator.from_file(deliveries.OPENAPI))
    await ghes.start(enterprise=True, ssl_context=ca.server_context())
    try:
        pr = make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=NUMBER)
        repo = ghes.add_generated_pr(
            OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
        )
        ghes.serve_git(repo, pr.path / ".git", private=True)
        world = World(ghes, pr, repo)
        env = {
            "GITHUB_APP_ID": ghes.app_id,
            "GITHUB_PRIVATE_KEY": ghes.private_key_pem,
            "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GITHUB_API_URL": ghes.api_url,
            "GITHUB_APP_SLUG": ghes.slug,
            "ANTHROPIC_BASE_URL": anthropic_standin.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
            "SSL_CERT_FILE": str(ca.ca_file),
        }
        assert env["GITHUB_API_URL"].startswith("https://127.0.0.1:")
        data_dir = tmp_path / "data"
        server = ServerProcess(env, data_dir, tmp_path / "server.log")
        await server.start()
        try:
            body = json.dumps(pr_event(world)).encode()
            headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET, "tls-1")
            async with (
                aiohttp.ClientSession() as session,
                session.post(f"{server.url}/webhooks/github", data=body, headers=headers) as answer,
            ):
                assert answer.status == 202

            def states():
                with sqlite3.connect(data_dir / "cockpit.sqlite3") as conn:
                    return conn.execute("SELECT state, error FROM reviews").fetchall()

            def finished() -> bool:
                failed = states() == [("failed", ANY)]
                return failed or (states() == [("draft", None)] and drafted(world))

            await wait_for(finished, 60)
        finally:
            server.terminate()
        assert states() == [("draft", None)], (tmp_path / "server.log").read_text()[-3000:]
        assert len(world.pending_reviews()) == 1
        git_reads = ghes.calls("GET", rf"^/{OWNER}/{NAME}\.git/")
        assert git_reads and all(r["headers"].get("Authorization") for r in git_reads)
        assert ghes.violations == []
    finally:
        await ghes.stop()
