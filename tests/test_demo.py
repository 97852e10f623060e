"""`cockpit demo` runs offline: the draft, a cross-AI round, the published review; it leaves
nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs_offline_end_to_end(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["TMPDIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "bot", "demo"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "delivery pull_request.opened → HTTP 202" in out
    assert "<!-- pr-cockpit:status -->" in out and "Draft ready" in out
    assert "| F1 | critical |" in out and "| F5 | nit |" in out
    assert "### 🔁 Codex" in out and "F5: refute" in out  # the critique, as a PR comment
    assert "Revision 2" in out and "withdrawn F5" in out and "(withdrawn by claude)" in out
    assert "state: CHANGES_REQUESTED" in out and "inline on app/db.py:7 (RIGHT)" in out
    assert "F5 · nit" not in out.split("published review", 1)[1]  # withdrawn: not published
    assert "reactions on the approve comment: eyes, rocket" in out
    assert "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # its temporary folder is gone


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
    assert "### 🔁 Chat (`scripted-reviewer`)" in out and "F5: refute" in out
    assert "revised by claude after chat's critique" in out and "withdrawn F5" in out
    assert "state: CHANGES_REQUESTED" in out
    assert list(tmp_path.iterdir()) == []
