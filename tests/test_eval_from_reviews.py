"""`cockpit eval golden-from-reviews`: what people published becomes labels, what they dropped
becomes known false positives, and the file replays through `cockpit eval run`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.config import Settings
from bot.evals.commands import _golden_from_reviews
from bot.evals.golden import load_golden
from bot.evals.report import results_json
from bot.evals.results import EvalOptions, ProgressSink
from bot.evals.runner import run_eval
from bot.server import make_app
from bot.standin.scripted import MODEL
from handlers import router
from tests.world import build_world, comment_payload


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin):
    world = build_world(github, tmp_path)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    return world


@pytest.mark.backends  # the server's database, SQLite or Postgres
async def test_published_and_dropped_findings_become_a_golden_file_that_replays(
    world, settings, tmp_path, monkeypatch
):
    findings = await world.ctx.db.fetchall("SELECT ordinal, title FROM findings")
    nit = next(f["ordinal"] for f in findings if f["title"].startswith("Compare with None"))
    await world.send("issue_comment", comment_payload(world, f"/cockpit drop F{nit}"))
    await world.wait_idle()
    await world.send("issue_comment", comment_payload(world, "/cockpit approve", comment_id=9002))
    review = await world.wait_review("posted")

    monkeypatch.setenv("COCKPIT_DATA_DIR", str(settings.data_dir))
    if settings.database_url is not None:
        monkeypatch.setenv("COCKPIT_DATABASE_URL", settings.database_url.reveal())
    out_file = tmp_path / "history.json"
    args = build_parser().parse_args(
        ["eval", "golden-from-reviews", "--repo", "octo/widgets", "--out", str(out_file)]
    )
    out = io.StringIO()
    assert await _golden_from_reviews(args, out) == 0
    assert "1 case(s) from octo/widgets with 1 published finding(s)" in out.getvalue()
    assert "Review every label before you use it" in out.getvalue()

    golden = json.loads(out_file.read_text())
    assert golden["repository"] == world.pr.clone_url
    [case] = golden["cases"]
    assert (case["pr"], case["head_sha"], case["base_sha"]) == (
        1,
        world.pr.head_sha,
        world.pr.base_sha,
    )
    assert case["id"] == f"pr-1-r{review['id']}"
    assert [(label["path"], label["line"], label["title"]) for label in case["labels"]] == [
        ("calc.py", 2, "eval() runs untrusted input")
    ]
    assert [label["title"] for label in case["known_false_positives"]] == [
        "Compare with None using `is`"
    ]

    replay = await run_eval(
        Settings(data_dir=tmp_path / "eval-data", claude_model=MODEL),
        EvalOptions(goldens=(str(out_file),), provider="claude", models=(MODEL,)),
        ProgressSink(),
    )
    [entry] = results_json(replay)["runs"]
    assert (entry["strict"]["tp"], entry["strict"]["fp"], entry["strict"]["fn"]) == (1, 1, 0)
    assert entry["cases"][0]["known_fp"] == 1
    assert load_golden(out_file).cases[0].known_false_positives[0].path == "calc.py"


def cockpit(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m bot …` as a user runs it: from `cwd`, only the environment given."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env={**keep, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_without_a_database_it_says_what_is_missing_and_creates_nothing(tmp_path):
    """Before: an empty folder got a new database and a 0-case file, and exit 0."""
    folder = tmp_path / "empty"
    folder.mkdir()
    done = cockpit(["eval", "golden-from-reviews", "--repo", "octo/widgets"], folder)
    assert done.returncode == 2, done.stdout + done.stderr
    database = folder.resolve() / "data" / "cockpit.sqlite3"
    assert f"there is no database at {database}" in done.stderr
    assert "COCKPIT_DATA_DIR" in done.stderr and "Nothing was written" in done.stderr
    assert list(folder.iterdir()) == []
    bad = cockpit(["eval", "golden-from-reviews", "--repo", "not a repo"], folder)
    assert bad.returncode == 2 and "--repo must be OWNER/NAME" in bad.stderr


async def test_a_repository_without_published_reviews_writes_nothing(world, settings, tmp_path):
    await world.send("issue_comment", comment_payload(world, "/cockpit approve"))
    await world.wait_review("posted")
    data = str(settings.data_dir)
    done = cockpit(
        ["eval", "golden-from-reviews", "--repo", "octo/none", "--out", "none.json"],
        tmp_path,
        COCKPIT_DATA_DIR=data,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "holds no published review of octo/none (it has some of: octo/widgets)" in done.stderr
    assert not (tmp_path / "none.json").exists()


async def test_only_a_persons_drop_is_a_known_false_positive(db):
    """A finding the reviewer withdrew in a revision, or that approve left out because the
    verify pass refuted it, is not a person's verdict: neither label nor known false
    positive."""
    from bot.evals.from_reviews import golden_from_reviews
    from bot.records import review_state
    from tests.test_stats import History, finding

    h = History(db)
    pull_id = await h.pull("octo/widgets", 1, "a")
    found = [finding(1), finding(2), finding(3), finding(4, verify_status="refuted")]
    review_id = await h.draft(
        pull_id, "a", list(enumerate(found, 1)), provider="claude", model="claude-x"
    )
    assert await review_state.drop_findings(db, review_id, (2,), "intended", by="maint")
    kept = [(1, found[0]), (4, found[3])]
    assert await review_state.begin_revision(
        db, review_id, kept, [3], by="claude", texts={"summary": "s"}
    )
    assert await review_state.end_revision(db, review_id)
    await h.publish(review_id, [1])  # F4 is skipped: refuted, so not approved by default

    [case] = (await golden_from_reviews(db, "octo/widgets"))["cases"]
    assert [label["title"] for label in case["labels"]] == ["problem 1"]
    assert [label["title"] for label in case["known_false_positives"]] == ["problem 2"]
