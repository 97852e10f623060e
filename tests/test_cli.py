"""The command line a newcomer meets: help, version, examples, the environment table (one source
for `cockpit help environment` and the README), ./cockpit.env, and one-line errors."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli import build_parser, environment_markdown
from bot.config import environment, load_env_file, shown_url
from bot.register import duration
from tests.test_config import GOOD

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    "serve",
    "migrate",
    "check-config",
    "demo",
    "review-local",
    "register",
    "eval",
    "stats",
    "help",
)


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env={"PATH": os.environ["PATH"], **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_bare_cockpit_shows_help_and_exits_0(tmp_path):
    result = cli(cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: cockpit")
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s+\S", result.stdout, re.M), command
    assert "examples:" in result.stdout and "cockpit help environment" in result.stdout


def test_version(tmp_path):
    from bot import __version__

    result = cli("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith(f"cockpit {__version__} (schema version ")


EVAL_COMMANDS = ("eval run", "eval golden-from-reviews", "eval import-martian")


@pytest.mark.parametrize("command", COMMANDS + EVAL_COMMANDS)
def test_every_command_has_a_description_examples_and_defaults(command, tmp_path):
    result = cli(*command.split(), "--help", cwd=tmp_path)
    assert result.returncode == 0
    usage, description = result.stdout.split("\n\n", 2)[:2]
    assert usage.startswith(f"usage: cockpit {command}")
    assert len(description.split()) > 10  # a sentence or more, not a bare title
    examples = result.stdout.split("examples:\n", 1)[1]
    assert examples.startswith("  $ ") and f"cockpit {command}" in examples


def test_review_local_help_names_every_providers_settings(tmp_path):
    result = cli("review-local", "--help", cwd=tmp_path)
    for variable in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "COCKPIT_CHAT_BASE_URL"):
        assert variable in result.stdout
    assert "COCKPIT_CHAT_MODEL" in result.stdout and "--provider chat" in result.stdout


def test_options_name_their_defaults_and_variables():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, command in subcommands.choices.items():
        for action in command._actions:
            if action.option_strings and action.dest not in ("help",):
                assert action.help, f"{name} {action.option_strings} has no help"
    serve = subcommands.choices["serve"].format_help()
    assert "$COCKPIT_HOST" in serve and "$COCKPIT_PORT" in serve and "default: all" in serve
    local = subcommands.choices["review-local"].format_help()
    assert "$COCKPIT_PROVIDER" in local and "default: HEAD" in local


def test_help_environment_lists_every_variable(tmp_path):
    result = cli("help", "environment", cwd=tmp_path)
    assert result.returncode == 0
    for variable in environment():
        for name in variable.names:
            assert re.search(rf"^{name}\b", result.stdout, re.M) or f", {name}" in result.stdout
    assert "default: 8080" not in result.stdout and "default: 0.0.0.0, 8080" in result.stdout
    markdown = cli("help", "environment", "--markdown", cwd=tmp_path)
    assert markdown.stdout.strip() == environment_markdown()


def test_help_environment_prints_no_markdown(tmp_path):
    """The terminal gets words, not `[text](#anchor)`: a README section is named as such."""
    shown = cli("help", "environment", cwd=tmp_path).stdout
    assert "](" not in shown and "`" not in shown
    assert "](#" in environment_markdown()  # the README's table keeps its link
    assert 'see the README\'s "Any model"' in " ".join(shown.split())


def readme_environment_table() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Environment") :]
    start = section.index("| variable | meaning | default |")
    return section[start:].split("\n\n", 1)[0].strip()


def test_the_readme_environment_table_is_the_one_cockpit_prints():
    """Regenerate it with `cockpit help environment --markdown`."""
    assert readme_environment_table() == environment_markdown()


def test_every_variable_the_code_reads_is_in_the_table():
    listed = {name for variable in environment() for name in variable.names}
    read = set()
    for folder in ("bot", "handlers"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(
                re.findall(
                    r"[\"']((?:COCKPIT|GITHUB|ANTHROPIC|OPENAI|SSL|GIT_SSL)_[A-Z0-9_]+)[\"']",
                    path.read_text(),
                )
            )
    # Read by the SDK as a second name for its key (the table's key row says so).
    assert read - listed <= {"ANTHROPIC_AUTH_TOKEN"}
    assert listed - read <= {"GITHUB_TOKEN"}  # read by gidgethub's caller through os.environ


# -- ./cockpit.env -------------------------------------------------------------------------


def test_the_env_file_fills_what_the_environment_lacks(tmp_path):
    env_file = tmp_path / "cockpit.env"
    env_file.write_text(
        "# written by cockpit register\nGITHUB_APP_ID=12\nexport COCKPIT_PORT=9000\n"
        'GITHUB_WEBHOOK_SECRET="a$b c"\nCOCKPIT_PROVIDER=codex\n'
    )
    environ = {"COCKPIT_PROVIDER": "claude"}
    assert load_env_file(env_file, environ) == env_file
    assert environ == {
        "GITHUB_APP_ID": "12",
        "COCKPIT_PORT": "9000",
        "GITHUB_WEBHOOK_SECRET": "a$b c",  # no ${VAR} expansion: a secret stays as written
        "COCKPIT_PROVIDER": "claude",  # the environment wins
    }


def test_every_command_reads_cockpit_env_in_the_current_folder(tmp_path):
    (tmp_path / "cockpit.env").write_text(
        f"GITHUB_APP_ID=12\nGITHUB_WEBHOOK_SECRET=s3cret!\nCOCKPIT_DATA_DIR={tmp_path}\n"
        "ANTHROPIC_API_KEY=sk-ant-from-file\nCOCKPIT_PORT=eighty\n"
    )
    key = tmp_path / "key.pem"
    key.write_text(GOOD["GITHUB_PRIVATE_KEY"])
    result = cli(
        "check-config", "--offline", env={"GITHUB_PRIVATE_KEY_PATH": str(key)}, cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stdout.splitlines()[:-1] == [
        "✗ COCKPIT_PORT: expected a whole number, got 'eighty'"
    ]
    fixed = cli(
        "check-config",
        "--offline",
        env={"GITHUB_PRIVATE_KEY_PATH": str(key), "COCKPIT_PORT": "8080"},
        cwd=tmp_path,
    )
    assert fixed.returncode == 0, fixed.stdout
    other = tmp_path / "other"
    other.mkdir()
    named = cli(
        "check-config",
        "--offline",
        "--env-file",
        str(tmp_path / "cockpit.env"),
        env={"GITHUB_PRIVATE_KEY_PATH": str(key)},
        cwd=other,
    )
    assert "COCKPIT_PORT" in named.stdout  # the named file was read from another folder


def test_a_missing_env_file_is_one_line(tmp_path):
    result = cli("--env-file", "nope.env", "check-config", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == "cockpit: configuration error: --env-file: nope.env: no such file\n"


# -- one line per error -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        (
            "OPENAI_BASE_URL",
            "http://127.0.0.1:8000",
            "✗ OPENAI_BASE_URL: the API root ends in /v1: set it to http://127.0.0.1:8000/v1",
        ),
        (
            "ANTHROPIC_BASE_URL",
            "https://proxy.example/v1/",
            "✗ ANTHROPIC_BASE_URL: the SDK adds /v1 itself: set it to https://proxy.example",
        ),
    ],
)
def test_a_base_url_the_sdk_would_get_wrong_is_refused_with_the_fix(
    tmp_path, variable, value, expected
):
    env = {**GOOD, "ANTHROPIC_API_KEY": "k", "COCKPIT_DATA_DIR": str(tmp_path), variable: value}
    result = cli("check-config", "--offline", env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == expected
    serve = cli("serve", env=env, cwd=tmp_path)
    assert serve.returncode == 2 and expected in serve.stderr.splitlines()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:pw@db:5432/x", "postgresql://***@db:5432/x"),
        ("postgresql://u@db/x", "postgresql://***@db/x"),
        ("postgresql://db/x", "postgresql://db/x"),
        ("postgresql://u:p%40ss@db/x?sslmode=require", "postgresql://***@db/x?sslmode=require"),
        ("postgresql://u:p@ss@db/x", "postgresql://***@db/x"),
    ],
)
def test_a_shown_url_has_no_password(url, shown):
    assert shown_url(url) == shown


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (0.5, "0.5 seconds"),
        (1, "1 second"),
        (5, "5 seconds"),
        (60, "1 minute"),
        (90, "1 minute 30 seconds"),
        (900, "15 minutes"),
    ],
)
def test_register_says_its_wait_as_people_do(seconds, said):
    assert duration(seconds) == said


def test_register_timeout_5_waits_5_seconds(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bot", "register", "--no-browser", "--port", "0", "--timeout", "1"],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Waiting up to 1 second for GitHub" in result.stdout
    assert "within 1 second." in result.stderr


def test_eval_without_the_reviewers_key_names_it_before_any_case(tmp_path):
    golden = ROOT / "eval" / "golden" / "planted" / "planted.json"
    result = cli(
        "eval",
        "run",
        "--golden",
        str(golden),
        env={"COCKPIT_DATA_DIR": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "cockpit eval run: configuration error: ANTHROPIC_API_KEY: not set; the claude provider"
        " needs it\n"
    )
    assert "FAILED" not in result.stdout
    judge = cli(
        "eval",
        "run",
        "--golden",
        str(golden),
        "--judge",
        "codex",
        env={"COCKPIT_DATA_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "k"},
        cwd=tmp_path,
    )
    assert judge.returncode == 2 and "OPENAI_API_KEY: not set" in judge.stderr


def test_an_unexpected_error_is_one_line_unless_debug(tmp_path):
    import sqlite3

    env = {"COCKPIT_DATA_DIR": str(tmp_path / "data")}
    assert cli("migrate", env=env, cwd=tmp_path).returncode == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "data" / "cockpit.sqlite3")) as db:
        db.execute("DROP TABLE reviews")  # its version says current; a table is gone: a bug
        db.commit()
    plain = cli("eval", "golden-from-reviews", "--repo", "o/r", env=env, cwd=tmp_path)
    assert plain.returncode == 1
    [line] = plain.stderr.strip().splitlines()
    assert line.startswith("cockpit eval: unexpected error (") and "--debug" in line
    debug = cli("eval", "golden-from-reviews", "--repo", "o/r", "--debug", env=env, cwd=tmp_path)
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr


def test_a_file_that_is_not_a_database_is_statss_line_for_golden_from_reviews(tmp_path):
    """Before: `unexpected error (DatabaseError: file is not a database)`."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "cockpit.sqlite3").write_bytes(b"not a database, whatever its name says" * 100)
    env = {"COCKPIT_DATA_DIR": str(data)}
    golden = cli("eval", "golden-from-reviews", "--repo", "o/r", env=env, cwd=tmp_path)
    stats = cli("stats", env=env, cwd=tmp_path)
    assert (golden.returncode, stats.returncode) == (2, 2)
    assert golden.stderr == stats.stderr
    assert golden.stderr.startswith(f"✗ database: {data / 'cockpit.sqlite3'} is not a SQLite")
    assert not list(tmp_path.glob("eval/**/*.json"))


# -- the README's commands ---------------------------------------------------------------------


def readme_sh_blocks() -> list[tuple[str, str]]:
    """(section title, block) for every ```sh block of the README."""
    blocks, section = [], ""
    for part in re.split(r"^(#{2,3} .+)$", (ROOT / "README.md").read_text(), flags=re.M):
        if part.startswith("#"):
            section = part.lstrip("#").strip()
            continue
        blocks += [(section, b) for b in re.findall(r"```sh\n(.*?)```", part, re.S)]
    return blocks


def test_the_quick_start_leaves_cockpit_on_path_and_the_readme_says_cockpit_throughout():
    """After the Quick start the README (and the demo's "Next") says `cockpit …`: the Quick
    start activates the venv, so that is what the user types."""
    quick = [b for section, b in readme_sh_blocks() if section == "Quick start"]
    steps = [step.strip() for step in quick[0].strip().split("&&")]
    assert steps[0] == "python3 -m venv .venv" and steps[-1] == "cockpit demo"
    assert steps.index(". .venv/bin/activate") < steps.index("cockpit demo")
    readme = (ROOT / "README.md").read_text()
    assert "bin/cockpit" not in readme
    for install in re.findall(r"python3 -m venv \.venv && [^`\n]+", readme):
        assert ". .venv/bin/activate" in install or install.endswith("pytest -q"), install
    from bot.texts import OPERATOR, say

    done = say(OPERATOR, "demo.done", seconds=1.0, calls=3)
    named = re.findall(r"`(cockpit [a-z-]+)", done.split("Next:", 1)[1])
    assert named and all(re.search(rf"(^|`){c}\b", readme, re.M) for c in named), named


def test_activating_the_venv_as_the_readme_says_puts_cockpit_on_path(tmp_path):
    """`. .venv/bin/activate` in POSIX sh (Debian's dash), from another folder, with a bare
    PATH: `cockpit` runs by name."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        pytest.skip("the tests run outside a venv")
    done = subprocess.run(
        ["/bin/sh", "-c", f". {venv}/bin/activate && cockpit --version"],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cockpit ")


def test_ci_runs_exactly_the_readmes_test_command():
    [tests] = [b.strip() for section, b in readme_sh_blocks() if "pytest" in b]
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()
