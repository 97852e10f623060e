"""COCKPIT_PROVIDER=chat end to end, through the real server app, the GitHub stand-in and the
Chat Completions stand-in (the real openai SDK): a draft, a cross-AI critique, the verify
pass and the approval, all on a local model's server, with each known server quirk
switched on in turn; and `chat` chosen beside claude where the commands and the
repository's config choose a provider."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from bot.config import Secret
from bot.server import make_app
from bot.standin.models import VLLM_AUTO_TOOLS, broken
from handlers import router
from tests.models import chat_settings
from tests.test_sessions import answers, bodies, rows, say_on_pr
from tests.test_verify import HEAD
from tests.world import build_world

LOCAL_MODEL = "local-llama"  # not in rates.json: its cost is unknown, never $0
CONFIG = {".github/cockpit.toml": "verify = true\n"}
SURVIVED = [
    None,
    "no_tool_choice",
    "no_parallel_tool_calls",
    "malformed_arguments",
    "text_instead_of_tool",
    "no_usage",
    "max_completion_tokens_only",
    "no_system_role",
]


@pytest.fixture
def no_hosted_keys(monkeypatch):
    """Only the chat provider is configured here (a shop with local models only)."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


async def chat_world(github, settings, tmp_path, aiohttp_client, standin, **chat_options):
    standin.models = (LOCAL_MODEL,)
    chat = chat_settings(standin, LOCAL_MODEL, **chat_options)
    settings = dataclasses.replace(settings, provider="chat", chat=chat)
    world = build_world(github, tmp_path, head=HEAD, files=CONFIG, permissions={"octocat": "admin"})
    world.client = await aiohttp_client(make_app(settings, router))
    world.chat = standin
    return world


@pytest.mark.parametrize("quirk", SURVIVED)
async def test_a_local_model_drafts_critiques_verifies_and_the_draft_is_approved(
    github, settings, tmp_path, aiohttp_client, chat_standin, no_hosted_keys, quirk
):
    chat_standin.quirks = {quirk} if quirk else set()
    # max_completion_tokens_only needs a cap to be sent: the context size is known then
    options = {"context_tokens": 64_000} if quirk == "max_completion_tokens_only" else {}
    world = await chat_world(github, settings, tmp_path, aiohttp_client, chat_standin, **options)

    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert (review["provider"], review["verify_provider"]) == ("chat", "chat")
    assert review["verify_error"] is None
    findings = await rows(world, "SELECT title, verify_status FROM findings ORDER BY ordinal")
    verdicts = {f["title"]: f["verify_status"] for f in findings}
    assert verdicts == {
        "eval() runs untrusted input": "confirmed",
        "Hard-coded credential": "refuted",  # test code, read and refuted by the verifier
    }
    status = world.status_body()
    assert "✓ confirmed by chat" in status and "✗ refuted by chat" in status

    started = await say_on_pr(world, "/cockpit codex-review")  # the only provider: chat
    [critique] = answers(world, "Chat")
    assert f"Chat (`{LOCAL_MODEL}`)" in critique and "F1" in critique
    [link] = await rows(world, "SELECT * FROM session_reviews")
    assert link["child_adapter"] == "chat" and link["anchor_comment_id"] == started

    await say_on_pr(world, "/cockpit send-back")
    [review] = await world.review_rows()
    assert review["state"] == "draft" and review["revision"] == 2
    assert any("revised the draft after Chat" in b for b in bodies(world))

    await say_on_pr(world, "/cockpit approve")
    [review] = await world.review_rows()
    assert review["state"] == "posted"
    [published] = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert [c["path"] for c in published["comments"]] == ["calc.py"]

    runs = await rows(world, "SELECT kind, subkind, provider, model, status, cost_usd FROM runs")
    assert {r["provider"] for r in runs} == {"chat"} and {r["model"] for r in runs} == {LOCAL_MODEL}
    kinds = sorted((r["kind"], r["subkind"] or "") for r in runs)
    assert kinds == [
        ("review", ""),  # the draft
        ("review", "revision"),  # after send-back (its findings kept their verdicts)
        ("review", "verify"),  # one verify session per finding (two)
        ("review", "verify"),
        ("session", "critique"),
    ]
    assert all(r["status"] == "done" and r["cost_usd"] is None for r in runs)
    usage = await rows(world, "SELECT input_tokens, output_tokens, cost_usd FROM run_usage")
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage)
    assert all(u["cost_usd"] is None for u in usage)
    assert re.search(r"chat: \d+ model run\(s\), unknown", world.status_body())
    assert world.chat.rejected == [] and world.github.violations == []
    if quirk in ("no_tool_choice", "no_parallel_tool_calls", None):
        assert world.chat.refused == []  # nothing it refuses was sent
    for request in world.chat.requests:
        assert "tool_choice" not in request and "parallel_tool_calls" not in request


async def test_vllm_without_auto_tool_choice_fails_the_review_saying_how_to_start_it(
    github, settings, tmp_path, aiohttp_client, chat_standin, no_hosted_keys
):
    chat_standin.quirks = {"vllm_no_auto_tool_choice"}
    world = await chat_world(github, settings, tmp_path, aiohttp_client, chat_standin)
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("failed")
    assert "--enable-auto-tool-choice" in review["error"]
    assert "--tool-call-parser" in review["error"] and VLLM_AUTO_TOOLS in review["error"]
    status = world.status_body()
    assert "failed" in status and "--enable-auto-tool-choice and --tool-call-parser" in status
    assert len(world.chat.requests) == 1  # not retried: a restart of the server is needed


async def test_chat_is_chosen_beside_claude_by_command_and_by_the_repositorys_config(
    github, settings, tmp_path, aiohttp_client, chat_standin, anthropic_standin, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat_standin.models = (LOCAL_MODEL,)
    chat_standin.api_key = "litellm-master-key"  # a gateway with a key
    chat = chat_settings(
        chat_standin, LOCAL_MODEL, api_key=Secret("litellm-master-key"), rates=(1.0, 4.0)
    )
    settings = dataclasses.replace(settings, chat=chat)  # the reviewer stays claude
    config = {".github/cockpit.toml": 'verify = true\nverify_provider = "chat"\n'}
    world = build_world(github, tmp_path, head=HEAD, files=config, permissions={"octocat": "admin"})
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert (review["provider"], review["verify_provider"]) == ("claude", "chat")

    await say_on_pr(world, "/cockpit codex-review --with chat look at the credential")
    [critique] = answers(world, "Chat")
    assert "look at the credential" in chat_standin.requests[-1]["messages"][1]["content"]
    assert critique
    await say_on_pr(world, "/cockpit review --provider chat")
    review = await world.wait_review("draft", index=1)
    assert (review["provider"], review["verify_provider"]) == ("chat", "chat")
    assert all(h.get("Authorization") == "Bearer litellm-master-key" for h in chat_standin.headers)

    runs = await rows(world, "SELECT provider, cost_usd FROM runs WHERE provider = 'chat'")
    # verify of claude's two findings, the critique, chat's review and its two verifications
    # (one verify session per finding)
    assert len(runs) == 6 and all(r["cost_usd"] > 0 for r in runs)  # COCKPIT_CHAT_RATES
    assert re.search(r"chat: \d+ model run\(s\), \$0\.\d{4}", world.status_body())


async def test_a_repository_may_choose_chat_as_its_reviewer(
    github, settings, tmp_path, aiohttp_client, chat_standin, anthropic_standin
):
    chat_standin.models = (LOCAL_MODEL,)
    settings = dataclasses.replace(settings, chat=chat_settings(chat_standin, LOCAL_MODEL))
    config = {".github/cockpit.toml": 'provider = "chat"\n'}
    world = build_world(github, tmp_path, head=HEAD, files=config, permissions={"octocat": "admin"})
    world.client = await aiohttp_client(make_app(settings, router))
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("draft")
    assert review["provider"] == "chat" and anthropic_standin.requests == []
    await say_on_pr(world, "/cockpit codex-review")  # the other provider of a chat draft
    [link] = await rows(world, "SELECT child_adapter FROM session_reviews")
    assert link["child_adapter"] == "claude"


def _answer(message: dict, **rest) -> str:
    return json.dumps({"choices": [{"index": 0, "message": message}], **rest})


MALFORMED = {
    "plain text": (
        broken("upstream connect error or disconnect/reset before headers", "text/plain"),
        'it sent text/plain, not JSON: "upstream connect error or disconnect/reset before',
    ),
    "a stream": (
        broken(
            'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n',
            "text/event-stream",
        ),
        'it sent an event stream, though none was asked for: "data: {',
    ),
    "a choice without a message": (
        broken('{"choices":[{}]}'),
        'its first choice has no message: "{"choices":[{}]}"',
    ),
    "a numeric content": (
        broken(_answer({"role": "assistant", "content": 42})),
        "the message's content is a number (42), not text",
    ),
    "a text token count": (
        broken(
            _answer(
                {"role": "assistant", "content": "done"},
                usage={"prompt_tokens": "1200", "completion_tokens": 30},
            )
        ),
        'usage.prompt_tokens is text ("1200"), not a count of tokens',
    ),
    "JSON nested past Python's recursion limit": (  # was run_failed (RecursionError)
        broken("[" * 100_000 + "]" * 100_000),
        'it sent application/json, not JSON: "[[[[',
    ),
    "a content part whose text is a number": (  # was read as no text at all
        broken(_answer({"role": "assistant", "content": [{"type": "text", "text": 42}]})),
        "a content part's text is a number (42), not text",
    ),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
async def test_a_malformed_answer_fails_the_review_saying_what_the_server_sent(
    github, settings, tmp_path, aiohttp_client, chat_standin, no_hosted_keys, kind
):
    answer, said = MALFORMED[kind]
    chat_standin.policy = lambda conversation: answer
    world = await chat_world(github, settings, tmp_path, aiohttp_client, chat_standin)
    await world.send("pull_request", world.pull_request_payload("opened"))
    review = await world.wait_review("failed")
    error = review["error"]
    assert error.startswith("the chat server's answer is not a Chat Completions answer: ")
    assert said in error and "\n" not in error
    assert not re.search(r"object has no attribute|Error\b|Traceback", error)
    assert said in world.status_body().replace("\u2060", "")
    assert len(world.chat.requests) == 1  # not retried: the server answers the same again
