"""Mirrors are partial clones (`--filter=blob:none`) of a private repository the GitHub
stand-in serves over HTTPS (git's smart protocol, an installation token required): what the
tools read is fetched on demand with the token in that one git process's environment, a
search fetches its blobs in one request, and a review drafts the same findings as from a
full clone while the mirror holds only the blobs it needed."""

from __future__ import annotations

import base64
import dataclasses
import json
import sqlite3
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from bot.agents.toolbox import Toolbox
from bot.standin.github import GitHubStandin
from bot.standin.openapi import OpenAPIValidator
from bot.standin.repo import git, make_pr
from bot.worktrees import Mirrors
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.tls import private_ca
from tests.world import BASE, HEAD, INSTALLATION, NAME, OWNER, World

REPO = f"{OWNER}/{NAME}"
LIBRARY = {  # files nobody changes or reads: a partial mirror never fetches them
    f"lib/part{n}/module{n}.py": f'"""Module {n}."""\n\nLIMIT_{n} = {n}\n' + "# filler\n" * 40
    for n in range(30)
}


def blobs(mirror: Path) -> set[str]:
    """The blob ids the mirror holds (never fetching: it lists, it does not read)."""
    out = subprocess.run(
        ["git", "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)"],
        cwd=mirror,
        capture_output=True,
        text=True,
        check=True,
        env={"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"},
    ).stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith(" blob")}


def blob_of(pr_path: Path, rev: str, path: str) -> str:
    return git(pr_path, "rev-parse", f"{rev}:{path}").strip()


def upload_packs(github: GitHubStandin) -> list[dict]:
    return github.calls("POST", r"\.git/git-upload-pack$")


@pytest.fixture
async def https_github(tmp_path, monkeypatch):
    """The stand-in over TLS with a CA made for the test; git trusts it (GIT_SSL_CAINFO)."""
    ca = private_ca(tmp_path / "ca")
    monkeypatch.setenv("GIT_SSL_CAINFO", str(ca.ca_file))
    standin = GitHubStandin(validator=OpenAPIValidator.from_file(deliveries.OPENAPI))
    await standin.start(ssl_context=ca.server_context())
    standin.ca = ca
    yield standin
    await standin.stop()


@pytest.fixture
def served(https_github, tmp_path):
    pr = make_pr(tmp_path / "origin", base={**BASE, **LIBRARY}, head=HEAD)
    repo = https_github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    url = https_github.serve_git(repo, pr.path / ".git", private=True)
    assert url.startswith("https://")
    return dataclasses.replace(pr, clone_url=url)


def installation_token(github: GitHubStandin) -> str:
    token = "ghs_" + "P" * 36
    github.tokens[token] = (INSTALLATION, time.time() + 3600)
    return token


async def test_tools_fetch_what_they_read_with_the_token(https_github, served, tmp_path):
    token = installation_token(https_github)
    asked = []

    async def token_source() -> str:
        asked.append(1)
        return token

    mirrors = Mirrors(tmp_path / "data")
    refs = ["refs/heads/main", "refs/pull/1/head"]
    mirror = await mirrors.sync(REPO, served.clone_url, refs, token=token)
    tree = await mirrors.add_worktree(
        REPO, name="r", head_sha=served.head_sha, base_ref="refs/heads/main", token=token_source
    )
    config = (mirror / "config").read_text()
    assert "partialclonefilter = blob:none" in config and "promisor = true" in config
    assert blobs(mirror) == set()  # commits and trees only
    tools = Toolbox(tree)

    # read_file: that one blob, in one request
    before = len(upload_packs(https_github))
    answer = await tools.call("read_file", {"path": "lib/part3/module3.py"})
    assert "LIMIT_3 = 3" in answer
    assert len(upload_packs(https_github)) == before + 1
    assert blobs(mirror) == {blob_of(served.path, served.head_sha, "lib/part3/module3.py")}

    # git_diff: both sides of the changed file, in one request
    before = len(upload_packs(https_github))
    diff = await tools.call("git_diff", {})
    assert "+    return eval(text)" in diff
    assert len(upload_packs(https_github)) == before + 1
    changed = {blob_of(served.path, rev, "calc.py") for rev in (served.base_sha, served.head_sha)}
    assert changed <= blobs(mirror)

    # search_code over the whole tree: every blob of the head, in one request
    before = len(upload_packs(https_github))
    found = await tools.call("search_code", {"pattern": "LIMIT_2[0-9] ="})
    assert len(found.splitlines()) == 10 and "lib/part27/module27.py:3:LIMIT_27 = 27" in found
    assert len(upload_packs(https_github)) == before + 1
    heads = git(served.path, "ls-tree", "-r", "--format=%(objectname)", served.head_sha).split()
    assert set(heads) <= blobs(mirror)
    again = await tools.call("search_code", {"pattern": "LIMIT_2[0-9] ="})
    assert again == found and len(upload_packs(https_github)) == before + 1  # nothing missing

    # every git request carried the installation token; none is on disk
    git_requests = https_github.calls("GET", r"\.git/") + upload_packs(https_github)
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    assert all(r["headers"].get("Authorization") == f"Basic {basic}" for r in git_requests)
    assert asked  # asked for at each call, never kept
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert token.encode() not in data and basic.encode() not in data, path


async def test_a_search_limited_to_a_folder_fetches_only_that_folder(
    https_github, served, tmp_path
):
    token = installation_token(https_github)

    async def token_source() -> str:
        return token

    mirrors = Mirrors(tmp_path / "data")
    mirror = await mirrors.sync(REPO, served.clone_url, ["refs/pull/1/head"], token=token)
    tree = await mirrors.add_worktree(
        REPO, name="r", head_sha=served.head_sha, base_ref="refs/heads/main", token=token_source
    )
    found = await Toolbox(tree).call("search_code", {"pattern": "LIMIT", "path": "lib/part4"})
    assert found == "lib/part4/module4.py:3:LIMIT_4 = 4"
    assert blobs(mirror) == {blob_of(served.path, served.head_sha, "lib/part4/module4.py")}


async def test_a_diff_leaving_files_out_fetches_only_the_files_it_shows(https_github, tmp_path):
    """`git_diff` without the left-out files (a tree built from the head's, see
    `Toolbox._shown_tree`) fetches the shown files' blobs in one request, and never the
    left-out ones'."""
    pr = make_pr(
        tmp_path / "origin",
        base={**BASE, **LIBRARY},
        head={**HEAD, "vendor/lib.py": "x = eval(y)\n", "lib/part1/module1.py": "LIMIT_1 = 2\n"},
    )
    repo = https_github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    url = https_github.serve_git(repo, pr.path / ".git", private=True)
    token = installation_token(https_github)

    async def token_source() -> str:
        return token

    mirrors = Mirrors(tmp_path / "data")
    mirror = await mirrors.sync(REPO, url, ["refs/heads/main", "refs/pull/1/head"], token=token)
    tree = await mirrors.add_worktree(
        REPO, name="r", head_sha=pr.head_sha, base_ref="refs/heads/main", token=token_source
    )
    left_out = {"vendor/lib.py": "vendored", "lib/part1/module1.py": "generated"}
    before = len(upload_packs(https_github))
    diff = await Toolbox(tree, left_out=left_out).call("git_diff", {})
    assert "+    return eval(text)" in diff and "vendor/" not in diff and "LIMIT" not in diff
    assert len(upload_packs(https_github)) == before + 1
    shown = {blob_of(pr.path, rev, "calc.py") for rev in (pr.base_sha, pr.head_sha)}
    assert blobs(mirror) == shown


async def test_without_the_token_a_private_blob_cannot_be_read(https_github, served, tmp_path):
    token = installation_token(https_github)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync(REPO, served.clone_url, ["refs/pull/1/head"], token=token)
    tree = await mirrors.add_worktree(
        REPO, name="r", head_sha=served.head_sha, base_ref="refs/heads/main"
    )
    answer = await Toolbox(tree).call("read_file", {"path": "calc.py"})
    assert answer.startswith("error: git cat-file failed")  # GitHub refused: no token sent
    assert (
        https_github.calls("GET", r"\.git/info/refs$")[-1]["headers"].get("Authorization") is None
    )


async def test_a_review_from_a_partial_mirror_drafts_the_same_findings(
    https_github, served, tmp_path, anthropic_standin
):
    """`cockpit serve` (its own process, trusting the stand-in's CA through SSL_CERT_FILE):
    a signed delivery becomes the draft a full clone gives, from a mirror that fetched the
    blobs it read on demand."""
    world = World(https_github, served, https_github.repos[REPO])
    data_dir = tmp_path / "data"
    env = {
        "GITHUB_APP_ID": https_github.app_id,
        "GITHUB_PRIVATE_KEY": https_github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": https_github.api_url,
        "GITHUB_APP_SLUG": https_github.slug,
        "ANTHROPIC_BASE_URL": anthropic_standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "SSL_CERT_FILE": str(https_github.ca.ca_file),
    }
    server = ServerProcess(env, data_dir, tmp_path / "server.log")
    await server.start()
    try:
        body = json.dumps(world.pull_request_payload("opened")).encode()
        headers = deliveries.headers("pull_request", body, WEBHOOK_SECRET, "partial-1")
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{server.url}/webhooks/github", data=body, headers=headers) as answer,
        ):
            assert answer.status == 202

        def states() -> list[tuple]:
            with sqlite3.connect(data_dir / "cockpit.sqlite3") as conn:
                return conn.execute("SELECT state, error FROM reviews").fetchall()

        def finished() -> bool:
            if any(state == "failed" for state, _ in states()):
                return True
            shown = world.github.status_comments(REPO, 1)
            return bool(shown) and "Draft ready" in shown[0]["body"] and world.pending_reviews()

        await wait_for(finished, 60)
    finally:
        server.terminate()
    assert states() == [("draft", None)], (tmp_path / "server.log").read_text()[-3000:]

    # the findings a full clone gives (tests/test_review_flow.py, the same PR from file://)
    [pending] = world.pending_reviews()
    where = sorted((c["path"], c["line"], c["body"].split("\n")[0]) for c in pending["comments"])
    assert [(p, line) for p, line, _ in where] == [("calc.py", 2)]  # the nit F2 is folded
    assert "| F1 | critical |" in world.status_body() and "| F2 | nit |" in world.status_body()

    mirror = data_dir / "mirrors" / OWNER / f"{NAME}.git"
    assert "partialclonefilter = blob:none" in (mirror / "config").read_text()
    held = blobs(mirror)
    changed = {blob_of(served.path, rev, "calc.py") for rev in (served.base_sha, served.head_sha)}
    assert changed <= held  # the diff's, and what the reviewer read
    library = {blob_of(served.path, served.base_sha, path) for path in LIBRARY}
    # the first request's files worth reading (bot/review/excerpt.py) come from a `git grep`
    # of the head: its blobs, fetched as a search_code over the whole tree fetches them
    assert library <= held
    git_requests = https_github.calls("GET", r"\.git/") + upload_packs(https_github)
    assert len(upload_packs(https_github)) >= 2  # the clone, then blobs on demand
    assert all(r["headers"].get("Authorization", "").startswith("Basic ") for r in git_requests)
