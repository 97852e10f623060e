"""PR Cockpit: AI pull-request reviews as drafts that a person vets before they are published."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bot.config import ConfigError, Settings, check_settings, load_settings

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
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    setup_logging()
    asyncio.run(_serve(settings, host, port))
    return 0


async def _serve(settings: Settings, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT, then stop gracefully (see `stop_gracefully`)."""
    import asyncio
    import signal

    from aiohttp import web

    from bot.server import make_app, stop_gracefully
    from handlers import router

    app = make_app(settings, router)
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

    return run_demo(keep=args.keep)


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

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
