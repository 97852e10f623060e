"""The command line's first hour: a malformed cockpit.env is named with its line, one rule
for how serious a finding is (the same for `serve` and `check-config`), failures said in
words (never a Python class name), and `--version` telling releases apart. All through the
CLI as a subprocess, from another folder."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bot import __version__
from bot.records.schema import SCHEMA_VERSION
from bot.standin.github import GitHubStandin
from tests.serverproc import free_port

ROOT = Path(__file__).resolve().parent.parent
# What a line a person reads must not show: Python's names for what went wrong.
CLASS_NAME = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception)\b")


def cli(*args: str, env: dict[str, str], cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        env={"PATH": os.environ["PATH"], "HOME": str(cwd), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def app_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    github = GitHubStandin()  # its id and key; nothing listens at the API URL
    return {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": "webhook-secret-123",
        "GITHUB_API_URL": f"http://127.0.0.1:{free_port()}",
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        **extra,
    }


def marked(text: str, mark: str = "✗") -> list[str]:
    return [line for line in text.splitlines() if line.startswith(mark)]


# -- 17: a malformed cockpit.env ------------------------------------------------------------


def test_a_malformed_env_file_names_the_file_and_line_and_stops(tmp_path):
    """Before: python-dotenv's "could not parse statement starting at line 3" without the
    file's name, then `GITHUB_WEBHOOK_SECRET: not set` although the file sets it."""
    (tmp_path / "cockpit.env").write_text(
        "GITHUB_APP_ID=12\n# the secret\nGITHUB_WEBHOOK_SECRET s3cret-value\nCOCKPIT_PORT=9\n"
    )
    done = cli("check-config", "--offline", env={}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "cockpit: configuration error: cockpit.env: line 3 is not KEY=value (a value with"
        ' spaces or # is quoted: KEY="a value")\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    named = tmp_path / "other.env"
    named.write_text('A=1\nB="an unclosed quote\n')
    done = cli("--env-file", str(named), "stats", env={}, cwd=elsewhere)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"cockpit: configuration error: {named}: line 2 is not KEY=value")
    assert "s3cret-value" not in done.stderr and "dotenv" not in done.stderr


def test_a_bare_key_in_the_env_file_is_named_with_its_line(tmp_path):
    """Before: the line was skipped without a word, then `GITHUB_WEBHOOK_SECRET: not set`."""
    (tmp_path / "cockpit.env").write_text("GITHUB_APP_ID=12\n\nGITHUB_WEBHOOK_SECRET\n")
    done = cli("check-config", "--offline", env={}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "cockpit: configuration error: cockpit.env: line 3 is not KEY=value (a value with"
        ' spaces or # is quoted: KEY="a value")\n'
    )


def test_the_fix_for_a_missing_key_names_the_env_file_in_use(tmp_path):
    """Before: `./cockpit.env` whatever `--env-file` said."""
    (tmp_path / "t.env").write_text("COCKPIT_PROVIDER=codex\n")
    done = cli("--env-file", "t.env", "check-config", "--offline", env={}, cwd=tmp_path)
    assert done.returncode == 2
    fix = (
        "✗ codex: OPENAI_API_KEY is not set (COCKPIT_PROVIDER=codex reviews with it) → set"
        " OPENAI_API_KEY in the environment or in t.env"
    )
    assert fix in marked(done.stdout)
    done = cli("check-config", "--offline", env={}, cwd=tmp_path)
    assert any(
        line.endswith("in the environment or in ./cockpit.env") for line in marked(done.stdout)
    )


def test_an_env_file_that_is_not_text_is_named_in_words(tmp_path):
    (tmp_path / "cockpit.env").write_bytes(b"GITHUB_APP_ID=12\nKEY=\xff\xfe\n")
    done = cli("check-config", "--offline", env={}, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == ("cockpit: configuration error: cockpit.env: line 2 is not UTF-8 text\n")


# -- 18: one rule for how serious a finding is ------------------------------------------------


def test_a_missing_reviewer_key_is_the_same_problem_for_serve_and_check_config(tmp_path):
    """Before: a warning for `serve` (which started), an error for `check-config`."""
    with socket.socket() as busy:  # serve stops before it listens either way
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = app_env(tmp_path, COCKPIT_HOST="127.0.0.1", COCKPIT_PORT=str(port))
        check = cli("check-config", env=env, cwd=tmp_path)
        serve = cli("serve", env=env, cwd=tmp_path)
    claude = (
        "✗ claude: ANTHROPIC_API_KEY is not set (COCKPIT_PROVIDER=claude reviews with it)"
        " → set ANTHROPIC_API_KEY in the environment or in ./cockpit.env"
    )
    assert claude in marked(check.stdout)
    assert claude in marked(serve.stderr)
    assert (check.returncode, serve.returncode) == (2, 2)  # a setting to change wins


def test_a_chat_server_that_does_not_answer_is_a_run_time_problem(tmp_path):
    """Before: exit 2 and `(APIConnectionError)`; the README says 1 when something only does
    not answer."""
    closed = f"http://127.0.0.1:{free_port()}/v1"
    env = app_env(
        tmp_path,
        COCKPIT_PROVIDER="chat",
        COCKPIT_CHAT_BASE_URL=closed,
        COCKPIT_CHAT_MODEL="qwen3:32b",
        GITHUB_API_URL=closed.removesuffix("/v1"),
    )
    done = cli("check-config", env=env, cwd=tmp_path)
    assert done.returncode == 1, done.stdout
    [chat] = [line for line in marked(done.stdout) if line.startswith("✗ chat:")]
    assert chat.startswith("✗ chat: COCKPIT_CHAT_BASE_URL: the chat server did not answer (")
    assert "Connection refused" in chat
    assert not CLASS_NAME.search(done.stdout), done.stdout


# -- 19: failures in words ------------------------------------------------------------------


def test_unreachable_github_is_said_in_words(tmp_path):
    env = app_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-x", ANTHROPIC_BASE_URL="http://127.0.0.1:9")
    done = cli("check-config", env=env, cwd=tmp_path)
    assert done.returncode == 1
    [github] = [line for line in marked(done.stdout) if line.startswith("✗ GitHub App:")]
    assert f"cannot reach {env['GITHUB_API_URL']} (Connection refused)" in github
    assert not CLASS_NAME.search(done.stdout), done.stdout


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_refused_before_anything_starts(tmp_path, port):
    """Before: `--port 99999` passed the checks (the resolver wraps it) and the server failed
    as it bound: `unexpected error (OverflowError: …)`."""
    env = app_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-x")
    done = cli("serve", f"--port={port}", env=env, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        f"cockpit serve: error: argument --port: expected a port from 0 to 65535, got {port!r}"
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("given", ["0", "-2", "9", "two"])
def test_eval_passes_out_of_the_settings_range_is_refused(tmp_path, given):
    """Before: `eval run --passes 0` (or -2) ran one pass without a word and `--passes 9`
    reviewed each case nine times, while the repository setting `passes` takes 1 to 5."""
    done = cli("eval", "run", "--passes", given, env=app_env(tmp_path), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "cockpit eval run: error: argument --passes: expected a number of passes from 1 to 5"
        f" (the repository setting `passes` takes the same), got {given!r}"
    )


def test_a_host_that_is_not_here_gets_host_advice(tmp_path):
    env = app_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-x")
    done = cli("serve", "--host", "192.0.2.7", "--port", "0", env=env, cwd=tmp_path)
    assert done.returncode == 2
    [line] = [line for line in marked(done.stderr) if line.startswith("✗ listen address:")]
    assert line == (
        "✗ listen address: cannot listen on 192.0.2.7:0 (Cannot assign requested address) →"
        " set --host or COCKPIT_HOST to an address of this machine (0.0.0.0: every interface)"
    )
    done = cli("serve", "--host", "no-such-host.invalid", "--port", "0", env=env, cwd=tmp_path)
    [line] = [line for line in marked(done.stderr) if line.startswith("✗ listen address:")]
    assert line.startswith("✗ listen address: cannot find the address no-such-host.invalid (")
    assert line.endswith(
        "→ set --host or COCKPIT_HOST to an address of this machine (0.0.0.0: every interface)"
    )


def test_a_data_directory_that_cannot_be_made_is_named(tmp_path):
    """Before: `COCKPIT_DATA_DIR=/proc/nodir` reported `/proc`."""
    env = app_env(tmp_path, ANTHROPIC_API_KEY="sk-ant-x", COCKPIT_DATA_DIR="/proc/nodir")
    for command, stream in (("check-config", "stdout"), ("serve", "stderr")):
        done = cli(command, env=env, cwd=tmp_path)
        assert done.returncode == 2
        [line] = marked(getattr(done, stream))[:1]
        assert line.startswith("✗ data directory: cannot create /proc/nodir (")


# -- 20: --version --------------------------------------------------------------------------


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_version_names_the_release_the_schema_and_the_checkouts_commit(tmp_path):
    commit = git("rev-parse", "--short=12", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += ", modified"
    done = cli("--version", env={}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        f"cockpit {__version__} (schema version {SCHEMA_VERSION}, commit {commit})\n",
    )
    # A copy outside any checkout (as a wheel installs it) has no commit to name.
    copy = tmp_path / "copy"
    for package in ("bot", "handlers", "templates"):
        shutil.copytree(ROOT / package, copy / package)
    done = cli("--version", env={"PYTHONPATH": str(copy)}, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (
        0,
        f"cockpit {__version__} (schema version {SCHEMA_VERSION})\n",
    )


# -- passwords holding `/`, `?` or `#` --------------------------------------------------------


@pytest.mark.parametrize("command", ["migrate", "stats", "check-config"])
def test_a_database_password_with_a_slash_is_never_printed(tmp_path, command):
    """Before: the user-info rule stopped at the `/` and the password was not found in the
    URL, so `migrate` and `stats` printed `postgresql://cockpit:q8/Zx+Yw3k@…` in clear."""
    url = f"postgresql://cockpit:q8/Zx+Yw3k@127.0.0.1:{free_port()}/cockpit"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = cli(command, env=app_env(tmp_path, COCKPIT_DATABASE_URL=url), cwd=elsewhere)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "✗ database:" in said, said
    assert "q8/Zx" not in said and "Yw3k" not in said and "cockpit://" not in said
    assert "postgresql://***@127.0.0.1:" in said


@pytest.mark.parametrize("password", ["Sekr/etPw99", "Sekr?etPw99", "Sekr#etPw99"])
def test_a_base_url_password_with_a_slash_is_never_echoed(tmp_path, password):
    url = f"htp://alice:{password}@host/v1"
    done = cli("check-config", "--offline", env={"OPENAI_BASE_URL": url}, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "✗ OPENAI_BASE_URL: expected an http(s) URL" in said, said
    assert "etPw99" not in said and "Sekr" not in said


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "COCKPIT_CHAT_BASE_URL"])
def test_a_base_url_the_http_client_cannot_read_is_a_setting_to_change(tmp_path, variable):
    """Before: `check-config` stopped at `unexpected error (InvalidURL: Invalid port: 'Gw')`
    (a piece of the password) and `serve` started anyway."""
    url = "http://alice:Gw/Pass-0042@127.0.0.1:1/v1"
    expected = (
        f"✗ {variable}: not a URL the HTTP client can read (a port that is not a number, or a"
        " /, ? or # in the user name or password: write those %2F, %3F and %23)"
    )
    with socket.socket() as busy:  # serve stops before it listens either way
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        chat = {"COCKPIT_CHAT_MODEL": "qwen3:32b"} if variable.startswith("COCKPIT") else {}
        env = app_env(
            tmp_path,
            **{variable: url, "OPENAI_API_KEY": "oa-key-0123456789", **chat},
            COCKPIT_HOST="127.0.0.1",
            COCKPIT_PORT=str(busy.getsockname()[1]),
        )
        check = cli("check-config", env=env, cwd=tmp_path)
        serve = cli("serve", env=env, cwd=tmp_path)
    assert check.returncode == 2 and expected in marked(check.stdout), check.stdout + check.stderr
    assert serve.returncode == 2 and expected in marked(serve.stderr), serve.stderr
    for said in (check.stdout, check.stderr, serve.stdout, serve.stderr):
        assert "Gw" not in said and "Pass-0042" not in said and "unexpected" not in said
