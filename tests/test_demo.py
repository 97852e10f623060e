"""`cockpit demo` runs offline: the draft with its verify pass, a cross-AI round, the published
review; model keys in the shell change nothing; it leaves nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

import pytest


def run_demo(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", "demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def clean_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["TMPDIR"] = str(tmp_path)
    return env


def test_demo_runs_offline_end_to_end(tmp_path):
    result = run_demo(clean_env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "offline scripted models" in out.splitlines()[0]
    assert "delivery pull_request.opened → HTTP 202" in out
    assert "<!-- pr-cockpit:status -->" in out and "Draft ready" in out
    assert "Found 6 issue(s) in the added code; the most serious is critical." in out
    assert "| F1 | critical |" in out and "| F6 | nit |" in out
    # The verify pass: confirmed findings, and the test fixture's token refuted.
    assert "| eval() runs untrusted input | ✓ confirmed by codex |" in out
    assert "| Hard-coded credential | ✗ refuted by codex: tests/test_db.py:1 is test code" in out
    assert "The verify column: " in out
    assert "### 🔁 Codex" in out and "F6: refute" in out  # the critique, as a PR comment
    assert "Revision 2" in out and "withdrawn F6" in out and "(withdrawn by claude)" in out
    assert "state: CHANGES_REQUESTED" in out and "inline on app/db.py:7 (RIGHT)" in out
    published = out.split("published review", 1)[1]
    assert "F6 · nit" not in published  # withdrawn: not published
    assert "tests/test_db.py" not in published  # refuted: left out of approve
    assert "reactions on the approve comment: eyes, rocket" in out
    assert "s (wall time since the command started, on this machine)" in out
    assert "`cockpit review-local`" in out and "`cockpit register`" in out  # what next
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # its temporary folder is gone


class Trap:
    """A proxy that records every connection and answers none: with HTTPS_PROXY pointing
    here, any request meant for the internet shows up in `connections`."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.connections.append(conn.recv(4096))
                except OSError:
                    self.connections.append(b"")

    def close(self) -> None:
        self.sock.close()


def test_model_keys_in_the_shell_do_not_leave_the_demo_offline(tmp_path):
    """Keys set (to junk) and no base URLs: before, the demo called the real APIs with them."""
    trap = Trap()
    try:
        env = {
            **clean_env(tmp_path),
            "ANTHROPIC_API_KEY": "sk-ant-junk-not-a-key",
            "ANTHROPIC_AUTH_TOKEN": "junk-token",
            "OPENAI_API_KEY": "sk-junk-not-a-key",
            **{name: trap.url for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")},
            **{name: trap.url for name in ("https_proxy", "http_proxy", "all_proxy")},
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        result = run_demo(env)
    finally:
        trap.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "offline scripted models" in result.stdout
    assert trap.connections == []  # nothing left loopback


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({}, "ANTHROPIC_API_KEY and OPENAI_API_KEY are not set"),
        ({"ANTHROPIC_API_KEY": "sk-ant-x"}, "OPENAI_API_KEY is not set"),
    ],
)
def test_live_needs_both_keys_and_says_so(tmp_path, keys, named):
    result = run_demo({**clean_env(tmp_path), **keys}, "--live")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"cockpit demo --live: {named}; the live demo reviews with Claude and cross-checks"
        f" with Codex. Set {'them' if ' and ' in named else 'it'}, or run `cockpit demo`"
        " (offline)."
    ]


def test_the_demos_critic_can_be_a_local_model_behind_a_chat_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["TMPDIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "bot", "demo", "--critic", "chat"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "reviewed by Claude (scripted-reviewer), cross-checked by Chat" in out
    assert '"/cockpit codex-review --with chat"' in out
    assert "### 🔁 Chat (`scripted-reviewer`)" in out and "F6: refute" in out
    assert "revised by claude after chat's critique" in out and "withdrawn F6" in out
    assert "state: CHANGES_REQUESTED" in out
    assert list(tmp_path.iterdir()) == []


DEV_ONLY = ("graphql", "jsonschema", "hypothesis", "cmarkgfm", "kubernetes_validate", "pytest")


def test_the_demo_runs_without_the_test_only_packages(tmp_path):
    """What a wheel install has: none of `[dev]`'s packages. Before: the GitHub stand-in's
    review routes imported the GraphQL stand-in at the top, which needs graphql-core, and
    `cockpit demo` from the wheel failed with ModuleNotFoundError (only `.ci/run`'s wheel
    check saw it)."""
    hide = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in DEV_ONLY)
    done = subprocess.run(
        [sys.executable, "-c", hide + "from bot.cli import main\nsys.exit(main(['demo']))"],
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "unexpected error" not in done.stderr
