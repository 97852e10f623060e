"""A real `.github/cockpit.toml` committed on the default branch of a repository the GitHub
stand-in serves (git over smart HTTP, the contents API reading that branch), driving reviews
through the real server, and `/cockpit config` answering what applies."""

from __future__ import annotations

import dataclasses

import cmarkgfm
import pytest

from bot.repo_config import KEYS
from bot.server import make_app
from bot.standin.repo import git, make_pr
from handlers import router
from tests.conftest import wait_for
from tests.world import BASE, HEAD, INSTALLATION, NAME, OWNER, World, comment_payload

pytestmark = pytest.mark.backends

MAIN_CONFIG = """\
#:schema ./cockpit.schema.json
# The team's rules for PR Cockpit.
ignore = ["docs/**", "!docs/api/**"]
max_files = 5
colour = "blue"
max_diff_bytes = 0

[[review.paths]]
glob = "calc.py"
instructions = "Parsing must never evaluate input."
"""
PR_CONFIG = 'auto_review = false\nignore = ["**"]\n'  # what the PR proposes: not applied


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin):
    pr = make_pr(
        tmp_path / "origin",
        base={
            **BASE,
            ".github/cockpit.toml": MAIN_CONFIG,
            "docs/guide.md": "# Guide\n",
            "docs/api/users.md": "# Users\n",
        },
        head={
            **HEAD,
            ".github/cockpit.toml": PR_CONFIG,
            "docs/guide.md": "# Guide\nmore\n",
            "docs/api/users.md": "# Users\nmore\n",
        },
    )
    repo = github.add_generated_pr(
        OWNER, NAME, pr, installation_id=INSTALLATION, permissions={"octocat": "admin"}
    )
    url = github.serve_git(repo, pr.path / ".git", private=False)
    world = World(github, dataclasses.replace(pr, clone_url=url), repo)
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    return world


def replies(world: World) -> list[str]:
    return [
        c["body"]
        for c in world.github.issue_comments.values()
        if "<!-- pr-cockpit:status -->" not in c["body"]
    ]


async def test_the_default_branch_file_drives_the_review_and_the_pr_cannot_change_it(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["verdict"] == "request_changes"  # reviewed although the PR says auto_review off
    status = world.status_body()
    # the default branch's globs, gitignore-style: docs/** is left out, docs/api/** re-included
    assert "`docs/guide.md` — matches an `ignore` glob" in status
    assert "docs/api/users.md" not in status.split("not reviewed", 1)[-1]
    prompt = world.model.normalise(world.model.requests[0]).user_texts[0]
    assert "- calc.py" in prompt and "- docs/api/users.md" in prompt  # `**` from the PR: unused
    # its bad keys are reported, the rest applied (max_files = 5 and the globs)
    assert "unknown key `colour` (ignored)" in status
    assert "`max_diff_bytes` must be at least 1 (the default applies)" in status
    assert "The rest of the file applies" in status and "`/cockpit config` shows" in status
    row = await world.ctx.db.fetchone("SELECT config_error FROM reviews")
    assert "colour" in row["config_error"]
    reads = world.github.calls("GET", r"/contents/\.github/cockpit\.toml$")
    assert reads and all("ref" not in r["query"] for r in reads)  # the default branch


async def test_config_replies_with_each_value_and_where_it_came_from(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    blob = git(world.pr.path, "rev-parse", "main:.github/cockpit.toml").strip()
    await world.send("issue_comment", comment_payload(world, "/cockpit config", comment_id=501))
    await wait_for(lambda: replies(world))
    [answer] = replies(world)
    assert f"on the default branch (`main`), blob `{blob[:12]}`" in answer
    assert '| `ignore` | `["docs/**", "!docs/api/**"]` | `.github/cockpit.toml` |' in answer
    assert "| `max_files` | `5` | `.github/cockpit.toml` |" in answer
    assert "| `max_diff_bytes` | `400000` | default |" in answer  # its value was refused
    assert "| `verify` | `false` | default |" in answer
    assert '| `provider` | `"claude"` (the server\'s `COCKPIT_PROVIDER`) | server |' in answer
    assert "| `auto_review` | `true` | default |" in answer  # not the PR's `false`
    assert '| `paths` | `[{glob = "calc.py", instructions = …}]` |' in answer
    assert "- unknown key `colour` (ignored)" in answer
    html = cmarkgfm.github_flavored_markdown_to_html(answer)
    assert html.count("<tr>") == len(KEYS) + 1  # one table: a header and a row per key
    assert "`max_diff_bytes` must be at least 1" in answer
    await wait_for(lambda: "rocket" in [r["content"] for r in world.github.reactions])

    # a maintainer fixes the file on the default branch: the next answer follows it
    (world.pr.path / ".github" / "cockpit.toml").write_text("max_files = 7\n")
    git(world.pr.path, "commit", "-qam", "cockpit: fewer keys")
    fixed = git(world.pr.path, "rev-parse", "main:.github/cockpit.toml").strip()
    await world.send("issue_comment", comment_payload(world, "/cockpit config", comment_id=502))
    await wait_for(lambda: len(replies(world)) == 2)
    again = replies(world)[1]
    assert f"blob `{fixed[:12]}`" in again and "| `max_files` | `7` |" in again
    assert "| `ignore` | `[]` | default |" in again and "⚠️" not in again


async def test_config_without_a_file_says_every_value_is_a_default(world):
    git(world.pr.path, "rm", "-q", ".github/cockpit.toml")
    git(world.pr.path, "commit", "-qm", "no config")
    await world.send("issue_comment", comment_payload(world, "/cockpit config"))
    await wait_for(lambda: replies(world))
    [answer] = replies(world)
    assert "There is no `.github/cockpit.toml` on the default branch (`main`)" in answer
    assert "`.github/cockpit.toml` |" not in answer  # no value came from a file
