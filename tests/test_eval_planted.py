"""The shipped offline set end to end: the scripted model behind the model stand-ins, the real
SDKs, the production pipeline, and scores known in advance. The eval never writes to GitHub
or to the repository it reads."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bot.cli import build_parser
from bot.config import Settings
from bot.evals.commands import eval_run
from bot.evals.progress import ConsoleProgress, eta_text, resume_hint
from bot.evals.report import chart_spec, draw_chart, results_json, write_report
from bot.evals.results import EvalOptions, ProgressSink
from bot.evals.runner import run_eval
from bot.evals.sources import fingerprint
from bot.standin.models import DEFAULT_USAGE
from bot.standin.scripted import MODEL

ROOT = Path(__file__).resolve().parent.parent
PLANTED_DIR = ROOT / "eval" / "golden" / "planted"

# What the scripted model finds on the planted set, judged lexically: it catches the SQL
# injection, the leaked file (twice: one match, one extra), the bare except, the shell
# injection and the eval(); it misses both off-by-ones, the inverted freshness check, the
# race, the unretried failures and the 300-is-success check; it raises a `== None` nit and
# flags the test fixture's token, which the verify pass refutes.
EXPECTED_CASES = {
    "pr-1-pagination": (1, 0, 1),
    "pr-2-settings-file": (2, 1, 0),
    "pr-3-rate-cache": (0, 1, 2),
    "pr-4-pdf-export": (1, 0, 1),
    "pr-5-uploads": (1, 0, 2),
    "pr-6-cli-help": (0, 0, 0),
    "pr-7-item-tests": (0, 1, 0),
}


@pytest.fixture
def planted(tmp_path) -> Path:
    """A copy of the shipped set, so each test reads its own files."""
    target = tmp_path / "golden"
    shutil.copytree(PLANTED_DIR, target)
    return target / "planted.json"


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", claude_model=MODEL, codex_model=MODEL)


def options(planted: Path, **changes) -> EvalOptions:
    return EvalOptions(
        **{"goldens": (str(planted),), "provider": "claude", "models": (MODEL,), **changes}
    )


def test_the_generator_reproduces_the_shipped_set(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_planted_golden.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    assert (tmp_path / "planted.json").read_text() == (PLANTED_DIR / "planted.json").read_text()

    def heads(bundle: Path) -> str:
        return subprocess.run(
            ["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True
        ).stdout

    assert heads(tmp_path / "stockroom.bundle") == heads(PLANTED_DIR / "stockroom.bundle")
    golden = json.loads((PLANTED_DIR / "planted.json").read_text())
    assert len(golden["cases"]) == 7 and sum(len(c["labels"]) for c in golden["cases"]) == 11
    assert sum(1 for c in golden["cases"] if len(c["labels"]) >= 2) == 5
    assert sum(1 for c in golden["cases"] if not c["labels"]) == 2


async def test_planted_set_scores_exactly_with_and_without_verify(
    planted, settings, anthropic_standin, openai_standin, tmp_path
):
    bundle = await fingerprint(str(planted.parent / "stockroom.bundle"))
    result = await run_eval(settings, options(planted, verify=True, jobs=3), ProgressSink())
    assert result.ok and result.runs[0].verify_provider == "codex"
    assert result.source_changed == []
    assert await fingerprint(str(planted.parent / "stockroom.bundle")) == bundle
    without, with_verify = results_json(result)["runs"]

    assert (without["provider"], without["model"], without["verify"]) == ("claude", MODEL, False)
    assert without["strict"] == {
        "tp": 5,
        "fp": 3,
        "fn": 6,
        "precision": 5 / 8,
        "recall": 5 / 11,
        "f1": 10 / 19,
    }
    assert without["benchmark"] == {
        "precision": 6 / 8,
        "recall": 5 / 11,
        "f1": pytest.approx(2 * (6 / 8) * (5 / 11) / (6 / 8 + 5 / 11)),
    }
    assert {c["id"]: (c["tp"], c["fp"], c["fn"]) for c in without["cases"]} == EXPECTED_CASES

    assert with_verify["verify"] is True and with_verify["verify_provider"] == "codex"
    assert with_verify["strict"] == {
        "tp": 5,
        "fp": 2,
        "fn": 6,
        "precision": 5 / 7,
        "recall": 5 / 11,
        "f1": 10 / 18,
    }
    assert with_verify["benchmark"]["precision"] == 6 / 7
    refuted = {c["id"]: c["refuted"] for c in with_verify["cases"] if c["refuted"]}
    assert refuted == {"pr-7-item-tests": 1}

    # The database keeps the figures --json shows, of the variant the run is scored by.
    from bot.records.sqlite import SqliteDatabase

    db = await SqliteDatabase.open(settings.db_path)
    [run] = await db.fetchall("SELECT precision, recall, f1, tokens, cost_usd FROM eval_runs")
    strict = with_verify["strict"]
    assert tuple(run) == (
        strict["precision"],
        strict["recall"],
        strict["f1"],
        with_verify["tokens"],
        with_verify["usd"],
    )
    stored = await db.fetchall(
        "SELECT case_id, true_positives, false_positives, false_negatives, tokens, cost_usd"
        " FROM eval_cases ORDER BY case_id"
    )
    await db.close()
    assert [tuple(row) for row in stored] == [
        (c["id"], c["tp"], c["fp"], c["fn"], c["tokens"], c["usd"]) for c in with_verify["cases"]
    ]

    # The tokens the stand-ins reported (and the scripted model's rate is $0): 20 review
    # answers from claude (counted from each request), 16 verify answers from codex (fixed; a
    # read and a verdict in one session per finding).
    reviewed = sum(sum(usage.values()) for usage in anthropic_standin.usages)
    assert (without["tokens"], without["usd"]) == (reviewed, 0.0)
    verified = 16 * sum(DEFAULT_USAGE)
    assert (with_verify["tokens"], with_verify["usd"]) == (reviewed + verified, 0.0)
    assert with_verify["usd_per_tp"] == 0.0
    assert len(anthropic_standin.requests) == 20 and len(openai_standin.requests) == 16

    # The same prompts and tools as production: the review skill and the read-only toolbox.
    first = anthropic_standin.normalise(anthropic_standin.requests[0])
    assert first.system.startswith("You are PR Cockpit's code reviewer")
    assert {
        "read_file",
        "list_files",
        "search_code",
        "git_diff",
        "git_log",
        "submit_review",
    } == set(first.tools)

    resume = resume_hint(result.batch, tmp_path / "data", cwd=tmp_path)
    report, chart = write_report(result, tmp_path / "reports", resume=resume)
    text = report.read_text()
    assert "| claude | scripted-reviewer | no | 62.5 | 45.5 | 52.6 | 5 | 3 | 6 | 75.0 |" in text
    assert "| scripted-reviewer | codex | 52.6 → 55.6 | 62.5 → 71.4 |" in text
    assert "*(missed)* | `stockroom/items.py:21`" in text
    if importlib.util.find_spec("matplotlib") is None:
        assert chart.path is None and "pip install 'pr-cockpit[eval]'" in text
    else:
        assert chart.path is not None and chart.path.exists()


async def test_eval_results_and_runs_are_stored(planted, settings, anthropic_standin):
    result = await run_eval(settings, options(planted), ProgressSink())
    from bot.records.sqlite import SqliteDatabase

    db = await SqliteDatabase.open(settings.db_path)
    [run] = await db.fetchall("SELECT * FROM eval_runs")
    assert (run["status"], run["batch"], run["judge"], run["verify"]) == (
        "done",
        run["id"],
        "lexical",
        0,
    )
    reported = sum(sum(usage.values()) for usage in anthropic_standin.usages)
    assert run["precision"] == 5 / 8 and run["tokens"] == reported
    cases = await db.fetchall("SELECT * FROM eval_cases ORDER BY case_id")
    assert [c["case_id"] for c in cases] == sorted(EXPECTED_CASES)
    assert all(c["status"] == "done" and len(c["head_sha"]) == 40 for c in cases)
    findings = await db.fetchall("SELECT * FROM eval_findings")
    assert len(findings) == 8 and sum(f["matched_label"] is not None for f in findings) == 5
    runs = await db.fetchall("SELECT kind, subkind, status FROM runs")
    assert len(runs) == 7 and {tuple(r) for r in runs} == {("review", None, "done")}
    await db.close()
    assert result.batch == run["id"]


async def test_several_models_make_one_comparison(planted, settings, anthropic_standin):
    result = await run_eval(
        settings, options(planted, models=(MODEL, "claude-sonnet-5-5")), ProgressSink()
    )
    entries = results_json(result)["runs"]
    assert [e["model"] for e in entries] == [MODEL, "claude-sonnet-5-5"]
    assert entries[0]["strict"] == entries[1]["strict"]  # same scripted answers
    assert entries[0]["usd"] == 0.0 and entries[1]["usd"] > 0  # priced by rates.json
    assert len({e["batch"] for e in entries}) == 1


async def test_resume_runs_only_unfinished_cases_and_rescoring_costs_nothing(
    planted, settings, anthropic_standin
):
    first = await run_eval(settings, options(planted), ProgressSink())
    from bot.records.sqlite import SqliteDatabase

    db = await SqliteDatabase.open(settings.db_path)
    await db.execute(
        "UPDATE eval_cases SET status = 'failed' WHERE case_id IN (?, ?)",
        ("pr-1-pagination", "pr-6-cli-help"),
    )
    await db.close()
    before = len(anthropic_standin.requests)
    resumed = await run_eval(settings, None, ProgressSink(), resume=first.batch)
    assert len(anthropic_standin.requests) - before == 3 + 2  # those two cases again
    assert results_json(resumed)["runs"][0]["strict"] == results_json(first)["runs"][0]["strict"]

    before = len(anthropic_standin.requests)
    again = await run_eval(settings, None, ProgressSink(), resume=first.batch)
    assert len(anthropic_standin.requests) == before
    assert results_json(again)["runs"][0]["strict"]["f1"] == 10 / 19


def variant_counts(entry: dict) -> dict[str, tuple[int, int, int, int]]:
    """(findings, tp, fp, fn) by variant name."""
    return {
        name: (v["findings"], v["strict"]["tp"], v["strict"]["fp"], v["strict"]["fn"])
        for name, v in entry["variants"].items()
    }


async def test_what_approve_would_publish_is_scored_beside_every_finding(
    planted, settings, anthropic_standin, openai_standin, tmp_path
):
    """Under the planted repository's settings (the defaults: nits folded, ten inline comments)
    `published` leaves out exactly the `== None` nit, and with the verify pass also the refuted
    fixture token; the report shows both side by side, and re-scoring asks no model."""
    result = await run_eval(settings, options(planted, verify=True), ProgressSink())
    without, with_verify = results_json(result)["runs"]
    # the scripted reviewer is at least 60 % sure of each finding: min_confidence (50) folds none
    assert variant_counts(without) == {
        "everything": (8, 5, 3, 6),
        "published": (7, 5, 2, 6),
        "no-min-confidence": (7, 5, 2, 6),
    }
    assert variant_counts(with_verify) == {
        "everything": (8, 5, 3, 6),
        "published": (6, 5, 1, 6),
        "confirmed-only": (6, 5, 1, 6),  # the scripted verifier confirms every other one
        "no-min-confidence": (6, 5, 1, 6),
    }
    assert without["variants"]["published"]["strict"]["precision"] == 5 / 7
    assert with_verify["variants"]["published"]["benchmark"]["precision"] == 1.0
    assert without["variants"]["published"]["summarised"] == 0

    def differing(entry: dict) -> dict[str, tuple[int, int]]:
        found = {}
        for case in entry["cases"]:
            every, published = (case["variants"][n] for n in ("everything", "published"))
            if every != published:
                found[case["id"]] = (every["findings"], published["findings"])
        return found

    assert differing(without) == {"pr-3-rate-cache": (1, 0)}  # the nit, a false positive
    assert differing(with_verify) == {"pr-3-rate-cache": (1, 0), "pr-7-item-tests": (1, 0)}
    # the figures that were there before stay as they were
    assert (without["strict"]["fp"], with_verify["strict"]["fp"]) == (3, 2)

    resume = resume_hint(result.batch, tmp_path / "data", cwd=tmp_path)
    report, _ = write_report(result, tmp_path / "reports", resume=resume)
    text = report.read_text()
    assert "## What `approve` would publish" in text
    row = "| claude | scripted-reviewer | {} | {} | {} | 0 | {} |"
    assert row.format("no", "everything", 8, "62.5 | 45.5 | 52.6 | 5 | 3 | 6") in text
    assert row.format("no", "published", 7, "71.4 | 45.5 | 55.6 | 5 | 2 | 6") in text
    assert row.format("yes (codex)", "published", 6, "83.3 | 45.5 | 58.8 | 5 | 1 | 6") in text
    assert row.format("yes (codex)", "confirmed-only", 6, "83.3 | 45.5 | 58.8 | 5 | 1 | 6") in text

    requests = len(anthropic_standin.requests), len(openai_standin.requests)
    again = await run_eval(settings, None, ProgressSink(), resume=result.batch)
    assert (len(anthropic_standin.requests), len(openai_standin.requests)) == requests
    assert results_json(again)["runs"] == [
        {**entry, "elapsed_seconds": rescored["elapsed_seconds"]}
        for entry, rescored in zip(
            results_json(result)["runs"], results_json(again)["runs"], strict=True
        )
    ]


async def test_cases_stored_without_their_rules_are_rescored_without_the_published_variants(
    planted, settings, anthropic_standin
):
    """A batch an older version stored has no rules to decide what `approve` would publish:
    re-scoring it keeps every figure it had and adds no variant rather than guessing."""
    first = await run_eval(settings, options(planted), ProgressSink())
    from bot.records.sqlite import SqliteDatabase

    db = await SqliteDatabase.open(settings.db_path)
    await db.execute("UPDATE eval_cases SET scores = json_remove(scores, '$.rules')")
    await db.close()
    requests = len(anthropic_standin.requests)
    again = await run_eval(settings, None, ProgressSink(), resume=first.batch)
    assert len(anthropic_standin.requests) == requests
    [entry] = results_json(again)["runs"]
    assert entry["variants"] == {} and entry["strict"] == results_json(first)["runs"][0]["strict"]


async def test_a_resumed_eval_folds_by_the_confidence_the_database_kept(
    planted, settings, anthropic_standin
):
    """`--resume` re-scores from the stored findings: a confidence read back from
    `eval_findings` below the stored `min_confidence` (50) folds that finding out of
    `published`, and `no-min-confidence` keeps it."""
    first = await run_eval(settings, options(planted), ProgressSink())
    [before] = results_json(first)["runs"]
    assert before["variants"]["published"] == before["variants"]["no-min-confidence"]
    from bot.records.sqlite import SqliteDatabase

    db = await SqliteDatabase.open(settings.db_path)
    await db.execute(
        "UPDATE eval_findings SET confidence = 10 WHERE id = (SELECT min(f.id) FROM eval_findings"
        " f JOIN eval_cases c ON c.id = f.eval_case_id WHERE f.severity != 'nit')"
    )
    await db.close()
    requests = len(anthropic_standin.requests)
    again = await run_eval(settings, None, ProgressSink(), resume=first.batch)
    assert len(anthropic_standin.requests) == requests
    [entry] = results_json(again)["runs"]
    published, kept = (entry["variants"][n]["findings"] for n in ("published", "no-min-confidence"))
    assert (published, kept) == (before["variants"]["published"]["findings"] - 1, published + 1)


async def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
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
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode, out.decode()


def cli_env(tmp_path: Path, github, claude, codex) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "SYSTEMROOT")
    return {
        **{k: v for k, v in os.environ.items() if k in keep},
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        "COCKPIT_CLAUDE_MODEL": MODEL,
        "COCKPIT_CODEX_MODEL": MODEL,
        "GITHUB_API_URL": github.url,
        "ANTHROPIC_BASE_URL": claude.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "OPENAI_BASE_URL": f"{codex.url}/v1",
        "OPENAI_API_KEY": "sk-test-openai-0123456789",
    }


async def test_the_eval_command_never_writes_to_github_or_the_repository(
    planted, tmp_path, github, anthropic_standin, openai_standin
):
    """The GitHub stand-in records no request at all, and a local clone given with --repo is
    unchanged down to its files' modification times (git metadata included)."""
    clone = tmp_path / "clone"
    bundle = planted.parent / "stockroom.bundle"
    subprocess.run(["git", "clone", "-q", str(bundle), str(clone)], check=True)
    subprocess.run(
        ["git", "-C", str(clone), "fetch", "-q", str(bundle), "+refs/pull/*:refs/pull/*"],
        check=True,
    )
    before = await fingerprint(str(clone))
    env = cli_env(tmp_path, github, anthropic_standin, openai_standin)
    results = tmp_path / "results.json"
    code, out = await run_cli(
        [
            *("--golden", str(planted), "--repo", str(clone), "--verify", "--jobs", "2"),
            *("--json", str(results)),
        ],
        env,
        tmp_path,
    )
    assert code == 0, out
    assert "eval run 1: 7 case(s) \N{MULTIPLICATION SIGN} 1 model(s)" in out
    assert "[7/7]" in out
    assert github.requests == []
    assert await fingerprint(str(clone)) == before
    assert len(list((tmp_path / "eval" / "reports").glob("eval-*-run1.md"))) == 1

    data = json.loads(results.read_text())
    for entry in data["runs"]:
        assert {
            "provider",
            "model",
            "verify",
            "judge",
            "strict",
            "benchmark",
            "tokens",
            "usd",
        } <= set(entry)
        assert set(entry["strict"]) == {"tp", "fp", "fn", "precision", "recall", "f1"}
        assert set(entry["benchmark"]) == {"precision", "recall", "f1"}
        for case in entry["cases"]:
            assert {"id", "tp", "fp", "fn", "findings", "labels"} <= set(case)
    assert [e["verify"] for e in data["runs"]] == [False, True]
    assert [list(e["variants"]) for e in data["runs"]] == [
        ["everything", "published", "no-min-confidence"],
        ["everything", "published", "confirmed-only", "no-min-confidence"],
    ]


async def test_a_source_that_changes_during_the_run_fails_it(planted, settings, anthropic_standin):
    bundle = planted.parent / "stockroom.bundle"
    scripted = anthropic_standin.policy

    def meddling(conversation):
        bundle.write_bytes(bundle.read_bytes() + b"\n")  # as if a tool had written to it
        return scripted(conversation)

    anthropic_standin.policy = meddling
    result = await run_eval(settings, options(planted), ProgressSink())
    assert result.source_changed == [str(bundle)] and not result.ok


async def test_a_case_that_cannot_run_fails_the_command_with_exit_1(
    planted, tmp_path, anthropic_standin, monkeypatch
):
    golden = json.loads(planted.read_text())
    golden["cases"][0]["head_sha"] = "0" * 40
    del golden["cases"][0]["pr"]
    planted.write_text(json.dumps(golden))
    monkeypatch.setenv("COCKPIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COCKPIT_CLAUDE_MODEL", MODEL)
    args = build_parser().parse_args(
        ["eval", "run", "--golden", str(planted), "--report-dir", str(tmp_path / "reports")]
    )
    out = io.StringIO()
    code = await eval_run(args, out, ConsoleProgress(out, tty=False))
    assert code == 1
    text = out.getvalue()
    assert "pr-1-pagination: FAILED: head 0000000000000000000000000000000000000000 is not" in text
    assert "1 case(s) failed" in text


async def test_bad_options_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COCKPIT_DATA_DIR", str(tmp_path / "data"))
    out = io.StringIO()
    for argv, message in [
        (["eval", "run"], "--golden FILE is required"),
        (["eval", "run", "--golden", str(tmp_path / "none.json")], "cannot be read"),
        (["eval", "run", "--resume", "99"], "no eval run 99"),
        (["eval", "run", "--golden", "x.json", "--jobs", "0"], "--jobs must be at least 1"),
    ]:
        args = build_parser().parse_args(argv)
        assert await eval_run(args, out, ConsoleProgress(out, tty=False)) == 2
        assert message in capsys.readouterr().err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_a_terminal_gets_a_progress_bar_with_eta_and_running_cost(
    planted, settings, anthropic_standin
):
    screen = Terminal()
    await run_eval(settings, options(planted), ConsoleProgress(screen, tty=True))
    frames = screen.getvalue().split("\r\033[K")
    assert len(frames) == 1 + 7
    assert frames[-1].startswith("[████████████████████████] 7/7 · ETA 0:00 · $0.0000 · ")
    assert "ETA" in frames[1] and "1/7" in frames[1]


@pytest.mark.parametrize(
    ("elapsed", "done", "total", "expected"),
    [(10.0, 1, 7, "1:00"), (5.0, 5, 5, "0:00"), (0.0, 0, 3, "0:00"), (90.0, 3, 5, "1:00")],
)
def test_eta(elapsed, done, total, expected):
    assert eta_text(elapsed, done, total) == expected


# -- telling people how to find a run again ----------------------------------------------------


@pytest.mark.parametrize(
    ("data_dir", "cwd", "command", "temporary"),
    [
        ("/srv/cockpit/data", "/srv/cockpit", "cockpit eval run --resume 4", False),
        (
            "/srv/cockpit/data",
            "/home/me",
            "COCKPIT_DATA_DIR=/srv/cockpit/data cockpit eval run --resume 4",
            False,
        ),
        (
            "/srv/my data",
            "/srv",
            "COCKPIT_DATA_DIR='/srv/my data' cockpit eval run --resume 4",
            False,
        ),
        (
            f"{tempfile.gettempdir()}/cockpit-eval-x1",
            "/srv",
            f"COCKPIT_DATA_DIR={tempfile.gettempdir()}/cockpit-eval-x1 cockpit eval run --resume 4",
            True,
        ),
    ],
)
def test_the_resume_hint_names_the_data_directory_unless_it_is_the_default(
    data_dir, cwd, command, temporary
):
    resume = resume_hint(4, Path(data_dir), cwd=Path(cwd))
    assert (resume.command, resume.temporary) == (command, temporary)


async def test_the_printed_resume_command_finds_the_run_from_another_folder(
    planted, tmp_path, github, anthropic_standin, openai_standin
):
    """The hint is run as printed, from another folder: it finds the run (its data directory
    is where it says) and re-scores it for free."""
    env = cli_env(tmp_path, github, anthropic_standin, openai_standin)
    env["COCKPIT_DATA_DIR"] = str(tmp_path / "kept")
    (tmp_path / "work").mkdir()
    code, out = await run_cli(["--golden", str(planted)], env, tmp_path / "work")
    assert code == 0, out
    hint = re.search(r"Resume with: (COCKPIT_DATA_DIR=(\S+) cockpit eval run --resume 1)", out)
    assert hint and hint.group(2) == str(tmp_path / "kept"), out
    assert "(while" in out and "temporary folder" in out  # pytest's tmp_path is under /tmp
    [report_file] = (tmp_path / "work" / "eval" / "reports").glob("eval-*-run1.md")
    report = report_file.read_text()
    assert f"`{hint.group(1)}`" in report
    assert re.fullmatch(readme_report_name(run=1), report_file.name), report_file.name

    requests = len(anthropic_standin.requests)
    (tmp_path / "elsewhere").mkdir()
    words = shlex.split(hint.group(1))
    again = {**cli_env(tmp_path, github, anthropic_standin, openai_standin)}
    again.pop("COCKPIT_DATA_DIR")
    again.update(dict([words[0].split("=", 1)]))
    assert words[1:4] == ["cockpit", "eval", "run"]
    code, out = await run_cli(words[4:], again, tmp_path / "elsewhere")
    assert code == 0, out
    assert "eval run 1 (resumed)" in out
    assert len(anthropic_standin.requests) == requests  # found, not reviewed again


def readme_report_name(run: int) -> str:
    """The report's name as the README describes it (Evaluate, Commands), as a pattern."""
    readme = (ROOT / "README.md").read_text()
    described = re.search(r"It writes `eval/reports/([^`]+)`", readme)
    assert described, "the README names the report file"
    pattern = re.escape(described.group(1))
    for placeholder, value in (
        ("<UTC date>", r"\d{8}"),
        ("<UTC time>", r"\d{6}"),
        ("<RUN>", str(run)),
    ):
        pattern = pattern.replace(re.escape(placeholder), value)
    assert "<" not in pattern, f"an unknown placeholder in {described.group(1)}"
    return pattern


# -- the chart: the tables' scale, every point named, a sane range -------------------------------


def entry(model: str, f1: float | None, usd: float | None, tokens: int = 1000, verify=False):
    return {
        "model": model,
        "verify": verify,
        "verify_provider": "codex" if verify else None,
        "strict": {"f1": f1},
        "usd": usd,
        "tokens": tokens,
    }


@pytest.mark.parametrize(
    ("entries", "x_label", "x_range", "points"),
    [
        (  # two free runs at one spot: a readable range from $0, each point named
            [entry("scripted", 0.526, 0.0), entry("scripted", 0.556, 0.0, verify=True)],
            "cost of the run (USD): every run cost $0",
            (-0.0003, 0.01),
            [
                ("scripted: F1 52.6%, \\$0.0000", 0.0, 52.6),
                ("scripted + verify (codex): F1 55.6%, \\$0.0000", 0.0, 55.6),
            ],
        ),
        (
            [entry("sonnet", 0.4, 2.0), entry("opus", 0.5, 8.0)],
            "cost of the run (USD)",
            (-0.276, 9.2),
            [("sonnet: F1 40.0%, \\$2.0000", 2.0, 40.0), ("opus: F1 50.0%, \\$8.0000", 8.0, 50.0)],
        ),
        (  # one model without a rate: every point by tokens
            [entry("a", None, 1.0, 5000), entry("b", 0.25, None, 20000)],
            "tokens used (USD unknown for some model)",
            (-690.0, 23000.0),
            [
                ("a: F1 0.0%, 5,000 tokens", 5000.0, 0.0),
                ("b: F1 25.0%, 20,000 tokens", 20000.0, 25.0),
            ],
        ),
    ],
)  # fmt: skip
def test_the_chart_is_on_the_tables_scale_with_every_point_named(entries, x_label, x_range, points):
    spec = chart_spec(entries, 3)
    assert spec.title == "F1 against cost, eval run 3"
    assert (spec.x_label, spec.y_label, spec.y_range) == (x_label, "F1, strict (%)", (0, 100))
    assert spec.x_range == pytest.approx(x_range)
    assert [(p.name, p.x, p.y) for p in spec.points] == points
    assert len({p.name for p in spec.points}) == len(points)


def test_the_chart_is_drawn_when_matplotlib_is_installed(tmp_path):
    spec = chart_spec([entry("m", 0.5, 0.0), entry("m", 0.6, 0.0, verify=True)], 1)
    chart = draw_chart(spec, tmp_path / "chart.png")
    if importlib.util.find_spec("matplotlib") is None:
        assert chart.path is None and chart.missing == "matplotlib is not installed"
    else:
        assert chart.path.read_bytes().startswith(b"\x89PNG")


# -- import-martian converts without the model SDKs ----------------------------------------------


def test_import_martian_does_not_import_the_model_sdks(tmp_path):
    out = tmp_path / "martian.json"
    code = (
        "import sys\n"
        "from bot.cli import main\n"
        f"code = main(['eval', 'import-martian', {str(ROOT / 'tests/fixtures/martian')!r}, "
        f"'--out', {str(out)!r}])\n"
        "heavy = sorted(m for m in ('anthropic', 'openai', 'matplotlib') if m in sys.modules)\n"
        "print(code, heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert len(json.loads(out.read_text())["cases"]) == 50


async def test_two_local_models_compare_in_one_run_on_a_chat_server(
    planted, tmp_path, github, chat_standin
):
    """`--provider chat --model a,b`: both models of a local server (no hosted key at all),
    one report and one chart; the unpriced model's cost is unknown, not $0."""
    chat_standin.models = (MODEL, "local-llama")
    keep = ("PATH", "HOME", "LANG", "SYSTEMROOT")
    env = {
        **{k: v for k, v in os.environ.items() if k in keep},
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        "COCKPIT_CHAT_BASE_URL": f"{chat_standin.url}/v1",
        "COCKPIT_CHAT_MODEL": MODEL,
    }
    results = tmp_path / "results.json"
    code, out = await run_cli(
        [
            *("--golden", str(planted), "--provider", "chat", "--verify", "--jobs", "2"),
            *("--model", f"{MODEL},local-llama", "--json", str(results)),
        ],
        env,
        tmp_path,
    )
    assert code == 0, out
    assert f"(chat: {MODEL}, local-llama), verify with chat" in out
    runs = json.loads(results.read_text())["runs"]
    assert [(r["provider"], r["model"], r["verify"]) for r in runs] == [
        ("chat", MODEL, False),
        ("chat", MODEL, True),
        ("chat", "local-llama", False),
        ("chat", "local-llama", True),
    ]
    assert all(r["strict"] == runs[0]["strict"] for r in runs[::2])  # the same answers
    assert (runs[0]["strict"]["tp"], runs[0]["strict"]["fp"], runs[0]["strict"]["fn"]) == (5, 3, 6)
    assert runs[1]["strict"]["fp"] == 2  # the verify pass (on chat) refuted the fixture
    assert [r["usd"] for r in runs] == [0.0, 0.0, None, None]
    assert all(r["tokens"] > 0 for r in runs)
    [report_file] = (tmp_path / "eval" / "reports").glob("eval-*-run1.md")
    report = report_file.read_text()
    assert "| chat | scripted-reviewer | no |" in report and "| chat | local-llama | no |" in report
    assert "unknown" in report
    if importlib.util.find_spec("matplotlib") is not None:
        assert report_file.with_name(f"{report_file.stem}-f1-cost.png").exists()
    models = {r["model"] for r in chat_standin.requests}
    assert models == {MODEL, "local-llama"}


def hunch_first(conversation):
    """The scripted reviewer, adding a hunch about the file it is told first: a finding that
    depends on the order a pass reads the files in, which no verifier can confirm."""
    from bot.standin.scripted import scripted_reviewer

    action = scripted_reviewer(conversation)
    if [name for name, _ in action.tools] == ["submit_review"]:
        told = re.search(r"^Files to review \(\d+\):\n- (.*)$", conversation.user_texts[0], re.M)
        path = told.group(1)
        action.tools[0][1]["findings"].append(
            {
                "path": path,
                "line": 1,
                "side": "RIGHT",
                "severity": "major",
                "title": f"Hunch that {path} is read first",
                "body": "Nothing reproduces it.",
                "evidence": f"{path}:1",
                "confidence": 60,
            }
        )
    return action


async def test_passes_are_scored_beside_the_first_pass_and_rescored_without_a_model(
    planted, settings, anthropic_standin, openai_standin, tmp_path
):
    """`--passes 2`: each case reviewed twice in different file orders; `one-pass` scores what
    the first pass drafted, `passes` what the rule keeps (the verifier confirms no hunch, so a
    hunch one pass raised goes); `--resume` re-scores them with no model request."""
    anthropic_standin.policy = hunch_first
    result = await run_eval(settings, options(planted, passes=2), ProgressSink())
    [entry] = results_json(result)["runs"]
    counts = variant_counts(entry)
    assert list(counts) == ["everything", "published", "no-min-confidence", "one-pass", "passes"]
    published, one, kept = counts["published"], counts["one-pass"], counts["passes"]
    assert published[1] == one[1] == kept[1] == 5  # every planted catch, in both passes
    # a hunch one pass raised: the first pass's in `one-pass`, neither in `passes`
    assert one[0] > kept[0] and published[0] - kept[0] == 2 * (one[0] - kept[0])
    resume = resume_hint(result.batch, tmp_path / "data", cwd=tmp_path)
    report, _ = write_report(result, tmp_path / "reports", resume=resume)
    text = report.read_text()
    for name in ("one-pass", "passes"):
        assert f"| claude | scripted-reviewer | no | {name} | {counts[name][0]} |" in text
    assert "`one-pass` is what the first pass alone would publish" in text
    requests = len(anthropic_standin.requests), len(openai_standin.requests)
    sessions = {openai_standin.normalise(r).user_texts[0] for r in openai_standin.requests}
    assert len(sessions) == published[0] - kept[0]  # a verify session per hunch raised once
    again = await run_eval(settings, None, ProgressSink(), resume=result.batch)
    assert variant_counts(results_json(again)["runs"][0]) == counts
    assert (len(anthropic_standin.requests), len(openai_standin.requests)) == requests
