"""What a review costs in model terms, before and after a change, in one run: per review on the
shipped planted set (the scripted model, as `scripts/eval_offline.py` runs it) and on a 50-file
bench PR (a careful model: a call per file's diff, then a call per file) — model requests,
tool calls, input tokens, cache-read tokens, cache writes, USD, and the files the review read.

"Before" is another commit of this repository (default: where this branch left `main`),
exported with `git archive` into a temporary folder; "after" is this checkout. Each is
measured in a subprocess that imports that version's `bot` package, against the Anthropic
stand-in (it counts its prompt cache as the API does), with the model id priced as
claude-sonnet-5-5 so the USD column means something. Nothing leaves 127.0.0.1.

    python scripts/bench_review_figures.py [--before REV] [--files 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = "claude-sonnet-5-5"  # priced in bot/agents/rates.json; the stand-in answers as it
COLUMNS = ("requests", "tool_calls", "input", "cache_read", "cache_write", "output", "usd")
BASE = {"calc.py": "def parse(text):\n    return int(text)\n", "README.md": "# bench\n"}


def module(n: int) -> str:
    """About 2.4 kB of diff, like a handler of a real service."""
    lines = "".join(f"    value_{k} = request.get({k!r})  # {'y' * 60}\n" for k in range(28))
    return f'"""Handler {n}."""\n\n\ndef handle_{n}(request):\n{lines}    return None\n'


def bench_head(files: int) -> dict[str, str]:
    head = {"calc.py": "def parse(text):\n    return eval(text)\n", "README.md": "# bench\n"}
    for n in range(files - 1):
        head[f"services/part_{n // 10}/handler_{n:02d}.py"] = module(n)
    return head


async def _figures(db, requests: int, reviews: int) -> dict[str, float]:
    runs = await db.fetchone(
        "SELECT COUNT(*) AS n, COALESCE(SUM(tool_calls), 0) AS calls,"
        " COALESCE(SUM(cost_usd), 0) AS usd FROM runs"
    )
    usage = await db.fetchone(
        "SELECT COALESCE(SUM(input_tokens), 0) AS input, COALESCE(SUM(output_tokens), 0) AS output,"
        " COALESCE(SUM(cache_read_tokens), 0) AS cache_read,"
        " COALESCE(SUM(cache_write_tokens), 0) AS cache_write FROM run_usage"
    )
    totals = {
        "requests": requests,
        "tool_calls": runs["calls"],
        "input": usage["input"],
        "cache_read": usage["cache_read"],
        "cache_write": usage["cache_write"],
        "output": usage["output"],
        "usd": runs["usd"],
    }
    return {key: value / reviews for key, value in totals.items()}


async def measure(files: int) -> dict[str, dict[str, float | str]]:
    """In the subprocess: this version's figures."""
    import bot
    from bot.agents.base import Budget
    from bot.agents.providers import ModelClients
    from bot.config import Settings
    from bot.evals.results import EvalOptions, ProgressSink
    from bot.evals.runner import run_eval
    from bot.records.sqlite import SqliteDatabase
    from bot.repo_config import RepoConfig
    from bot.review.pipeline import Reviewer, ReviewRequest, review_worktree
    from bot.standin.models import AnthropicStandin
    from bot.standin.scripted import careful_reviewer, scripted_reviewer
    from bot.worktrees import Mirrors
    from tests.bigpr import import_pr

    work = Path(tempfile.mkdtemp(prefix="bench-figures-"))
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    os.environ["ANTHROPIC_BASE_URL"] = standin.url
    os.environ["ANTHROPIC_API_KEY"] = "sk-ant-bench-standin"
    out: dict[str, dict[str, float | str]] = {}
    try:
        planted = ROOT / "eval" / "golden" / "planted" / "planted.json"
        settings = Settings(data_dir=work / "planted", claude_model=MODEL)
        options = EvalOptions(goldens=(str(planted),), provider="claude", models=(MODEL,))
        result = await run_eval(settings, options, ProgressSink())
        cases = len(result.runs[0].cases)
        db = await SqliteDatabase.open(settings.db_path)
        out["planted set"] = await _figures(db, len(standin.requests), cases)
        await db.close()

        standin.policy = careful_reviewer
        asked = len(standin.requests)
        pr = import_pr(work / "origin", base=BASE, head=bench_head(files))
        mirrors = Mirrors(work / "bench")
        await mirrors.sync("octo/bench", pr.clone_url, ["refs/heads/main", "refs/pull/1/head"])
        tree = await mirrors.add_worktree(
            "octo/bench", name="b", head_sha=pr.head_sha, base_ref="refs/heads/main"
        )
        settings = Settings(data_dir=work / "bench", claude_model=MODEL)
        db = await SqliteDatabase.open(settings.db_path)
        models = ModelClients(settings)
        request = ReviewRequest(
            repo="octo/bench",
            number=1,
            title=f"{files} handlers",
            body="",
            base_ref="main",
            provider="claude",
            config=RepoConfig(),
            model=MODEL,
        )
        draft = await review_worktree(Reviewer(db, models, Budget()), tree, request)
        bench = await _figures(db, len(standin.requests) - asked, 1)
        bench["findings"] = len(draft.findings)
        bench["summary"] = " ".join(draft.summary.split())[:300]
        out[f"{files}-file PR"] = bench
        await models.close()
        await db.close()
        out["_bot"] = {"path": str(Path(bot.__file__).parent)}
    finally:
        await standin.stop()
    return out


def export(rev: str, into: Path) -> None:
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as archive:
        archive.extractall(into, filter="data")


def run_version(tree: Path, files: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("COCKPIT_DATA_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", "--files", str(files)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"measuring {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the commit to compare with (default: merge-base main)")
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(measure(args.files))))
        return
    before = (
        args.before
        or subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "HEAD", "main"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-before-") as folder:
        export(before, Path(folder))
        figures = {
            f"before ({before[:7]})": run_version(Path(folder), args.files),
            f"after ({head}, this checkout)": run_version(ROOT, args.files),
        }
    print(f"per review, Anthropic stand-in, {MODEL} rates ({time.monotonic() - started:.0f} s)")
    header = f"{'':34} {'version':28}" + "".join(f"{c:>12}" for c in COLUMNS)
    print(header)
    for case in ("planted set", f"{args.files}-file PR"):
        for version, measured in figures.items():
            row = measured[case]
            cells = "".join(
                f"{row[c]:>12.5f}" if c == "usd" else f"{row[c]:>12.1f}" for c in COLUMNS
            )
            print(f"{case:34} {version:28}{cells}")
    for version, measured in figures.items():
        bench = measured[f"{args.files}-file PR"]
        print(f"\n{version} (bot from {measured['_bot']['path']}):")
        print(f"  {args.files}-file PR, {bench['findings']} finding(s); summary:")
        print(f"  {bench['summary']}")


if __name__ == "__main__":
    main()
