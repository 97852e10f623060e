"""The product run the way its users run it: the real commands started from a folder of their
own, with every default left as shipped (no COCKPIT_DATA_DIR: the data goes to `./data`)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from bot.standin.models import AnthropicStandin
from bot.standin.scripted import scripted_reviewer
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.world import build_world

ROOT = Path(__file__).resolve().parent.parent
PLANTED_DIR = ROOT / "eval" / "golden" / "planted"
KEEP = ("PATH", "HOME", "LANG")


@pytest.fixture
async def model():
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    yield standin
    await standin.stop()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """Where the user is when they type the command: empty, nothing configured."""
    where = tmp_path / "where-the-user-is"
    where.mkdir()
    return where


async def test_serve_from_a_folder_with_the_default_data_dir_prepares_a_draft(
    tmp_path, folder, github, model
):
    """`COCKPIT_DATA_DIR` defaults to `./data`: the mirror was cloned into a path relative to
    the wrong folder, so every review failed (FileNotFoundError, then 'already exists')."""
    world = build_world(github, tmp_path)
    env = {
        "GITHUB_APP_ID": github.app_id,
        "GITHUB_PRIVATE_KEY": github.private_key_pem,
        "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "GITHUB_API_URL": github.url,
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
    }
    server = ServerProcess(env, None, tmp_path / "server.log", cwd=folder)
    assert "COCKPIT_DATA_DIR" not in server.env
    await server.start()
    try:
        body = json.dumps(world.pull_request_payload("opened")).encode()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{server.url}/webhooks/github",
                data=body,
                headers=deliveries.headers("pull_request", body, WEBHOOK_SECRET, "d-1"),
            ) as response,
        ):
            assert response.status == 202

        def settled() -> bool:
            comments = github.status_comments(world.full_name, world.pr.number)
            return bool(world.pending_reviews()) or any("❌" in c["body"] for c in comments)

        await wait_for(settled, timeout=60)
        # Stopped as an operator stops it, while the stand-ins (on this loop) keep answering
        # whatever the review still has to tell GitHub.
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(server.proc.wait, 60)
    finally:
        server.kill()
    assert "❌" not in world.status_body()
    [pending] = world.pending_reviews()
    assert pending["commit_id"] == world.pr.head_sha and pending["comments"]
    data = folder / "data"
    assert (data / "cockpit.sqlite3").is_file()
    assert (data / "mirrors" / "octo" / "widgets.git" / "HEAD").is_file()
    assert not (data / "mirrors" / "octo" / "data").exists()  # nothing nested in the mirrors
    assert server.proc is not None and server.proc.returncode == 0


async def run_cockpit(args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    return proc.returncode, out.decode()


async def test_eval_run_from_a_folder_with_defaults_runs_every_planted_case(
    folder, anthropic_standin
):
    """The shipped planted set, named relative to the folder, with the default data folder:
    before, all 7 cases FAILED (the eval's mirrors had the serve's relative-path fault)."""
    shutil.copytree(PLANTED_DIR, folder / "eval" / "golden" / "planted")
    env = {
        **{k: v for k, v in os.environ.items() if k in KEEP},
        "ANTHROPIC_BASE_URL": anthropic_standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
    }
    code, out = await run_cockpit(
        ["eval", "run", "--golden", "eval/golden/planted/planted.json"], env, folder
    )
    assert code == 0, out
    assert "[7/7]" in out and "FAILED" not in out
    assert (folder / "data" / "cockpit.sqlite3").is_file()
    assert len(list((folder / "eval" / "reports").glob("*.md"))) == 1


async def test_eval_offline_as_the_readme_writes_it_runs_with_a_python_outside_the_venv(folder):
    """`python scripts/eval_offline.py` with a Python that lacks the project's packages (the
    system's, outside the venv) used to fail at its first import: it runs again with the
    project's venv, from whatever folder the user is in."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "eval_offline.py"
    outside = Path(sys.base_prefix) / "bin" / "python3"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = await asyncio.create_subprocess_exec(
        str(outside),
        str(script),
        "--help",
        cwd=folder,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    assert out.decode().startswith("usage: cockpit eval run")


async def run_shell(command: str, cwd: Path) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = await asyncio.create_subprocess_shell(
        command,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode()


async def test_the_offline_eval_keeps_its_runs_and_resumes_as_its_report_says(folder):
    """The offline script used to review into a temporary folder it deleted at the end, while
    its report said to `--resume` against that folder (with `cockpit eval run`, which has no
    stand-in models). Its runs are kept, and the command the report names works as printed."""
    script = ROOT / "scripts" / "eval_offline.py"
    code, out = await run_shell(f"{sys.executable} {script}", folder)
    assert code == 0, out
    [report] = (folder / "eval" / "reports").glob("eval-*-run1.md")
    hint = re.search(r"run again or re-score with `([^`]+)`", report.read_text())
    assert hint, report.read_text()[:600]
    data = folder / "eval" / "offline-data"
    assert hint.group(1) == f"COCKPIT_DATA_DIR={data} python3 {script} --resume 1"
    assert (data / "cockpit.sqlite3").is_file()  # kept: the hint finds the run
    assert f"Resume with: {hint.group(1)}" in out  # the run's first line says the same
    code, again = await run_shell(hint.group(1), folder)
    assert code == 0, again
    assert "eval run 1 (resumed)" in again and "FAILED" not in again
    assert len(list((folder / "eval" / "reports").glob("eval-*-run1*.md"))) == 2
