"""The `cockpit eval …` commands (parsed in bot/cli.py): options in, files and exit codes out."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.config import ConfigError, load_settings
from bot.evals.golden import GoldenError, golden_problems, write_golden
from bot.texts import OPERATOR, say

if TYPE_CHECKING:
    from bot.evals.progress import ConsoleProgress
    from bot.evals.results import EvalResult

# Each command imports what only it needs when it runs: `eval run` needs the model SDKs (a
# second or more to import), `import-martian` and `golden-from-reviews` do not.

EXIT_OK, EXIT_CASE_FAILED, EXIT_USAGE = 0, 1, 2


def _error(message: str) -> int:
    sys.stderr.write(say(OPERATOR, "eval.error", message=message) + "\n")
    return EXIT_USAGE


def cmd_eval_run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    from bot.evals.progress import ConsoleProgress, resume_hint

    progress = ConsoleProgress(out, tty=out.isatty(), runner=args.resume_with)
    try:
        return asyncio.run(eval_run(args, out, progress))
    except KeyboardInterrupt:
        resume = resume_hint(
            progress.batch or "RUN", progress.data_dir or Path("data"), runner=args.resume_with
        )
        out.write(say(OPERATOR, "eval.interrupted", resume=resume) + "\n")
        return 130


async def eval_run(args: argparse.Namespace, out: TextIO, progress: ConsoleProgress) -> int:
    from bot.evals.results import EvalOptions
    from bot.evals.runner import EvalError, resolve_models, run_eval

    try:
        settings = load_settings(github=False)
    except ConfigError as exc:
        return _error(str(exc))
    progress.data_dir = settings.data_dir
    options = None
    if args.resume is None:
        if not args.golden:
            return _error(say(OPERATOR, "eval.bad_option", why="golden"))
        if args.jobs < 1:
            return _error(say(OPERATOR, "eval.bad_option", why="jobs"))
        if args.judge_model and args.judge == "lexical":
            return _error(say(OPERATOR, "eval.bad_option", why="judge_model"))
        provider = args.provider or settings.provider
        try:
            models = resolve_models(settings, provider, (args.model or "").split(","))
        except EvalError as exc:
            return _error(str(exc))
        options = EvalOptions(
            goldens=tuple(str(Path(g).resolve()) for g in args.golden),
            provider=provider,
            models=models,
            verify=args.verify,
            judge=args.judge,
            repo=str(Path(args.repo).resolve()) if args.repo else None,
            jobs=args.jobs,
            judge_model=args.judge_model,
            passes=args.passes,
        )
    try:
        result = await run_eval(settings, options, progress, resume=args.resume)
    except EvalError as exc:
        return _error(str(exc))
    return finish(result, args, out, settings.data_dir)


def finish(result: EvalResult, args: argparse.Namespace, out: TextIO, data_dir: Path) -> int:
    from bot.evals.progress import resume_hint
    from bot.evals.report import CHART_EXTRA, write_json, write_report

    resume = resume_hint(result.batch, data_dir, runner=args.resume_with)
    out.write(say(OPERATOR, "eval.summary", entries=result.figures.runs) + "\n")
    failed = sum(len(run.failed) for run in result.runs)
    if failed:
        out.write(say(OPERATOR, "eval.failed_cases", count=failed, resume=resume) + "\n")
    judge = result.judge
    if judge.unreadable:
        out.write(say(OPERATOR, "eval.unreadable", count=judge.unreadable, judge=judge.name) + "\n")
    if result.source_changed:
        out.write(say(OPERATOR, "eval.source_changed", repos=result.source_changed) + "\n")
    report, chart = write_report(result, Path(args.report_dir), resume=resume)
    if args.json:
        write_json(result, Path(args.json))
    written = say(
        OPERATOR,
        "eval.written",
        report=report,
        chart=chart,
        chart_extra=CHART_EXTRA,
        json_path=args.json,
    )
    out.write(written + "\n")
    return EXIT_OK if result.ok else EXIT_CASE_FAILED


def cmd_golden_from_reviews(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    return asyncio.run(_golden_from_reviews(args, out))


async def _golden_from_reviews(args: argparse.Namespace, out: TextIO) -> int:
    """Exit 2 when there is nothing to make it from: nothing is created then, not even a
    database."""
    import psycopg

    from bot.backend import describe, open_database, reach
    from bot.checks import PG_WAIT, database_verdict, exit_code
    from bot.evals.from_reviews import check_repo, golden_from_reviews
    from bot.records.evals import repos_with_reviews
    from bot.records.postgres import SchemaBehind
    from bot.records.vocab import ReviewState

    try:
        settings = load_settings(github=False)
        check_repo(args.repo)
    except (ConfigError, ValueError) as exc:
        return _error(str(exc))
    found = await reach(settings, PG_WAIT)
    if not found.exists:
        return _error(
            say(OPERATOR, "eval.no_database", path=settings.db_path, data_dir=settings.data_dir)
        )
    verdict = database_verdict(settings, found, "read")  # `stats`'s line for it
    if verdict.problem:
        sys.stderr.write(verdict.line() + "\n")
        return exit_code([verdict])
    try:  # the server's database, SQLite or Postgres
        db = await open_database(settings, read_only=True)
    except (SchemaBehind, OSError, psycopg.Error) as exc:
        return _error(str(exc))
    try:
        golden = await golden_from_reviews(db, args.repo)
        others = [] if golden["cases"] else await repos_with_reviews(db, ReviewState.POSTED)
    finally:
        await db.close()
    if not golden["cases"]:
        return _error(
            say(OPERATOR, "eval.no_reviews", path=describe(settings), repo=args.repo, others=others)
        )
    name = args.repo.replace("/", "-")
    path = Path(args.out or Path("eval") / "golden" / f"{name}-from-reviews.json")
    write_golden(path, golden)
    out.write(say(OPERATOR, "eval.golden_from_reviews", path=path, repo=args.repo, golden=golden))
    out.write("\n")
    return EXIT_OK


def cmd_import_martian(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    return asyncio.run(_import_martian(args, out))


async def _import_martian(args: argparse.Namespace, out: TextIO) -> int:
    """Exit 1 when --resolve could not ask GitHub about some case (the file is still written);
    2 when nothing could be converted."""
    from bot.evals.martian import martian_golden, resolve_with_github

    directory = Path(args.dir)
    resolution, api_url = None, None
    try:
        golden = martian_golden(directory)
        pending = len(golden["cases"])
        if args.resolve:
            api_url = load_settings(github=False).api_url
            resolution = await resolve_with_github(golden, api_url)
            pending = resolution.pending
    except (GoldenError, ConfigError) as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(say(OPERATOR, "eval.resolve_unreachable", error_class=type(exc).__name__))
    problems = golden_problems(golden)
    if problems:
        return _error("; ".join(problems[:10]))
    path = Path(args.out)
    write_golden(path, golden)
    files = len(list(directory.glob("*.json")))
    said = say(
        OPERATOR,
        "eval.martian",
        path=path,
        golden=golden,
        files=files,
        pending=pending,
        resolution=resolution,
    )
    out.write(said + "\n")
    if resolution is not None and resolution.failed:
        said = say(OPERATOR, "eval.unresolved", resolution=resolution, api_url=api_url)
        sys.stderr.write(said + "\n")
        return EXIT_CASE_FAILED
    return EXIT_OK
