"""End to end: a PR event becomes a draft on GitHub — pending review, check run, status
comment — through the real server, the GitHub stand-in and the Anthropic stand-in."""

from __future__ import annotations

import sqlite3

import pytest

from bot.server import make_app
from bot.standin.models import fail
from bot.standin.repo import git
from handlers import router
from tests import deliveries
from tests.conftest import wait_for
from tests.models import Scripted
from tests.world import build_world, settle

pytestmark = pytest.mark.backends


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin):
    world = build_world(github, tmp_path)
    world.client = await aiohttp_client(make_app(settings, router))
    world.model = anthropic_standin
    return world


async def test_opened_pr_gets_pending_review_check_run_and_status(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["head_sha"] == world.pr.head_sha and review["verdict"] == "request_changes"

    [pending] = world.pending_reviews()
    assert pending["commit_id"] == world.pr.head_sha
    post = world.github.calls("POST", r"/pulls/1/reviews$")[-1]["body"]
    assert "event" not in post
    by_title = {c["body"].split("\n")[0]: c for c in pending["comments"]}
    eval_comment = next(c for t, c in by_title.items() if "eval()" in t)
    assert (eval_comment["path"], eval_comment["line"], eval_comment["side"]) == (
        "calc.py",
        2,
        "RIGHT",
    )

    [check] = world.github.check_runs.values()
    assert check["name"] == "PR Cockpit" and check["head_sha"] == world.pr.head_sha
    assert (check["status"], check["conclusion"]) == ("completed", "neutral")
    assert {a["start_line"] for a in check["annotations"]} == {2}  # not the folded nit (F2)
    assert world.github.calls("POST", r"/check-runs$")[0]["body"]["status"] == "in_progress"

    status = world.status_body()
    assert "<!-- pr-cockpit:status -->" in status and "Draft ready" in status
    assert "| F1 | critical |" in status and "| F2 | nit |" in status
    minor = status[status.index("<details><summary>1 minor finding(s)") :]
    assert "| F2 | nit |" in minor and 'min_severity = "minor"' in minor
    assert "/cockpit approve" in status
    assert world.github.violations == []


async def test_pr_text_cannot_mention_or_instruct(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    prompt = world.model.normalise(world.model.requests[0]).user_texts[0]
    assert "<pr_description>" in prompt and "untrusted" in prompt
    for text in [
        world.status_body(),
        *[c["body"] for c in world.pending_reviews()[0]["comments"]],
        world.pending_reviews()[0]["body"],
    ]:
        assert "@octo" not in text


async def test_synchronize_supersedes_a_running_review(world):
    world.model.gate.clear()  # the model is slow: the first review is still running
    await world.send("pull_request", world.pull_request_payload("opened"))
    await wait_for(lambda: world.model.requests)  # running, its check run made: the model thinks
    new_head = world.push({"calc.py": "def parse(text):\n    return eval(text)\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=new_head))
    first = await world.wait_review("superseded", index=0)
    world.model.gate.set()
    second = await world.wait_review("draft", index=1)
    assert (first["head_sha"], second["head_sha"]) == (world.pr.head_sha, new_head)
    [pending] = world.pending_reviews()
    assert pending["commit_id"] == new_head
    conclusions = {c["head_sha"]: c.get("conclusion") for c in world.github.check_runs.values()}
    assert conclusions == {world.pr.head_sha: "cancelled", new_head: "neutral"}


async def test_closed_cancels_the_running_review_and_removes_its_worktree(world):
    world.model.gate.clear()
    await world.send("pull_request", world.pull_request_payload("opened"))
    await wait_for(lambda: world.model.requests)  # worktree ready, the model is thinking
    assert len(list(world.ctx.mirrors.trees.iterdir())) == 1
    await world.send("pull_request", world.pull_request_payload("closed"))
    await world.wait_review("cancelled")
    world.model.gate.set()
    await world.wait_idle()
    assert world.pending_reviews() == []
    [check] = world.github.check_runs.values()
    assert check["conclusion"] == "cancelled"
    assert list(world.ctx.mirrors.trees.iterdir()) == []


async def test_same_head_is_not_reviewed_twice(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    await world.send("pull_request", world.pull_request_payload("ready_for_review"))
    await world.wait_idle()
    assert len(await world.review_rows()) == 1


async def test_push_after_draft_marks_it_stale(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = false\n"
    world.ctx.github._etags.clear()
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_idle()
    assert await world.review_rows() == []  # auto review is off for this repository
    github.repos["octo/widgets"].files.pop(".github/cockpit.toml")
    await world.send("pull_request", world.pull_request_payload("reopened"))
    await world.wait_review("draft")
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = false\n"
    new_head = world.push({"calc.py": "x = 1\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=new_head))
    await world.wait_idle()
    assert (await world.review_rows())[0]["stale"] == 1
    assert "Stale draft" in world.status_body()
    [check] = world.github.check_runs.values()
    assert check["output"]["title"].startswith("Stale draft")


async def test_422_moves_inline_comments_to_the_body(world):
    world.github.fail_next(
        "POST",
        r"/pulls/1/reviews$",
        422,
        body={"message": "Unprocessable Entity", "errors": ["Line could not be resolved"]},
    )
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    [pending] = world.pending_reviews()
    assert pending["comments"] == []
    assert "Other findings" in pending["body"] and "eval() runs untrusted input" in pending["body"]


async def test_invalid_repo_config_is_reported_not_fatal(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = maybe\n"
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    assert "`.github/cockpit.toml` was not used: it is not valid TOML" in world.status_body()
    assert "The defaults apply" in world.status_body()


async def test_draft_prs_are_skipped_unless_enabled(world, github):
    await world.send("pull_request", world.pull_request_payload("opened", draft=True))
    await world.wait_idle()
    assert await world.review_rows() == []
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "review_drafts = true\n"
    world.ctx.github._etags.clear()
    await world.send("pull_request", world.pull_request_payload("reopened", draft=True))
    await world.wait_review("draft")


async def test_model_failure_fails_the_check_run_with_a_reason(world):
    world.model.policy = Scripted(fail(400, "invalid_request_error"))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("failed")
    assert 'rejected the request (400: "stand-in error")' in review["error"]
    [check] = world.github.check_runs.values()
    assert check["conclusion"] == "failure"
    status = world.status_body()
    assert "review of" in status and "failed" in status and "Traceback" not in status
    assert world.pending_reviews() == []


async def test_large_pr_lists_files_not_reviewed(world, github, tmp_path):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = (
        'max_files = 1\nignore = ["docs/*"]\n'
    )
    head = world.push({"README.md": "# widgets\nmore\n", "package-lock.json": "{}\n"})
    (world.pr.path / "docs").mkdir(exist_ok=True)
    head = world.push({"docs/guide.md": "hello\n"})
    await world.send("pull_request", world.pull_request_payload("opened", head_sha=head))
    await world.wait_review("draft")
    status = world.status_body()
    assert "file(s) not reviewed" in status
    assert "`README.md` — over the limit of 1 files" in status
    assert "`package-lock.json` — lock file" in status
    assert "`docs/guide.md` — matches an `ignore` glob" in status
    prompt = world.model.normalise(world.model.requests[0]).user_texts[0]
    assert "- calc.py" in prompt and "README.md (over the limit" in prompt


async def test_bot_authored_pr_starts_nothing(world):
    data = world.pull_request_payload("opened", sender="renovate[bot]", sender_type="Bot")
    await world.send("pull_request", data)
    await world.wait_idle()
    await settle()
    assert await world.review_rows() == []
    assert world.github.calls("POST") == []


async def test_uninstall_removes_the_installations_data_and_mirrors(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    mirror = world.ctx.mirrors.mirror_path(world.full_name)
    assert mirror.exists()
    assert (await world.ctx.db.fetchone("SELECT COUNT(*) FROM ledger"))[0] > 0
    data = deliveries.payload("installation.deleted")
    data["installation"]["id"] = 7
    await world.send("installation", data)
    await world.wait_idle()
    for table in ("pulls", "reviews", "findings", "ledger", "sessions", "messages"):
        assert (await world.ctx.db.fetchone(f"SELECT COUNT(*) FROM {table}"))[0] == 0, table
    assert not mirror.exists()
    assert list(world.ctx.mirrors.trees.iterdir()) == []


async def test_status_comment_is_found_on_a_later_page(world, github):
    for n in range(40):  # a busy PR: the bot's status comment is on page 2
        github.issue_comments[n + 1] = {
            "id": n + 1,
            "repo": "octo/widgets",
            "number": 1,
            "body": "lgtm",
            "user": {"login": "someone"},
        }
    github.issue_comments[99] = {
        "id": 99,
        "repo": "octo/widgets",
        "number": 1,
        "body": "<!-- pr-cockpit:status -->\nold",
        "user": {"login": "pr-cockpit[bot]", "type": "Bot"},
    }
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    assert "Draft ready" in github.issue_comments[99]["body"]
    assert len(world.github.status_comments("octo/widgets", 1)) == 1


async def test_a_draft_finished_after_a_push_is_stale(world, github):
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = true\n"
    world.model.gate.clear()
    await world.send("pull_request", world.pull_request_payload("opened"))
    await wait_for(lambda: world.model.requests)
    github.repos["octo/widgets"].files[".github/cockpit.toml"] = "auto_review = false\n"
    world.ctx.github._etags.clear()
    new_head = world.push({"calc.py": "x = 1\n"})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=new_head))
    world.model.gate.set()
    review = await world.wait_review("draft")
    assert review["head_sha"] == world.pr.head_sha and review["stale"] == 1
    assert "Stale draft" in world.status_body()


@pytest.mark.sqlite_only("plays a dead process through the SQLite queue's jobs table")
async def test_a_review_that_took_the_process_down_at_every_attempt_fails_on_the_pr(
    world, settings, aiohttp_client
):
    world.model.gate.clear()
    await world.send("pull_request", world.pull_request_payload("opened"))
    await wait_for(lambda: world.model.requests)  # reviewing: the process dies right here …
    db_path = world.ctx.settings.db_path
    await world.client.close()
    with sqlite3.connect(db_path) as conn:  # … at the job's last attempt
        conn.execute(
            "UPDATE jobs SET state = 'running', attempts = max_attempts WHERE kind = 'review'"
        )
    asked = len(world.model.requests)
    world.model.gate.set()
    world.client = await aiohttp_client(make_app(settings, router))
    review = await world.wait_review("failed")
    assert "did not finish in any of its attempts" in review["error"]
    assert "2 of 2 attempts" in review["error"]
    [check] = world.github.check_runs.values()
    assert check["conclusion"] == "failure"
    assert "failed" in world.status_body() and "2 of 2 attempts" in world.status_body()
    assert len(world.model.requests) == asked  # never paid for again


async def test_closing_a_pr_drops_its_head_ref_from_the_mirror(world):
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    mirror = world.ctx.mirrors.mirror_path(world.full_name)
    assert "refs/pull/1/head" in git(mirror, "for-each-ref", "--format=%(refname)")
    await world.send("pull_request", world.pull_request_payload("closed"))
    await world.wait_idle()
    assert "refs/pull/" not in git(mirror, "for-each-ref", "--format=%(refname)")


async def test_uninstall_takes_the_installations_figures_out_of_stats_and_metrics(world):
    """Before: its reviews' figures (each with its repository's name) and their sums stayed,
    where the SPEC says nothing of an uninstalled installation is kept."""
    from bot.records.stats import model_figures, recount_stale, totals

    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    db = world.ctx.db
    await recount_stale(db)  # as the daily maintenance does
    [counted] = await totals(db, recount=0, timeout=None)
    assert counted.reviews == 1
    assert [r["repo"] for r in await db.fetchall("SELECT repo FROM review_figures")] == [
        world.full_name
    ]
    data = deliveries.payload("installation.deleted")
    data["installation"]["id"] = 7
    await world.send("installation", data)
    await world.wait_idle()
    for table in ("review_figures", "figures_stale"):
        assert (await db.fetchone(f"SELECT COUNT(*) FROM {table}"))[0] == 0, table
    sums = await db.fetchall("SELECT reviews, findings, usd_nanos FROM figure_totals")
    assert [tuple(row) for row in sums] in ([], [(0, 0, 0)])
    assert await totals(db, recount=200, timeout=None) == []
    assert await model_figures(db) == []
