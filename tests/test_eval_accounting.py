"""What `cockpit eval run` counts and keeps, through the command as a user runs it (from a
folder, default data directory, models behind the stand-ins): spend from the runs ledger,
judge answers read whatever surrounds them, a judge cache that follows its prompt, reports
that never overwrite each other, eval conversations pruned like the server's."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from bot.standin.models import say
from bot.standin.scripted import scripted_reviewer

ROOT = Path(__file__).resolve().parent.parent
PLANTED_DIR = ROOT / "eval" / "golden" / "planted"
GOLDEN = "golden/planted.json"  # relative to the folder the command runs in
MONTH = 31 * 86400


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    where = tmp_path / "work"
    shutil.copytree(PLANTED_DIR, where / "golden")
    return where


def env_for(standin, **extra: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "ANTHROPIC_BASE_URL": standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        **extra,
    }


async def cockpit_eval(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "eval",
        "run",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


def rows(database: Path, sql: str, args: tuple = ()) -> list[tuple]:
    with sqlite3.connect(database) as conn:
        return conn.execute(sql, args).fetchall()


def never_submits_on_pr_1(conversation):
    """The scripted reviewer, except that on PR #1 it only talks: that case fails after two
    paid answers (the first, and the one after the nudge to submit)."""
    if conversation.tools and "pull request #1 of" in conversation.user_texts[0]:
        return say("I read the change; it looks fine to me.")
    return scripted_reviewer(conversation)


async def test_a_case_that_fails_after_spending_counts_in_the_case_and_the_totals(
    folder, anthropic_standin
):
    """Before: the failed case showed 0 tokens and $0, and the totals left it out, while
    the runs ledger had its two answers."""
    anthropic_standin.policy = never_submits_on_pr_1
    code, out, err = await cockpit_eval(
        ["--golden", GOLDEN, "--json", "results.json"], env_for(anthropic_standin), folder
    )
    assert code == 1, out + err
    assert "pr-1-pagination: FAILED: the model ended without calling submit_review" in out
    [entry] = json.loads((folder / "results.json").read_text())["runs"]
    failed = next(c for c in entry["cases"] if c["id"] == "pr-1-pagination")
    database = folder / "data" / "cockpit.sqlite3"
    [(failed_tokens, failed_usd, answers)] = rows(
        database,
        "SELECT SUM(u.input_tokens + u.output_tokens + u.cache_read_tokens"
        " + u.cache_write_tokens), r.cost_usd, (SELECT COUNT(*) FROM messages m"
        " WHERE m.session_id = r.session_id AND m.role = 'assistant')"
        " FROM runs r JOIN run_usage u ON u.run_id = r.id WHERE r.status = 'failed'",
    )
    assert answers == 2 and failed_usd > 0  # it spent: two paid answers
    assert failed["error"] and failed["tokens"] == failed_tokens
    assert failed["usd"] == pytest.approx(failed_usd)
    [(ledger_tokens,)] = rows(
        database,
        "SELECT SUM(input_tokens + output_tokens + cache_read_tokens + cache_write_tokens)"
        " FROM run_usage",
    )
    [(ledger_usd, failed_runs)] = rows(
        database, "SELECT SUM(cost_usd), SUM(status = 'failed') FROM runs"
    )
    assert failed_runs == 1
    assert entry["tokens"] == ledger_tokens
    assert entry["usd"] == pytest.approx(ledger_usd)
    # Scores leave the failed case out: 6 misses in all, 1 of them on pr-1.
    assert entry["failed_cases"] == 1 and entry["strict"]["fn"] == 5
    [(status, tokens, usd)] = rows(
        database,
        "SELECT status, tokens, cost_usd FROM eval_cases WHERE case_id = 'pr-1-pagination'",
    )
    assert (status, tokens, usd) == ("failed", failed_tokens, pytest.approx(failed_usd))
    [(run_usd,)] = rows(database, "SELECT cost_usd FROM eval_runs")
    assert run_usd == pytest.approx(ledger_usd)
    sessions = dict(rows(database, "SELECT status, COUNT(*) FROM sessions GROUP BY status"))
    assert sessions == {"ended": 6, "failed": 1}  # none left active


def wordy_judge(conversation):
    """Reviews as scripted. As the judge (no tools), it thinks aloud with braces before its
    JSON verdict (a match when both point at the same path:line), and has no verdict at all
    on one label."""
    if conversation.tools:
        return scripted_reviewer(conversation)
    text = conversation.last_user_text
    golden = text.split("<golden>")[1].split("</golden>")[0]
    candidate = text.split("<candidate>")[1].split("</candidate>")[0]
    if "Freshness check is inverted" in golden:
        return say("I cannot tell from {these two texts} alone.")
    place = re.search(r"\(([^,()]+:\d+)", candidate)
    match = bool(place) and f"({place.group(1)})" in golden
    verdict = json.dumps({"reasoning": "same place", "match": match, "confidence": 0.8})
    return say(f"Comparing {{candidate}} with {{golden}}: the places decide.\n{verdict}")


async def test_judge_answers_are_read_past_prose_and_unreadable_ones_are_reported(
    folder, anthropic_standin
):
    """Before: `\\{.*\\}` took everything from the first brace to the last, so every such
    answer was "no match", and how many could not be read was never said."""
    anthropic_standin.policy = wordy_judge
    code, out, err = await cockpit_eval(
        ["--golden", GOLDEN, "--judge", "claude", "--json", "results.json"],
        env_for(anthropic_standin),
        folder,
    )
    assert code == 0, out + err
    results = json.loads((folder / "results.json").read_text())
    [entry] = results["runs"]
    assert (entry["strict"]["tp"], entry["strict"]["fp"], entry["strict"]["fn"]) == (5, 3, 6)
    assert results["judge"]["unreadable"] == 1  # pr-3's one finding against that label
    assert "1 answer(s) of the claude judge had no verdict to read" in out
    [report] = (folder / "eval" / "reports").glob("*.md")
    assert "1 answer(s) of the claude judge had no verdict to read" in report.read_text()


def judge_requests(standin) -> list[dict]:
    return [r for r in standin.requests if not r.get("tools")]


async def test_a_changed_judge_prompt_asks_again_instead_of_reusing_old_answers(
    folder, tmp_path, anthropic_standin
):
    """The cache key holds a hash of the judge's prompt. The new prompt comes the way a
    user gets one, with another build of the code (here a copy of this one, edited)."""
    anthropic_standin.policy = wordy_judge
    env = env_for(anthropic_standin)
    code, out, err = await cockpit_eval(["--golden", GOLDEN, "--judge", "claude"], env, folder)
    assert code == 0, out + err
    asked = len(judge_requests(anthropic_standin))
    assert asked == 15

    code, out, err = await cockpit_eval(["--resume", "1"], env, folder)  # re-scored: cached
    assert code == 0, out + err
    assert len(judge_requests(anthropic_standin)) == asked + 1  # only the unreadable one

    build = tmp_path / "next-build"
    for package in ("bot", "handlers", "templates"):
        shutil.copytree(
            ROOT / package, build / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    prompt = build / "templates" / "prompts" / "judge.md"
    prompt.write_text(prompt.read_text() + "\nA renamed function is the same issue.\n")
    before = len(judge_requests(anthropic_standin))
    code, out, err = await cockpit_eval(
        ["--resume", "1"], {**env, "PYTHONPATH": str(build)}, folder
    )
    assert code == 0, out + err
    again = judge_requests(anthropic_standin)[before:]
    assert len(again) == 15  # every pair asked again, under the new prompt
    assert all("A renamed function is the same issue." in r["system"][0]["text"] for r in again)


async def test_reports_of_runs_from_new_data_folders_never_overwrite_each_other(
    folder, anthropic_standin
):
    """Each new data folder numbers its runs from 1: before, both wrote eval-1.md."""
    reports = folder / "eval" / "reports"
    for data in ("data-a", "data-b"):
        env = env_for(anthropic_standin, COCKPIT_DATA_DIR=data)
        code, out, err = await cockpit_eval(["--golden", GOLDEN], env, folder)
        assert code == 0, out + err
        assert "eval run 1:" in out
    found = sorted(reports.glob("*.md"))
    assert len(found) == 2
    assert all(re.fullmatch(r"eval-\d{8}-\d{6}-run1(-\d+)?\.md", p.name) for p in found)
    charts = sorted(reports.glob("*.png"))
    assert [c.name for c in charts] == [f"{p.stem}-f1-cost.png" for p in found] or not charts


async def test_eval_conversations_are_pruned_after_30_days_and_the_ledger_stays(
    folder, anthropic_standin
):
    """Policy: a session of no PR (an eval's) and its messages go 30 days after they were
    last touched, at the start of every eval run and in the server's daily maintenance; the
    runs ledger and the eval results stay. Before: they were never pruned."""
    env = env_for(anthropic_standin)
    database = folder / "data" / "cockpit.sqlite3"
    code, out, err = await cockpit_eval(["--golden", GOLDEN], env, folder)
    assert code == 0, out + err
    old = [sid for (sid,) in rows(database, "SELECT id FROM sessions")]
    assert len(old) == 7 and rows(database, "SELECT COUNT(*) FROM messages")[0][0] > 0
    with sqlite3.connect(database) as conn:  # a month passes
        conn.execute("UPDATE sessions SET updated_at = updated_at - ?", (MONTH,))

    code, out, err = await cockpit_eval(["--golden", GOLDEN], env, folder)
    assert code == 0, out + err
    left = [sid for (sid,) in rows(database, "SELECT id FROM sessions")]
    assert len(left) == 7 and not set(left) & set(old)
    marks = ",".join("?" * len(old))
    assert rows(database, f"SELECT COUNT(*) FROM messages WHERE session_id IN ({marks})", old) == [
        (0,)
    ]
    assert rows(database, "SELECT COUNT(*) FROM runs") == [(14,)]
    assert rows(database, "SELECT COUNT(*) FROM eval_cases") == [(14,)]
    assert all(
        updated > time.time() - 3600
        for (updated,) in rows(database, "SELECT updated_at FROM sessions")
    )
