"""`cockpit check-config` checks live (git, data directory, database and schema, each provider's
key and model, the App's JWT), and `cockpit serve` stops with one line per problem before it
starts, or prints one line once it listens. All through the CLI, from another folder."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.standin.github import GitHubStandin
from bot.standin.scripted import MODEL
from tests.serverproc import ServerProcess, free_port
from tests.tls import private_ca

SECRET = "webhook-secret-123"


async def cockpit(*args: str, env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def app_env(github: GitHubStandin, tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": SECRET,
        "GITHUB_API_URL": github.api_url,
        "COCKPIT_DATA_DIR": str(tmp_path / "data"),
        "COCKPIT_CLAUDE_MODEL": MODEL,
        "COCKPIT_CODEX_MODEL": MODEL,
    }


def problems(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("✗")]


def model_env() -> dict[str, str]:
    """The SDK variables the model stand-in fixtures of this test set."""
    keys = ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    return {k: os.environ[k] for k in keys if k in os.environ}


async def test_a_good_set_up_passes_every_live_check(
    github, tmp_path, anthropic_standin, openai_standin
):
    env = {**app_env(github, tmp_path), **model_env()}
    code, out, err = await cockpit("check-config", env=env, cwd=tmp_path)
    assert code == 0, out + err
    lines = out.splitlines()
    assert [line.split(":", 1)[0] for line in lines[:-1]] == [
        "✓ git",
        "✓ data directory",
        "✓ database",
        "✓ claude",
        "✓ codex",
        "✓ GitHub App",
    ]
    assert f"✓ claude: {MODEL} answers at {anthropic_standin.url}" in lines
    assert f"✓ GitHub App: {github.slug} (id {github.app_id}) answers at {github.api_url}" in lines
    assert lines[-1] == "configuration OK (6 checks)"
    assert github.private_key_pem not in out and SECRET not in out


async def test_a_missing_model_key_is_named_offline_and_live(github, tmp_path):
    """Before, check-config said "configuration OK" without any model key."""
    env = app_env(github, tmp_path)
    for args in (("--offline",), ()):
        code, out, _ = await cockpit("check-config", *args, env=env, cwd=tmp_path)
        assert code == 2
        assert (
            "✗ claude: ANTHROPIC_API_KEY is not set (COCKPIT_PROVIDER=claude reviews with it)"
            " → set ANTHROPIC_API_KEY in the environment or in ./cockpit.env"
        ) in out.splitlines()
        assert out.splitlines()[-1] == "1 problem(s) found."


async def test_another_apps_key_is_refused_by_github(github, tmp_path, anthropic_standin):
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    env = {**app_env(github, tmp_path), **model_env(), "GITHUB_PRIVATE_KEY": other.decode()}
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert code == 2
    assert (
        f"✗ GitHub App: {github.api_url} answered GET /app with HTTP 401 → GITHUB_APP_ID and the"
        " private key must belong to the same App (and GITHUB_API_URL to its GitHub)"
    ) in out.splitlines()


async def test_unreachable_github_and_models_are_run_time_problems(tmp_path):
    closed = f"http://127.0.0.1:{free_port()}"
    github = GitHubStandin()  # its key and id; nothing listens at `closed`
    env = {
        **app_env(github, tmp_path),
        "GITHUB_API_URL": closed,
        "ANTHROPIC_API_KEY": "sk-ant-x",
        "ANTHROPIC_BASE_URL": closed,
    }
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert code == 1  # nothing to change in the settings: something does not answer
    lines = out.splitlines()
    assert (
        f"✗ claude: cannot reach {closed} → check the network, or ANTHROPIC_BASE_URL if you set it"
    ) in lines
    assert any(line.startswith(f"✗ GitHub App: cannot reach {closed} (") for line in lines)


async def test_github_with_a_private_ca_named_in_cockpit_env(tmp_path, anthropic_standin):
    """SSL_CERT_FILE only in ./cockpit.env: it reaches the environment before aiohttp is
    imported (aiohttp reads it then), so GET /app over TLS trusts the private CA."""
    ca = private_ca(tmp_path / "ca")
    ghes = GitHubStandin()
    await ghes.start(enterprise=True, ssl_context=ca.server_context())
    try:
        folder = tmp_path / "here"
        folder.mkdir()
        (folder / "cockpit.env").write_text(f"SSL_CERT_FILE={ca.ca_file}\n")
        env = {**app_env(ghes, tmp_path), **model_env()}
        code, out, _ = await cockpit("check-config", env=env, cwd=folder)
        (folder / "cockpit.env").unlink()
        untrusted = await cockpit("check-config", env=env, cwd=folder)
    finally:
        await ghes.stop()
    assert code == 0, out
    assert f"✓ GitHub App: {ghes.slug} (id {ghes.app_id}) answers at {ghes.api_url}" in out
    assert untrusted[0] == 2
    assert (
        f"✗ GitHub App: the TLS certificate of {ghes.api_url} is not trusted → set SSL_CERT_FILE"
        " to the CA bundle that signed it (a GitHub Enterprise Server with a private CA)"
    ) in untrusted[1].splitlines()


# -- the database ---------------------------------------------------------------------------


async def test_postgres_that_does_not_answer_is_one_line(github, tmp_path, anthropic_standin):
    url = f"postgresql://cockpit:pg-pass-42@127.0.0.1:{free_port()}/cockpit"
    env = {**app_env(github, tmp_path), **model_env(), "COCKPIT_DATABASE_URL": url}
    code, out, _ = await cockpit("check-config", env=env, cwd=tmp_path)
    assert code == 1
    [line] = [line for line in out.splitlines() if line.startswith("✗ database")]
    assert line.startswith(
        f"✗ database: cannot connect to postgresql://***@127.0.0.1:{url.rsplit(':', 1)[1]}"
    )
    assert line.endswith(
        "→ is Postgres running and reachable from here? check the host and port"
        " in COCKPIT_DATABASE_URL"
    )
    assert "pg-pass-42" not in out


async def test_a_postgres_schema_behind_is_named_and_a_current_one_passes(
    github, tmp_path, anthropic_standin, pg_cluster
):
    from tests.conftest import TEMPLATE

    env = {**app_env(github, tmp_path), **model_env()}
    fresh = pg_cluster.create_database()
    code, out, _ = await cockpit(
        "check-config", env={**env, "COCKPIT_DATABASE_URL": fresh}, cwd=tmp_path
    )
    assert code == 2, out
    assert "has no recorded schema version" in out and "run `cockpit migrate` first" in out
    told = {**env, "COCKPIT_DATABASE_URL": fresh, "COCKPIT_MIGRATE_ON_START": "1"}
    code, out, _ = await cockpit("check-config", env=told, cwd=tmp_path)
    assert code == 0, out
    assert "`cockpit serve` applies the missing steps at start" in out
    current = pg_cluster.create_database(TEMPLATE)
    code, out, _ = await cockpit(
        "check-config", env={**env, "COCKPIT_DATABASE_URL": current}, cwd=tmp_path
    )
    assert code == 0, out
    assert "(current)" in next(line for line in out.splitlines() if "database" in line)


# -- serve -------------------------------------------------------------------------------------


async def test_serve_with_nothing_set_names_every_problem(tmp_path):
    env = {"PATH": os.environ["PATH"], "COCKPIT_PORT": "0"}
    code, out, err = await cockpit("serve", env=env, cwd=tmp_path)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[:3] == [
        "✗ GITHUB_APP_ID: not set",
        "✗ GITHUB_PRIVATE_KEY: not set (set it, or GITHUB_PRIVATE_KEY_PATH to a PEM file)",
        "✗ GITHUB_WEBHOOK_SECRET: not set; the server refuses unsigned webhooks",
    ]
    assert any(line.startswith("✗ claude: ANTHROPIC_API_KEY is not set") for line in lines)
    assert lines[-1] == (
        "cockpit serve: not started: 4 problem(s) above. Check the whole set-up with"
        " `cockpit check-config`; no GitHub App yet? `cockpit register` creates one and writes"
        " ./cockpit.env."
    )
    assert "Traceback" not in err


async def test_serve_with_postgres_down_says_so_in_one_line(github, tmp_path):
    """Before: 37 s, then a 60-line traceback. Now: the connection waits at most
    `bot.checks.PG_WAIT` (5 s) and the answer is one line."""
    url = f"postgresql://cockpit:pg-pass-42@127.0.0.1:{free_port()}/cockpit"
    env = {**app_env(github, tmp_path), "COCKPIT_DATABASE_URL": url, "COCKPIT_PORT": "0"}
    env["ANTHROPIC_API_KEY"] = "k"
    code, _, err = await cockpit("serve", env=env, cwd=tmp_path)
    assert code == 1
    problems = [line for line in err.splitlines() if line.startswith("✗")]
    assert len(problems) == 1 and problems[0].startswith("✗ database: cannot connect to")
    assert "Traceback" not in err and "pg-pass-42" not in err


async def test_serve_on_a_port_in_use_says_so_in_one_line(github, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {
            **app_env(github, tmp_path),
            "COCKPIT_HOST": "127.0.0.1",
            "COCKPIT_PORT": str(port),
            "ANTHROPIC_API_KEY": "k",
        }
        code, _, err = await cockpit("serve", env=env, cwd=tmp_path)
    assert code == 1
    assert problems(err)[0] == (
        f"✗ listen address: 127.0.0.1:{port} is in use by another program (another cockpit"
        " serve?) → stop that program, or choose another port: --port N or COCKPIT_PORT"
        " (--host / COCKPIT_HOST for the address)"
    )
    assert "Traceback" not in err


async def test_serve_with_an_unusable_data_dir_or_no_git(github, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**app_env(github, tmp_path), "COCKPIT_PORT": "0", "ANTHROPIC_API_KEY": "k"}
    code, _, err = await cockpit(
        "serve", env={**env, "COCKPIT_DATA_DIR": str(blocker / "data")}, cwd=tmp_path
    )
    assert code == 2
    assert problems(err)[0] == (
        f"✗ data directory: {blocker} is not a folder → set COCKPIT_DATA_DIR to a folder this"
        " user can write, or fix its permissions"
    )
    empty = tmp_path / "no-git-here"
    empty.mkdir()
    code, _, err = await cockpit("serve", env={**env, "PATH": str(empty)}, cwd=tmp_path)
    assert code == 2
    assert problems(err)[0].startswith("✗ git: git is not on PATH")
    code, _, err = await cockpit("demo", env={**env, "PATH": str(empty)}, cwd=tmp_path)
    assert code == 2 and err.startswith("cockpit demo: ✗ git: git is not on PATH")
    assert "Traceback" not in err


async def test_a_started_server_prints_one_line_about_itself(github, tmp_path):
    env = {**app_env(github, tmp_path), "ANTHROPIC_API_KEY": "k"}
    server = ServerProcess(env, tmp_path / "data", tmp_path / "serve.log")
    await server.start()
    server.terminate()
    from bot import __version__

    started = [
        line
        for line in (tmp_path / "serve.log").read_text().splitlines()
        if line.startswith("cockpit ")
    ]
    assert started == [
        f"cockpit {__version__} serving http://127.0.0.1:{server.port} · role all · reviewer"
        f" claude ({MODEL}) · data {tmp_path / 'data'} · database SQLite"
        f" {tmp_path / 'data' / 'cockpit.sqlite3'}"
    ]


async def test_the_start_line_names_a_chat_reviewers_model(github, tmp_path):
    env = {
        **app_env(github, tmp_path),
        "COCKPIT_PROVIDER": "chat",
        "COCKPIT_CHAT_BASE_URL": "http://127.0.0.1:9/v1",
        "COCKPIT_CHAT_MODEL": "qwen2.5-coder:32b",
    }
    server = ServerProcess(env, tmp_path / "data", tmp_path / "serve.log")
    await server.start()
    server.terminate()
    log = (tmp_path / "serve.log").read_text()
    assert "· reviewer chat (qwen2.5-coder:32b) ·" in log


async def test_passwords_in_the_sdk_urls_are_not_printed_and_words_keep_a_short_key(tmp_path):
    """The SDKs' base URLs were printed with their password; a short key (`erv`) was masked
    inside ordinary words (`server` → `s***er`)."""
    port = free_port()
    github = GitHubStandin()  # its key and id; nothing listens at the port
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    env = {
        **app_env(github, tmp_path),
        "GITHUB_API_URL": f"http://127.0.0.1:{port}",
        "ANTHROPIC_API_KEY": "ant-key-0123456789",
        "ANTHROPIC_BASE_URL": f"http://alice:Gw-Pass-0042@127.0.0.1:{port}",
        "OPENAI_API_KEY": "oa-key-0123456789",
        "OPENAI_BASE_URL": f"http://alice:Gw-Pass-0042@127.0.0.1:{port}/v1",
        "COCKPIT_CHAT_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "COCKPIT_CHAT_MODEL": "local-llama",
        "COCKPIT_CHAT_API_KEY": "erv",
        "COCKPIT_DATABASE_URL": f"postgresql://cockpit:pg-pass-42@127.0.0.1:{port}/cockpit",
    }
    code, out, err = await cockpit("check-config", env=env, cwd=folder)
    assert code != 0, out + err
    lines = out.splitlines()
    for provider, url, variable in (
        ("claude", f"http://***@127.0.0.1:{port}", "ANTHROPIC_BASE_URL"),
        ("codex", f"http://***@127.0.0.1:{port}/v1", "OPENAI_BASE_URL"),
    ):
        said = f"✗ {provider}: cannot reach {url} → check the network, or {variable} if you set it"
        assert said in lines
    [database] = [line for line in lines if line.startswith("✗ database")]
    assert database.startswith(f"✗ database: cannot connect to postgresql://***@127.0.0.1:{port}")
    assert 'connection to server at "127.0.0.1"' in database  # `erv` is a word of its own only
    assert any(line.startswith("✗ chat: COCKPIT_CHAT_BASE_URL: the chat server") for line in lines)

    serve = await cockpit("serve", env=env, cwd=folder)
    assert serve[0] != 0
    assert 'connection to server at "127.0.0.1"' in serve[2]
    for said in (out, err, *serve[1:]):
        assert "Gw-Pass-0042" not in said and "pg-pass-42" not in said and "***er" not in said
