"""`cockpit eval golden-from-reviews`: what people published becomes labels, what they dropped
becomes known false positives, and the file replays through `cockpit eval run`."""

from __future__ import annotations

import io
import json

import pytest

from bot.cli import build_parser
from bot.config import Settings
from bot.evals.commands import _golden_from_reviews
from bot.evals.golden import load_golden
from bot.evals.report import results_json
from bot.evals.runner import EvalOptions, Progress, run_eval
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
        Progress(),
    )
    [entry] = results_json(replay)["runs"]
    assert (entry["strict"]["tp"], entry["strict"]["fp"], entry["strict"]["fn"]) == (1, 1, 0)
    assert entry["cases"][0]["known_fp"] == 1
    assert load_golden(out_file).cases[0].known_false_positives[0].path == "calc.py"


async def test_a_repository_without_published_reviews_gives_an_empty_file(tmp_path, monkeypatch):
    monkeypatch.setenv("COCKPIT_DATA_DIR", str(tmp_path / "data"))
    out_file = tmp_path / "none.json"
    args = build_parser().parse_args(
        ["eval", "golden-from-reviews", "--repo", "octo/none", "--out", str(out_file)]
    )
    assert await _golden_from_reviews(args, io.StringIO()) == 0
    assert json.loads(out_file.read_text())["cases"] == []
    bad = build_parser().parse_args(["eval", "golden-from-reviews", "--repo", "not a repo"])
    assert await _golden_from_reviews(bad, io.StringIO()) == 2
