"""A tool call cut short (`stop` during a slow tool, a killed server) never leaves the
conversation holding a call without its result: the real APIs refuse that (400), so every
later `ask` or `send-back` of the conversation would fail."""

from __future__ import annotations

import json
import os
import sqlite3

import aiohttp
import pytest

from bot.agents.loop import interrupted
from bot.standin.models import call, say
from bot.standin.scripted import scripted_reviewer
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.serverproc import ServerProcess
from tests.slowgit import slow_git
from tests.test_crash_recovery import server_env
from tests.test_sessions import PEOPLE, answers, bodies, rows, say_on_pr, world  # noqa: F401
from tests.world import build_world, comment_payload

pytestmark = pytest.mark.backends

HISTORY_ANSWER = "The history has one commit on top of main."


def asks_git_log(conversation):
    """Asked about the history, the model calls git_log, then answers from its result."""
    last = conversation.events[-1] if conversation.events else ("", "")
    if last[0] == "user" and "history" in conversation.last_user_text:
        return call("git_log", max_count=3)
    if last[0] == "result" and conversation.tool_calls[-1][0] == "git_log":
        return say(HISTORY_ANSWER)
    return scripted_reviewer(conversation)


def answered_calls(standin, request):
    """(tool, result) for each tool call a request carries, in order."""
    conversation = standin.normalise(request)
    return list(
        zip([n for n, _ in conversation.tool_calls], conversation.tool_results, strict=True)
    )


@pytest.mark.parametrize("who", ["codex critic", "claude reviewer"])
async def test_stop_during_a_slow_tool_then_ask_again(world, who, tmp_path, monkeypatch):  # noqa: F811
    slow = slow_git(tmp_path / "git")
    monkeypatch.setenv("PATH", f"{slow.bin_dir}{os.pathsep}{os.environ['PATH']}")
    standin = world.openai if who == "codex critic" else world.anthropic
    standin.policy = asks_git_log
    provider = "Codex" if who == "codex critic" else "Claude"
    if who == "codex critic":
        await say_on_pr(world, "/cockpit codex-review")
    before = len(answers(world, provider))

    await say_on_pr(world, "/cockpit ask what does the history say?", wait=False)
    await wait_for(slow.started.exists, timeout=30)  # git_log is running
    await say_on_pr(world, "/cockpit stop", wait=False)
    await wait_for(lambda: any("Stopped the running" in b for b in bodies(world)), timeout=30)
    slow.release()
    await world.wait_idle()
    stored = await rows(
        world,
        "SELECT m.content FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE s.provider = ? ORDER BY m.session_id, m.seq",
        (provider.lower(),),
    )
    assert any(interrupted() in r["content"] for r in stored)  # recorded as the turn stopped

    await say_on_pr(world, "/cockpit ask is F1 reachable?")
    assert len(answers(world, provider)) == before + 1
    assert "is F1 reachable?" in answers(world, provider)[-1]
    assert ("git_log", interrupted()) in [
        (name, json.loads(out)["error"] if out.startswith("{") else out)
        for name, out in answered_calls(standin, standin.requests[-1])
    ]
    statuses = {r["status"] for r in await rows(world, "SELECT status FROM sessions")}
    assert statuses == {"active"}  # no session failed


@pytest.mark.sqlite_only("reads the stopped server's SQLite file")
@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM past the shutdown grace"])
async def test_a_server_stopped_mid_tool_resumes_the_turn_with_the_call_answered(
    github, tmp_path, anthropic_standin, openai_standin, backend, stop
):
    pr = build_world(github, tmp_path, permissions=PEOPLE)
    slow = slow_git(tmp_path / "git")
    env = {
        **server_env(github),
        "PATH": f"{slow.bin_dir}{os.pathsep}{os.environ['PATH']}",
        "ANTHROPIC_BASE_URL": anthropic_standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "OPENAI_BASE_URL": f"{openai_standin.url}/v1",
        "OPENAI_API_KEY": "sk-test-openai-0123456789",
        "COCKPIT_SHUTDOWN_GRACE_SECONDS": "1",
    }
    data_dir = tmp_path / "data"

    def query(sql, args=()):
        with sqlite3.connect(data_dir / "cockpit.sqlite3") as conn:
            return conn.execute(sql, args).fetchall()

    async def post(session, url, event, data, delivery_id):
        body = json.dumps(data).encode()
        headers = deliveries.headers(event, body, WEBHOOK_SECRET, delivery_id)
        async with session.post(f"{url}/webhooks/github", data=body, headers=headers) as response:
            assert response.status == 202

    anthropic_standin.policy = asks_git_log
    server = ServerProcess(env, data_dir, tmp_path / "server.log")
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            await post(
                session, server.url, "pull_request", pr.pull_request_payload("opened"), "k-1"
            )
            await wait_for(lambda: query("SELECT state FROM reviews") == [("draft",)], timeout=30)
            await wait_for(lambda: "Draft ready" in pr.status_body(), timeout=30)
            data = comment_payload(pr, "/cockpit ask what does the history say?", comment_id=41)
            await post(session, server.url, "issue_comment", data, "k-2")
            await wait_for(slow.started.exists, timeout=30)  # git_log is running
            if stop == "SIGKILL":
                server.kill()
            else:
                server.terminate()  # running jobs are cancelled once the grace is over
    finally:
        server.kill()
    stored = [c for (c,) in query("SELECT content FROM messages ORDER BY seq")]
    if stop == "SIGKILL":  # no chance to record anything: the call is left unanswered
        assert "tool_use" in stored[-1] and not any(interrupted() in c for c in stored)
    else:  # the turn was cancelled when the grace ran out: it recorded the result
        assert interrupted() in stored[-1] and "tool_result" in stored[-1]

    slow.release()
    restarted = ServerProcess(env, data_dir, tmp_path / "server.log")
    await restarted.start()
    try:
        await wait_for(lambda: any(HISTORY_ANSWER in a for a in answers(pr, "Claude")), timeout=30)
    finally:
        restarted.terminate()
    contents = [c for (c,) in query("SELECT content FROM messages ORDER BY seq")]
    assert sum(interrupted() in c for c in contents) == 1  # stored once, before the resume
    assert ("git_log", interrupted()) in answered_calls(
        anthropic_standin, anthropic_standin.requests[-1]
    )
    assert query("SELECT status FROM sessions WHERE role = 'primary'") == [("active",)]
