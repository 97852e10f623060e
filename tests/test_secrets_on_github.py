"""What a model server says reaches the PR redacted: a gateway that echoes the caller's key
and names its upstream with a password in a 400 fails the review with its words quoted, but
neither the key nor the password is on the status comment, the check run, in the database or
in the logs; for each provider (claude through the anthropic SDK, codex through the openai
SDK, chat)."""

from __future__ import annotations

import dataclasses

import pytest

from bot.config import Secret
from bot.logs import JsonFormatter
from bot.redaction import MASK
from bot.server import make_app
from bot.standin.models import call, fail
from handlers import router
from tests.models import Scripted, chat_settings
from tests.world import build_world

KEY = "gw-key-7f3a9c2e"  # no known token shape: only the configuration says it is a key
PASSWORD = "Gw-Pass-0042"
SAID = f"key {{key}} may not use tools (upstream http://alice:{PASSWORD}@10.1.2.3/v1)"
SHOWN = "key *** may not use tools (upstream http://***@10.1.2.3/v1)"


@pytest.mark.parametrize("provider", ["claude", "codex", "chat"])
async def test_a_gateways_words_reach_the_pr_without_its_key_or_password(
    github,
    settings,
    tmp_path,
    aiohttp_client,
    monkeypatch,
    caplog,
    anthropic_standin,
    openai_standin,
    chat_standin,
    provider,
):
    standin = {"claude": anthropic_standin, "codex": openai_standin, "chat": chat_standin}[provider]
    standin.policy = lambda conversation: fail(400, "invalid_request_error", message=SAID)
    settings = dataclasses.replace(settings, provider=provider)
    if provider == "chat":
        chat_standin.api_key = KEY
        settings = dataclasses.replace(settings, chat=chat_settings(standin, api_key=Secret(KEY)))
    else:
        monkeypatch.setenv("ANTHROPIC_API_KEY" if provider == "claude" else "OPENAI_API_KEY", KEY)
    world = build_world(github, tmp_path)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("failed")

    assert standin.headers[-1]["Authorization"] == f"Bearer {KEY}"  # the key was sent
    status = world.status_body()
    [check] = world.github.check_runs.values()
    shown = [status, check["output"]["summary"], check["output"]["title"], review["error"]]
    joined = [text.replace("\u2060", "") for text in shown]  # links are broken for display
    assert SHOWN in joined[0] and SHOWN in joined[1] and SHOWN in review["error"]
    runs = await world.ctx.db.fetchall("SELECT error FROM runs")
    logged = [JsonFormatter().format(record) for record in caplog.records]
    assert any("review failed" in line for line in logged)
    for text in [*joined, *(r["error"] or "" for r in runs), *logged]:
        assert KEY not in text and PASSWORD not in text


async def test_a_local_servers_dummy_key_leaves_the_words_it_spells_alone(
    github, settings, tmp_path, aiohttp_client, chat_standin
):
    """Before: with the key `test` (as local servers take), "add a test for this" became
    "add a *** for this" on the status comment and the check run."""
    chat_standin.api_key = "test"
    said = "Nothing checks parse(); add a test for this."
    found = {"path": "calc.py", "line": 2, "severity": "major", "title": said, "body": said,
             "evidence": said, "confidence": 80}  # fmt: skip
    chat_standin.policy = Scripted(
        call("git_diff"), call("submit_review", summary=said, verdict="comment", findings=[found])
    )
    chat = chat_settings(chat_standin, api_key=Secret("test"))
    settings = dataclasses.replace(settings, provider="chat", chat=chat)
    world = build_world(github, tmp_path)
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")

    assert chat_standin.headers[-1]["Authorization"] == "Bearer test"  # the key was sent
    [check] = world.github.check_runs.values()
    [annotation] = check["annotations"]
    assert said in annotation["title"] and said in annotation["message"]
    assert said in world.status_body().replace("\u2060", "")
    assert MASK not in annotation["message"] + check["output"]["summary"]
