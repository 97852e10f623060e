"""PR Cockpit: AI pull-request reviews as drafts that a person vets before they are published."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bot.config import PROVIDERS, ConfigError, Settings, check_settings, load_settings

EXIT_CONFIG = 2


def _fail(exc: ConfigError) -> int:
    print(f"cockpit: configuration error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from bot.logs import setup_logging

    try:
        settings = load_settings()
    except ConfigError as exc:
        return _fail(exc)
    if args.role != "all" and settings.database_url is None:
        return _fail(
            ConfigError(
                "COCKPIT_DATABASE_URL",
                f"--role {args.role} needs a database the other processes share: set it to"
                " a postgresql:// URL (SQLite serves one process, --role all)",
            )
        )
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    setup_logging()
    asyncio.run(_serve(settings, host, port, args.role))
    return 0


async def _serve(settings: Settings, host: str, port: int, role: str) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully (see `stop_gracefully`)."""
    import asyncio
    import signal

    from aiohttp import web

    from bot.server import make_app, stop_gracefully
    from handlers import router

    app = make_app(settings, router, role=role)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await stop_gracefully(app)
    finally:
        await runner.cleanup()


def cmd_check_config(_args: argparse.Namespace) -> int:
    problems = check_settings()
    if not problems:
        print("configuration OK")
        return 0
    for problem in problems:
        print(f"missing or invalid: {problem}")
    return EXIT_CONFIG


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.demo import run_demo

    return run_demo(keep=args.keep, critic=args.critic)


def cmd_register(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bot.register import Options, run

    return run(
        Options(
            github_url=args.github_url,
            org=args.org,
            public_url=args.public_url,
            out=Path(args.out),
            port=args.port,
            timeout=args.timeout,
            open_browser=not args.no_browser,
        )
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cockpit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the webhook server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--role",
        choices=("web", "worker", "all"),
        default="all",
        help="web: store deliveries and their jobs; worker: run jobs; all: both (default)",
    )
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate the environment, exit 0 or 2")
    check.set_defaults(func=cmd_check_config)

    demo = sub.add_parser("demo", help="the whole flow locally, no account or key needed")
    demo.add_argument("--keep", action="store_true", help="keep the demo's data folder")
    demo.add_argument(
        "--critic", choices=PROVIDERS, default="codex", help="the cross-AI critic (default codex)"
    )
    demo.set_defaults(func=cmd_demo)

    from bot.register import DEFAULT_PORT, DEFAULT_TIMEOUT, GITHUB_WEB_URL

    register = sub.add_parser("register", help="create the GitHub App (manifest flow)")
    register.add_argument("--org", help="create it for this organisation (default: your account)")
    register.add_argument("--public-url", help="where GitHub reaches the server (webhook URL)")
    register.add_argument(
        "--github-url", default=GITHUB_WEB_URL, help="GitHub Enterprise Server's web address"
    )
    register.add_argument("--out", default="cockpit.env", help="env file to write (mode 0600)")
    register.add_argument("--port", type=int, default=DEFAULT_PORT, help="the local page's port")
    register.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for the browser"
    )
    register.add_argument("--no-browser", action="store_true", help="only print the page URL")
    register.set_defaults(func=cmd_register)

    add_eval_parser(sub)

    return parser


def cmd_eval(args: argparse.Namespace) -> int:
    from bot.evals import commands

    return int(getattr(commands, args.eval_func)(args))


def add_eval_parser(sub: argparse._SubParsersAction) -> None:
    evals = sub.add_parser("eval", help="replay labelled PRs and score the reviewer")
    commands = evals.add_subparsers(dest="eval_command", required=True)

    run = commands.add_parser("run", help="review golden cases and score them")
    run.add_argument("--golden", nargs="+", metavar="FILE", help="golden file(s)")
    run.add_argument("--provider", choices=PROVIDERS, help="the reviewer (default: the env's)")
    run.add_argument("--model", help="model id(s), comma-separated, compared in one run")
    run.add_argument("--verify", action="store_true", help="also run the verify pass")
    run.add_argument("--judge", choices=("lexical", *PROVIDERS), default="lexical")
    run.add_argument("--judge-model", metavar="M", help="the LLM judge's model id")
    run.add_argument("--repo", metavar="PATH", help="a local clone to use as the repository")
    run.add_argument("--jobs", type=int, default=1, metavar="N", help="cases at a time")
    run.add_argument("--resume", type=int, metavar="RUN", help="finish (or re-score) a run")
    run.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    run.add_argument(
        "--report-dir", default="eval/reports", metavar="DIR", help="where the report goes"
    )
    run.set_defaults(func=cmd_eval, eval_func="cmd_eval_run")

    history = commands.add_parser(
        "golden-from-reviews", help="a golden file from this installation's published reviews"
    )
    history.add_argument("--repo", required=True, metavar="OWNER/NAME")
    history.add_argument("--out", metavar="FILE")
    history.set_defaults(func=cmd_eval, eval_func="cmd_golden_from_reviews")

    martian = commands.add_parser(
        "import-martian", help="convert the Martian Code Review Bench golden comments"
    )
    martian.add_argument("dir", metavar="DIR", help="folder with the benchmark's *.json files")
    martian.add_argument("--out", metavar="FILE", default="eval/golden/martian.json")
    martian.add_argument("--resolve", action="store_true", help="look up shas on GitHub")
    martian.set_defaults(func=cmd_eval, eval_func="cmd_import_martian")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
