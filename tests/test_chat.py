"""The `chat` provider through the official openai SDK against the Chat Completions stand-in:
the tool loop, the known quirks of real servers (each switched on alone), what a refusal
tells the operator, context trimming, usage and cost, the key (or none), the probe."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from bot.agents.base import AgentError, Budget
from bot.agents.chat import ChatProvider
from bot.agents.loop import AgentRun
from bot.agents.providers import ModelClients, probe
from bot.agents.toolbox import Toolbox
from bot.config import ChatSettings, Secret, Settings
from bot.records.messages import load_messages
from bot.records.sessions import create_session
from bot.records.sqlite import SqliteDatabase
from bot.skills import load_skill
from bot.standin.models import VLLM_AUTO_TOOLS, Action, call
from bot.standin.repo import make_pr
from bot.worktrees import Mirrors
from tests.models import Scripted, chat_settings

BIG = "".join(f"VALUE_{n:03d} = {n}  # a long line of the module, {n} of 400\n" for n in range(400))
BASE = {"calc.py": "def parse(text):\n    return int(text)\n", "big.py": BIG}
HEAD = {"calc.py": "def parse(text):\n    return eval(text)\n", "big.py": BIG}


@pytest.fixture
async def env(tmp_path, chat_standin, monkeypatch):
    for name in ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.setenv(name, "org-not-for-this-server")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-codex-key-0123456789")
    pr = make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=1)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("o/r", pr.clone_url, ["refs/heads/main", "refs/pull/1/head"])
    tree = await mirrors.add_worktree(
        "o/r", name="a", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    db = await SqliteDatabase.open(tmp_path / "db.sqlite3")
    env = {"db": db, "tree": tree, "standin": chat_standin, "tmp": tmp_path}
    env["clients"] = clients(env)
    yield env
    await env["clients"].close()
    await db.close()


def clients(env, **options) -> ModelClients:
    chat = chat_settings(env["standin"], **options)
    return ModelClients(Settings(data_dir=env["tmp"], chat=chat))


async def run_chat(env, *, model=None, session=None, budget=None, models=None):
    db = env["db"]
    provider = (models or env["clients"]).provider("chat", model)
    skill = await load_skill(db)
    session = session or await create_session(db, provider=provider.name, model=provider.model)
    run = AgentRun(
        db=db,
        provider=provider,
        session=session,
        toolbox=Toolbox(env["tree"]),
        system=skill.text,
        kind="review",
        budget=budget or Budget(),
        skill_version_id=skill.id,
    )
    return run


async def test_the_model_explores_with_tools_then_submits(env):
    run = await run_chat(env)
    result = await run.turn("Review this pull request.")
    assert [f.title for f in result.draft.findings] == ["eval() runs untrusted input"]
    standin = env["standin"]
    first = standin.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "read_file",
        "list_files",
        "search_code",
        "git_diff",
        "git_log",
        "submit_review",
    ]
    assert first["messages"][0]["role"] == "system"
    assert "tool_choice" not in first and "parallel_tool_calls" not in first
    assert "max_tokens" not in first  # the context size is unknown: the server's own cap
    stored = await load_messages(env["db"], run.session.id)
    roles = [m["role"] for m in stored]
    assert roles[:4] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["function"]["name"] == "git_diff"
    assert stored[2]["tool_call_id"] == stored[1]["tool_calls"][0]["id"]


async def test_no_key_sends_no_authorization_and_never_the_openai_key(env):
    await (await run_chat(env)).turn("Review.")
    for headers in env["standin"].headers:
        assert "Authorization" not in headers
        assert "OpenAI-Organization" not in headers and "OpenAI-Project" not in headers


async def test_a_key_is_sent_as_a_bearer_token_and_a_wrong_one_says_which_variable(env):
    env["standin"].api_key = "vllm-key-123"
    keyed = clients(env, api_key=Secret("vllm-key-123"))
    await (await run_chat(env, models=keyed)).turn("Review.")
    assert env["standin"].headers[-1]["Authorization"] == "Bearer vllm-key-123"
    wrong = clients(env, api_key=Secret("not-the-key"))
    with pytest.raises(AgentError, match="COCKPIT_CHAT_API_KEY") as raised:
        await (await run_chat(env, models=wrong)).turn("Review.")
    assert "not-the-key" not in str(raised.value)
    await keyed.close()
    await wrong.close()


async def test_a_server_that_refuses_tool_choice_and_parallel_calls_is_never_sent_them(env):
    env["standin"].quirks = {"no_tool_choice", "no_parallel_tool_calls"}
    env["standin"].policy = Scripted(
        Action(tools=[("git_diff", {}), ("list_files", {})]),  # served one at a time
        call("read_file", path="calc.py"),
        call("submit_review", summary="ok", verdict="comment", findings=[]),
    )
    result = await (await run_chat(env)).turn("Review.")
    assert result.draft is not None and result.tool_calls == 2
    assert env["standin"].refused == []


async def test_unreadable_tool_arguments_get_one_corrective_turn(env):
    env["standin"].quirks = {"malformed_arguments"}
    run = await run_chat(env)
    assert (await run.turn("Review.")).draft is not None
    stored = await load_messages(env["db"], run.session.id)
    corrected = next(m for m in stored if m["role"] == "tool")
    assert "not a JSON object" in corrected["content"]
    assert "Call git_diff again" in corrected["content"]
    # the broken arguments are kept as the model sent them, and resent as `{}`
    assert stored[1]["tool_calls"][0]["function"]["arguments"] == "{"
    assert env["standin"].requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == (
        "{}"
    )


async def test_unreadable_tool_arguments_twice_in_a_row_fail_clearly(env):
    env["standin"].quirks = {"malformed_arguments_always"}
    run = await run_chat(env)
    with pytest.raises(AgentError, match="not a JSON object again, after being told once"):
        await run.turn("Review.")
    row = await env["db"].fetchone("SELECT status, error FROM runs")
    assert row["status"] == "failed" and "not a JSON object" in row["error"]


async def test_a_final_answer_given_as_text_gets_the_nudge(env):
    env["standin"].quirks = {"text_instead_of_tool"}
    result = await (await run_chat(env)).turn("Review.")
    assert result.draft is not None
    texts = env["standin"].normalise(env["standin"].requests[-1]).user_texts
    assert texts[-1].startswith("You ended your turn without calling submit_review")


async def test_vllm_without_auto_tool_choice_says_which_flags_to_start_it_with(env, caplog):
    env["standin"].quirks = {"vllm_no_auto_tool_choice"}
    run = await run_chat(env)
    with caplog.at_level(logging.WARNING), pytest.raises(AgentError) as raised:
        await run.turn("Review.")
    message = str(raised.value)
    assert "--enable-auto-tool-choice" in message and "--tool-call-parser" in message
    assert VLLM_AUTO_TOOLS in message  # what the server said, quoted
    row = await env["db"].fetchone("SELECT status, error FROM runs")
    assert row["status"] == "failed" and row["error"] == message
    assert any(VLLM_AUTO_TOOLS in str(r.__dict__.get("fields")) for r in caplog.records)
    assert len(env["standin"].requests) == 1  # not retried: it cannot succeed


async def test_a_reasoning_model_that_refuses_max_tokens_gets_max_completion_tokens(env):
    env["standin"].quirks = {"max_completion_tokens_only"}
    models = clients(env, context_tokens=32_000)
    assert (await (await run_chat(env, models=models)).turn("Review.")).draft is not None
    sent = env["standin"].requests
    assert "max_tokens" in sent[0] and sent[1]["max_completion_tokens"] == 8000
    assert all("max_tokens" not in r for r in sent[1:])
    assert len(env["standin"].refused) == 1  # learned once for the process
    await models.close()


async def test_a_template_without_a_system_role_gets_the_prompt_in_the_first_message(env):
    env["standin"].quirks = {"no_system_role"}
    assert (await (await run_chat(env)).turn("Review this.")).draft is not None
    later = env["standin"].requests[-1]["messages"]
    first = later[0]["content"]  # the task, then what the model may spend on it
    assert later[0]["role"] == "user" and "Review this.\n\n[budget left: 40 of 40" in first
    assert "review" in first.split("Review this.")[0].lower()  # the prompt


async def test_a_server_without_usage_records_estimated_tokens(env, caplog):
    env["standin"].quirks = {"no_usage"}
    with caplog.at_level(logging.WARNING):
        result = await (await run_chat(env)).turn("Review.")
    usage = await env["db"].fetchone(
        "SELECT input_tokens, output_tokens FROM run_usage WHERE run_id = ?", (result.run_id,)
    )
    assert usage["input_tokens"] > 1000 and usage["output_tokens"] > 0
    assert sum("no usage" in r.getMessage() for r in caplog.records) == 1


async def test_an_unknown_models_cost_is_null_and_a_configured_rate_gives_dollars(env):
    env["standin"].models = ("qwen3:32b",)
    unpriced = clients(env, model="qwen3:32b")
    result = await (await run_chat(env, models=unpriced)).turn("Review.")
    row = await env["db"].fetchone("SELECT cost_usd FROM runs WHERE id = ?", (result.run_id,))
    usage = await env["db"].fetchone(
        "SELECT model, input_tokens, cost_usd FROM run_usage WHERE run_id = ?", (result.run_id,)
    )
    assert row["cost_usd"] is None and usage["cost_usd"] is None
    assert usage["model"] == "qwen3:32b" and usage["input_tokens"] == 3 * 1200
    priced = clients(env, model="qwen3:32b", rates=(0.5, 2.0))
    result = await (await run_chat(env, models=priced)).turn("Review.")
    row = await env["db"].fetchone("SELECT cost_usd FROM runs WHERE id = ?", (result.run_id,))
    assert row["cost_usd"] == pytest.approx((3 * 1200 * 0.5 + 3 * 300 * 2.0) / 1e6)
    await unpriced.close()
    await priced.close()


async def test_a_model_the_server_does_not_serve_says_what_to_set(env):
    with pytest.raises(AgentError, match=r"does not serve llama-9.*COCKPIT_CHAT_MODEL"):
        await (await run_chat(env, model="llama-9")).turn("Review.")


async def test_a_context_overflow_without_the_setting_names_it(env):
    env["standin"].context_tokens = 1000
    with pytest.raises(AgentError, match="COCKPIT_CHAT_CONTEXT_TOKENS") as raised:
        await (await run_chat(env)).turn("Review.")
    assert "maximum context length is 1000 tokens" in str(raised.value)


def reads(*ranges):
    return [call("read_file", path="big.py", start_line=a, end_line=b) for a, b in ranges]


async def test_a_long_conversation_is_trimmed_to_the_context_with_a_note(env, caplog):
    env["standin"].context_tokens = 8500
    env["standin"].policy = Scripted(
        *reads(*[(n * 50 + 1, n * 50 + 50) for n in range(8)]),
        call("submit_review", summary="ok", verdict="comment", findings=[]),
    )
    models = clients(env, context_tokens=8500)
    run = await run_chat(env, models=models)
    with caplog.at_level(logging.WARNING):
        assert (await run.turn("Review.")).draft is not None
    last = env["standin"].requests[-1]["messages"]
    assert last[1]["content"].startswith("Review.\n\n[budget left: ")  # told in the task
    assert "earlier message(s) of this conversation were left out" in last[1]["content"]
    assert last[-1]["role"] == "tool" and "VALUE_399" in last[-1]["content"]  # the newest
    assert "VALUE_000" not in str(last)  # the oldest exchanges went, each call with its answer
    kept = (len(last) - 2) // 2
    assert 2 <= kept < 8 and [m["role"] for m in last[2:]] == ["assistant", "tool"] * kept
    stored = await load_messages(env["db"], run.session.id)
    assert len(stored) == 1 + 2 * 9  # everything is still stored
    assert any("trimmed" in r.getMessage() for r in caplog.records)
    await models.close()


async def test_a_tool_result_too_long_for_the_context_is_cut_and_says_so(env):
    env["standin"].context_tokens = 6000
    env["standin"].policy = Scripted(
        *reads((1, 400)), call("submit_review", summary="ok", verdict="comment", findings=[])
    )
    models = clients(env, context_tokens=6000)
    assert (await (await run_chat(env, models=models)).turn("Review.")).draft is not None
    cut = env["standin"].requests[-1]["messages"][-1]["content"]
    assert "VALUE_000" in cut and "VALUE_399" not in cut
    assert "characters of this tool result were cut to fit the model's context window" in cut
    await models.close()


async def test_a_context_too_small_for_the_task_fails_clearly(env):
    models = clients(env, context_tokens=1024)
    with pytest.raises(AgentError, match="does not fit the chat model's context even trimmed"):
        await (await run_chat(env, models=models)).turn("Review.")
    assert env["standin"].requests == []  # nothing was sent
    await models.close()


# -- the probe `cockpit check-config` calls -----------------------------------------------------


async def test_the_probe_finds_the_model_on_the_server(env):
    settings = Settings(data_dir=env["tmp"], chat=chat_settings(env["standin"]))
    assert await probe(settings, "chat") == []
    assert "Authorization" not in env["standin"].headers[-1]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"model": "qwen3:8b"}, "COCKPIT_CHAT_MODEL: the chat server does not list qwen3:8b"),
        ({"base_url": "/wrong"}, "COCKPIT_CHAT_BASE_URL: the chat server has no /models there"),
        ({"api_key": "wrong"}, "COCKPIT_CHAT_API_KEY: the chat server refused the key"),
        ({"base_url": "http://127.0.0.1:9/v1"}, "COCKPIT_CHAT_BASE_URL: the chat server did not"),
    ],
)
async def test_the_probe_says_what_is_wrong_in_one_line(env, change, expected):
    chat = chat_settings(env["standin"])
    if "api_key" in change:
        env["standin"].api_key = "the-real-key"
        chat = dataclasses.replace(chat, api_key=Secret(change["api_key"]))
    if "model" in change:
        chat = dataclasses.replace(chat, model=change["model"])
    if "base_url" in change:
        url = change["base_url"]
        chat = dataclasses.replace(chat, base_url=url if "://" in url else env["standin"].url + url)
    [problem] = await probe(Settings(data_dir=env["tmp"], chat=chat), "chat")
    assert problem.startswith(expected)
    if "model" in change:
        assert "(it serves: scripted-reviewer)" in problem


async def test_the_probe_accepts_an_ollama_tag_without_latest(env):
    env["standin"].models = ("qwen3:latest",)
    chat = ChatSettings(f"{env['standin'].url}/v1", "qwen3")
    assert await probe(Settings(data_dir=env["tmp"], chat=chat), "chat") == []


async def test_the_probe_says_which_key_claude_and_codex_lack(tmp_path, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(data_dir=tmp_path)
    assert (await probe(settings, "claude"))[0].startswith("ANTHROPIC_API_KEY: not set")
    assert (await probe(settings, "codex"))[0].startswith("OPENAI_API_KEY: not set")
    assert (await probe(settings, "chat"))[0].startswith("COCKPIT_CHAT_BASE_URL: not set")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert await probe(settings, "codex") == []


def test_the_provider_is_built_from_the_settings(tmp_path):
    chat = ChatSettings("http://127.0.0.1:1/v1", "m", None, 16_384, (0.1, 0.2))
    provider = ModelClients(Settings(data_dir=tmp_path, chat=chat)).provider("chat")
    assert isinstance(provider, ChatProvider)
    assert provider.output_tokens == 4096 and provider.fallback_rate["output"] == 0.2
    with pytest.raises(AgentError, match="COCKPIT_CHAT_BASE_URL"):
        ModelClients(Settings(data_dir=tmp_path)).provider("chat")
