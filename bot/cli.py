"""The `cockpit` command line (`python -m bot` is the same): options in, exit codes out."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from bot.config import (
    PROVIDERS,
    ConfigError,
    Settings,
    environment,
    load_env_file,
    load_settings,
    missing_model_key,
    settings_secrets,
)
from bot.redaction import environment_secrets, redact, register_all
from bot.texts import OPERATOR, say

EXIT_RUNTIME, EXIT_CONFIG = 1, 2
STARTED = time.monotonic()  # before the heavy imports: what `demo` measures from


def _fail(exc: ConfigError, command: str = "") -> int:
    print(say(OPERATOR, "config_failed", command=command, error=exc), file=sys.stderr)
    return EXIT_CONFIG


def _failed(command: str, exc: Exception, code: int) -> int:
    print(say(OPERATOR, "failed", command=command, error=exc), file=sys.stderr)
    return code


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pr-cockpit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        from bot import __version__

        return __version__


def checkout_commit() -> str | None:
    """The commit of the git checkout this code runs from, `, modified` when tracked files
    differ from it; None for an installed wheel (every release says the same version)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `status` never writes the index here

    def git(*args: str) -> str:
        argv = ["git", "-C", str(root), "-c", "core.fsmonitor=false", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, env=env)
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, argv)
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        modified = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + (", modified" if modified else "")


def port(text: str) -> int:
    """A TCP port (0: any free one)."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(say(OPERATOR, "bad_port", text=repr(text)))
    return number


def passes(text: str) -> int:
    """`eval run --passes`: what the repository setting `passes` takes (its declaration's
    range), refused like it."""
    from bot import inputs
    from bot.repo_config import KEYS

    try:
        number = int(text)
    except ValueError:
        number = None
    found = inputs.problems(number, KEYS["passes"].type)
    if found:
        limits = found[0].limits
        raise argparse.ArgumentTypeError(
            say(
                OPERATOR, "bad_passes", text=repr(text), low=limits.get("ge"), high=limits.get("le")
            )
        )
    assert number is not None
    return number


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from bot.checks import exit_code, listen_problem, preflight

    checks = asyncio.run(preflight(os.environ, args.role, listen=(args.host, args.port)))
    for check in checks:
        if check.problem or check.warning:
            print(check.line(), file=sys.stderr)
    if code := exit_code(checks):
        problems = sum(c.problem for c in checks)
        app_missing = any(c.name in ("GITHUB_APP_ID", "GITHUB_PRIVATE_KEY") for c in checks)
        print(
            say(OPERATOR, "serve_failed", count=problems, app_missing=app_missing), file=sys.stderr
        )
        return code
    # What this role reads (web: not the App's key; worker: not the webhook secret).
    settings = load_settings(role=args.role)
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port
    from bot.logs import setup_logging
    from bot.records.postgres import MigrationFailed
    from bot.records.schema import SchemaBehind

    setup_logging("DEBUG" if args.debug else "INFO")
    try:
        asyncio.run(_serve(settings, host, port, args.role))
    except (SchemaBehind, MigrationFailed) as exc:
        return _failed("serve", exc, EXIT_CONFIG)
    except OSError as exc:  # the address was taken between the check and the start
        print(listen_problem(host, port, exc).line(), file=sys.stderr)
        return EXIT_RUNTIME
    return 0


def _started_line(settings: Settings, host: str, port: int, role: str) -> str:
    from bot.backend import describe

    return say(
        OPERATOR,
        "serve_started",
        version=version(),
        host=host,
        port=port,
        role=role,
        provider=settings.provider,
        model=settings.model(settings.provider),
        data_dir=settings.data_dir.absolute(),
        database=describe(settings),
    )


async def _serve(settings: Settings, host: str, port: int, role: str) -> None:
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
        print(_started_line(settings, host, port, role), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await stop_gracefully(app)
    finally:
        await runner.cleanup()


def cmd_migrate(_args: argparse.Namespace) -> int:
    """A database it cannot use is `serve`'s line for it."""
    import asyncio
    import sqlite3

    try:
        settings = load_settings(github=False)
    except ConfigError as exc:
        return _fail(exc, "migrate")
    from bot.checks import data_dir_check, database_check

    found = [data_dir_check(settings.data_dir)] if settings.database_url is None else []
    if not any(c.problem for c in found):
        found.append(asyncio.run(database_check(settings, "migrate")))
    if code := _problems(found):
        return code
    import psycopg

    from bot import backend
    from bot.records.postgres import MigrationFailed

    try:
        print(asyncio.run(backend.migrate(settings)))
    except (MigrationFailed, OSError, sqlite3.Error, psycopg.Error) as exc:
        return _failed("migrate", exc, EXIT_RUNTIME)
    return 0


def _problems(checks: list[Any]) -> int:
    from bot.checks import exit_code

    for check in checks:
        if check.problem:
            print(check.line(), file=sys.stderr)
    return exit_code(checks)


def cmd_check_config(args: argparse.Namespace) -> int:
    import asyncio

    from bot.checks import exit_code, preflight

    checks = asyncio.run(preflight(os.environ, offline=args.offline))
    for check in checks:
        print(check.line())
    code = exit_code(checks)
    if code:
        print(say(OPERATOR, "check_failed", count=sum(c.problem for c in checks)))
    else:
        print(say(OPERATOR, "check_ok", count=len(checks), offline=args.offline))
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.demo import run_demo

    return run_demo(keep=args.keep, live=args.live, critic=args.critic, started=STARTED)


def cmd_register(args: argparse.Namespace) -> int:
    from bot.register import Options, run

    return run(Options(**_fields(args, Options)))


def cmd_review_local(args: argparse.Namespace) -> int:
    from bot.local import LocalOptions, run_review_local

    return run_review_local(LocalOptions(**_fields(args, LocalOptions)))


def _fields(args: argparse.Namespace, options: Any) -> dict[str, Any]:
    """The options' fields as parsed (commands.toml names each option by its field)."""
    import dataclasses

    return {field.name: getattr(args, field.name) for field in dataclasses.fields(options)}


def cmd_stats(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from bot.evals.from_reviews import check_repo
    from bot.stats import parse_since

    try:
        settings = load_settings(github=False)
        since = 0.0 if args.since is None else parse_since(args.since)
        if args.repo is not None:
            check_repo(args.repo)
    except ConfigError as exc:
        return _fail(exc, "stats")
    except ValueError as exc:
        return _failed("stats", exc, EXIT_CONFIG)
    from bot.backend import reach
    from bot.checks import PG_WAIT, database_verdict

    found = asyncio.run(reach(settings, PG_WAIT))
    if not found.exists:
        print(
            say(OPERATOR, "stats_no_database", path=settings.db_path, data_dir=settings.data_dir),
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if code := _problems([database_verdict(settings, found, "read")]):
        return code
    import sqlite3

    import psycopg

    from bot.records.schema import SchemaBehind

    try:
        rows, where = asyncio.run(_stats(settings, since, args.repo))
    except SchemaBehind as exc:  # migrated back meanwhile: not likely, but said as it is
        return _failed("stats", exc, EXIT_CONFIG)
    except (OSError, sqlite3.Error, psycopg.Error) as exc:
        return _failed("stats", exc, EXIT_RUNTIME)
    from bot.stats import render_text, to_json

    if args.json:
        print(json.dumps(to_json(rows, since=args.since, repo=args.repo), indent=2))
    else:
        print(render_text(rows, since=args.since, repo=args.repo, where=where), end="")
    return 0


async def _stats(settings: Settings, since: float, repo: str | None) -> tuple[list[Any], str]:
    from bot.backend import describe, open_database
    from bot.records.stats import model_figures
    from bot.stats import summarise

    db = await open_database(settings, read_only=True)
    try:
        return summarise(await model_figures(db, since=since, repo=repo)), describe(settings)
    finally:
        await db.close()


def environment_markdown() -> str:
    """The README's environment table (tests/test_cli.py holds the README to it)."""
    rows = ["| variable | meaning | default |", "|---|---|---|"]
    for var in environment():
        names = ", ".join(f"`{name}`" for name in var.names)
        rows.append(f"| {names} | {var.meaning} | {var.default} |")
    return "\n".join(rows)


MARKDOWN_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def environment_text(width: int = 100) -> str:
    import textwrap

    def plain(text: str) -> str:
        """Markdown as a terminal shows it: a README section named, a web link spelled out."""
        text = MARKDOWN_LINK.sub(
            lambda m: f'the README\'s "{m[1]}"' if m[2].startswith("#") else f"{m[1]} ({m[2]})",
            text,
        )
        return text.replace("`", "").replace("*", "")

    wrap = textwrap.TextWrapper(width=width, initial_indent="    ", subsequent_indent="    ")
    blocks = []
    for var in environment():
        meaning = wrap.fill(plain(var.meaning))
        default = wrap.fill("default: " + plain(var.default))
        blocks.append("\n".join([", ".join(var.names), meaning, default]))
    return say(OPERATOR, "environment_head") + "\n\n" + "\n\n".join(blocks)


def cmd_help(args: argparse.Namespace) -> int:
    import shutil

    parser = build_parser()
    topic = args.topic
    if topic is None:
        parser.print_help()
        return 0
    if topic == "environment":
        if args.markdown:
            print(environment_markdown())
        else:
            width = min(100, shutil.get_terminal_size((100, 24)).columns)
            print(environment_text(width))
        return 0
    commands = _subcommands(parser)
    if topic in commands:
        commands[topic].print_help()
        return 0
    print(say(OPERATOR, "no_topic", topic=repr(topic), commands=sorted(commands)), file=sys.stderr)
    return EXIT_CONFIG


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def cmd_eval(args: argparse.Namespace) -> int:
    """An eval run without the reviewer's (or the LLM judge's) key stops before any case runs
    (a resumed run's provider is read later, with the run)."""
    if args.eval_func == "cmd_eval_run":
        try:
            provider = args.provider or load_settings(github=False).provider
        except ConfigError as exc:
            return _fail(exc, "eval run")
        needed = [] if args.resume is not None else [provider]
        if args.judge != "lexical":
            needed.append(args.judge)
        for name in dict.fromkeys(needed):
            if (missing := missing_model_key(name, os.environ)) is not None:
                return _fail(missing, "eval run")
    from bot.evals import commands

    return int(getattr(commands, args.eval_func)(args))


@cache
def _commands() -> dict[str, dict[str, Any]]:
    import tomllib
    from importlib import resources

    return tomllib.loads(resources.files("templates").joinpath("cli/commands.toml").read_text())


@cache
def _named() -> dict[str, Any]:
    """The values templates/cli/commands.toml names. Not before `main` has read cockpit.env:
    bot.register imports aiohttp, which reads SSL_CERT_FILE as it is imported."""
    from bot.register import DEFAULT_PORT, DEFAULT_TIMEOUT, GITHUB_WEB_URL

    return {
        "port": port,
        "passes": passes,
        "int": int,
        "float": float,
        "path": Path,
        "providers": PROVIDERS,
        "judges": ("lexical", *PROVIDERS),
        "github_url": GITHUB_WEB_URL,
        "register_port": DEFAULT_PORT,
        "register_timeout": DEFAULT_TIMEOUT,
    }


def _add_options(
    parser: argparse.ArgumentParser, options: dict[str, dict[str, Any]], **override: Any
) -> None:
    for flag, declared in options.items():
        option = {**declared, **override}
        for key, value in option.items():
            if isinstance(value, str) and value.startswith("@"):
                option[key] = _named()[value[1:]]
        if option.get("help") is False:
            option["help"] = argparse.SUPPRESS
        parser.add_argument(flag, **option)


def _common(*, top: bool) -> argparse.ArgumentParser:
    """`--env-file` and `--debug`, before or after the command (after it, SUPPRESS keeps a
    sub-parser from resetting what was given before it)."""
    common = argparse.ArgumentParser(add_help=False)
    options = {k: v for k, v in _commands()["cockpit"]["options"].items() if k != "--version"}
    _add_options(common, options, **({} if top else {"default": argparse.SUPPRESS}))
    return common


def _texts(text: dict[str, Any]) -> dict[str, Any]:
    footer = "\n\n" + text["footer"].strip() if "footer" in text else ""
    return {
        "description": text["description"].strip(),
        "epilog": "examples:\n" + text["examples"].rstrip() + footer,
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }


def build_parser() -> argparse.ArgumentParser:
    """The parser templates/cli/commands.toml declares: each command runs `cmd_NAME`."""
    commands = _commands()
    parser = argparse.ArgumentParser(
        prog="cockpit", parents=[_common(top=True)], **_texts(commands["cockpit"])
    )
    _add_options(parser, {"--version": commands["cockpit"]["options"]["--version"]})
    parsers = {"": parser}
    subs = {"": parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")}
    for full, text in list(commands.items())[1:]:
        parent, _, name = full.rpartition(" ")
        if parent not in subs:
            subs[parent] = parsers[parent].add_subparsers(
                dest=f"{parent}_command", required=True, metavar="COMMAND"
            )
        command = subs[parent].add_parser(
            name, help=text["summary"], parents=[_common(top=False)], **_texts(text)
        )
        _add_options(command, text.get("options", {}))
        if parent:
            command.set_defaults(func=cmd_eval, eval_func=text["run"])
        else:
            command.set_defaults(func=globals()["cmd_" + name.replace("-", "_")])
        parsers[full] = command
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # `--env-file` wherever it is, before the parser (whose construction imports modules that
    # read the environment) is built.
    early, _ = _common(top=True).parse_known_args(argv)
    try:
        load_env_file(None if early.env_file is None else Path(early.env_file))
    except ConfigError as exc:
        return _fail(exc)
    # Masked in whatever any command prints or logs: the environment's secrets and those the
    # settings hold (the App's key read from its file, the whole database URL).
    register_all(environment_secrets(os.environ))
    register_all(settings_secrets(os.environ))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from bot.records.schema import SCHEMA_VERSION

        commit = checkout_commit()  # git is asked only when the flag is given
        print(say(OPERATOR, "version", version=version(), schema=SCHEMA_VERSION, commit=commit))
        return 0
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if args.debug:
            raise
        error = redact(f"{exc.__class__.__name__}: {exc}")[:300]
        print(say(OPERATOR, "unexpected", command=args.command, error=error), file=sys.stderr)
        return EXIT_RUNTIME
