"""The `cockpit` command line (SPEC §2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bot.config import ConfigError, check_settings, load_settings

EXIT_CONFIG = 2


def _fail(exc: ConfigError) -> int:
    print(f"cockpit: configuration error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def cmd_serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    from bot.logs import setup_logging
    from bot.server import make_app

    try:
        settings = load_settings()
    except ConfigError as exc:
        return _fail(exc)
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    setup_logging()
    web.run_app(
        make_app(settings),
        host=host,
        port=port,
        print=None,
        access_log=None,
        handle_signals=True,
    )
    return 0


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

    return run_demo(keep=args.keep)


def cmd_eval(_args: argparse.Namespace) -> int:
    print(
        "cockpit eval: eval replays are not part of this build yet (README, 'Status').",
        file=sys.stderr,
    )
    return EXIT_CONFIG


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cockpit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the webhook server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate the environment, exit 0 or 2")
    check.set_defaults(func=cmd_check_config)

    demo = sub.add_parser("demo", help="the whole flow locally, no account or key needed")
    demo.add_argument("--keep", action="store_true", help="keep the demo's data folder")
    demo.set_defaults(func=cmd_demo)

    evals = sub.add_parser("eval", help="replay labelled PRs and score the reviewer")
    eval_sub = evals.add_subparsers(dest="eval_command", required=True)
    run = eval_sub.add_parser("run", help="run a golden set")
    run.add_argument("--golden", required=True)
    run.add_argument("--provider", choices=["claude", "codex"])
    run.add_argument("--model")
    run.add_argument("--verify", action="store_true")
    run.add_argument("--repo")
    run.set_defaults(func=cmd_eval)
    golden = eval_sub.add_parser("golden-from-reviews", help="golden file from approved findings")
    golden.add_argument("--repo", required=True)
    golden.add_argument("--out")
    golden.set_defaults(func=cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
