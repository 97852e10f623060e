"""Claude's prompt cache over a multi-turn review, and answers cut off at the output limit,
through the official SDKs against the stand-ins (which count the cache as the API does)."""

from __future__ import annotations

import itertools
import json

import pytest

from bot.agents.base import AgentError
from bot.agents.claude import MAX_OUTPUT_TOKENS
from bot.agents.loop import CUT_OFF_RETRIES
from bot.agents.providers import ModelClients
from bot.config import Settings
from bot.records.sqlite import SqliteDatabase
from bot.standin.models import (
    MAX_CACHE_BREAKPOINTS,
    Action,
    AnthropicStandin,
    broken,
    call,
    min_cacheable_tokens,
)
from bot.standin.repo import make_pr
from bot.worktrees import Mirrors
from tests.test_agents import VALID, make_run

# Files large enough that resending what the model read costs more than the prompt.
FILES = {f"mod{n}.py": "".join(f"value_{n}_{k} = {k}\n" for k in range(600)) for n in range(4)}
CUT_NOTE = "cut off at the output limit"
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def env(tmp_path):
    head = {**FILES, "calc.py": "def parse(text):\n    return eval(text)\n"}
    pr = make_pr(tmp_path / "origin", base=FILES, head=head, number=1)
    mirrors = Mirrors(tmp_path / "data")
    await mirrors.sync("o/r", pr.clone_url, ["refs/heads/main", "refs/pull/1/head"])
    tree = await mirrors.add_worktree(
        "o/r", name="a", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    db = await SqliteDatabase.open(tmp_path / "db.sqlite3")
    clients = ModelClients(
        Settings(data_dir=tmp_path, claude_model="claude-sonnet-5-5", codex_model="gpt-5.3-codex")
    )
    env = {"db": db, "tree": tree, "clients": clients}
    yield env
    await env["clients"].close()  # a test may have swapped in others
    await db.close()


def reads_each_file(conversation):
    """A careful model: the diff, then every file, one call a turn, then its review."""
    if conversation.result_of("git_diff") is None:
        return call("git_diff")
    for path in sorted(FILES):
        if not any(args.get("path") == path for _, args in conversation.tool_calls):
            return call("read_file", path=path)
    return call("submit_review", **VALID)


def prompt_tokens(usage: dict) -> int:
    return sum(usage[k] for k in ("input_tokens", "cache_read_input_tokens"))


async def test_earlier_turns_are_read_from_the_cache(env, anthropic_standin):
    """Before: only the system prompt and the tools were cached, so each turn paid the whole
    conversation again as input."""
    anthropic_standin.policy = reads_each_file
    result = await (await make_run(env, "claude")).turn("Review.")
    assert result.draft is not None
    bodies = anthropic_standin.requests
    assert len(bodies) == 6  # the diff, four files, the review
    # the newest user turn is marked, and from the second request the one before it too (with
    # the system's and the tools' marks: the API's four)
    marked = [
        sum("cache_control" in b for m in body["messages"] for b in m["content"]) for body in bodies
    ]
    assert marked == [1] + [MAX_CACHE_BREAKPOINTS - 2] * 5
    for body in bodies:
        assert "cache_control" in body["messages"][-1]["content"][-1]
    usages = anthropic_standin.usages
    for before, after in itertools.pairwise(usages):
        # every turn reads all of the previous request's prompt from the cache
        everything_before = sum(before[k] for k in ("input_tokens", "cache_read_input_tokens"))
        everything_before += before["cache_creation_input_tokens"] - 3  # its turn's opening
        assert after["cache_read_input_tokens"] >= everything_before
        assert after["input_tokens"] < 10  # only the opening of the model's turn
    [row] = await env["db"].fetchall("SELECT * FROM run_usage WHERE run_id = ?", (result.run_id,))
    stored = {k: row[f"{k}_tokens"] for k in ("input", "cache_read", "cache_write")}
    assert stored["cache_read"] == sum(u["cache_read_input_tokens"] for u in usages)
    after_first = usages[1:]
    read = sum(u["cache_read_input_tokens"] for u in after_first)
    assert read > 0.6 * sum(
        prompt_tokens(u) + u["cache_creation_input_tokens"] for u in after_first
    )


def test_the_stand_in_caches_like_the_api():
    """Prefixes below the model's minimum are neither written nor read; a breakpoint reads
    what an earlier request wrote up to 20 blocks before it; `cache_control` itself is not
    part of the prefix."""
    standin = AnthropicStandin(reads_each_file)
    short = [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}
    ]
    assert standin.prompt_usage({"model": "claude-sonnet-5-5", "messages": short})[1:] == (0, 0)
    blocks = [{"type": "text", "text": f"{n} " + "x" * 1000} for n in range(30)]
    first = [{"role": "user", "content": [*blocks[:5], {**blocks[5], "cache_control": EPHEMERAL}]}]
    body = {"model": "claude-sonnet-5-5", "messages": first}
    uncached, written, read = standin.prompt_usage(body)
    assert read == 0 and written >= min_cacheable_tokens("claude-sonnet-5-5") and uncached == 3
    grown = [
        {"role": "user", "content": [*blocks[:24], {**blocks[24], "cache_control": EPHEMERAL}]}
    ]
    _, _, read = standin.prompt_usage({**body, "messages": grown})
    assert read == written  # block 5 is 19 blocks before the breakpoint
    far = [{"role": "user", "content": [*blocks[:29], {**blocks[29], "cache_control": EPHEMERAL}]}]
    fresh = AnthropicStandin(reads_each_file)
    fresh.prompt_usage(body)
    assert fresh.prompt_usage({**body, "messages": far})[2] == 0  # 24 blocks back: a miss
    assert min_cacheable_tokens("claude-haiku-4-5") == 4096


def huge_review(n: int = 80) -> dict:
    body = "A long explanation of the problem. " * 40
    finding = {"path": "calc.py", "line": 2, "severity": "major", "title": "Problem", "body": body}
    return {**VALID, "findings": [finding] * n}


def too_long_until_told(conversation):
    """Submits more than the output limit holds, then (once told) a short review."""
    told = any(CUT_NOTE in result for result in conversation.tool_results)
    return call("submit_review", **(VALID if told else huge_review()))


async def test_a_cut_off_review_is_asked_again_shorter(env, anthropic_standin):
    """Before: the part of `submit_review` written before the limit was taken as the review."""
    assert len(json.dumps(huge_review())) > MAX_OUTPUT_TOKENS * 4
    anthropic_standin.policy = too_long_until_told
    result = await (await make_run(env, "claude")).turn("Review.")
    assert result.draft is not None
    assert [f.title for f in result.draft.findings] == ["eval on input"]
    cut, answered = anthropic_standin.usages
    assert cut["output_tokens"] == MAX_OUTPUT_TOKENS and answered["output_tokens"] < 200
    told = anthropic_standin.normalise(anthropic_standin.requests[-1]).tool_results[-1]
    assert "fewer findings" in told and "submit_review" in told


async def test_a_review_that_stays_cut_off_fails_clearly(env, anthropic_standin):
    anthropic_standin.policy = lambda conversation: call("submit_review", **huge_review())
    run = await make_run(env, "claude")
    with pytest.raises(AgentError) as failed:
        await run.turn("Review.")
    said = str(failed.value)
    assert said == (
        f"the model's submit_review answer was cut off at its output limit"
        f" {CUT_OFF_RETRIES + 1} times, even after it was asked for a shorter one; nothing"
        " was taken from it"
    )
    assert len(anthropic_standin.requests) == CUT_OFF_RETRIES + 1
    row = await env["db"].fetchone("SELECT status, error FROM runs")
    assert (row["status"], row["error"]) == ("failed", said)


def chat_cut_off(arguments: dict) -> Action:
    """A Chat Completions answer stopped at `max_tokens` whose call still parses."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_cut",
                "type": "function",
                "function": {"name": "submit_review", "arguments": json.dumps(arguments)},
            }
        ],
    }
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    return broken(json.dumps({"id": "c1", "object": "chat.completion", "choices": [choice]}))


def responses_cut_off(arguments: dict) -> Action:
    """A Responses answer stopped at `max_output_tokens` whose call still parses."""
    item = {
        "type": "function_call",
        "id": "fc_cut",
        "call_id": "call_cut",
        "name": "submit_review",
        "arguments": json.dumps(arguments),
        "status": "incomplete",
    }
    response = {
        "id": "resp_cut",
        "object": "response",
        "created_at": 1700000000,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "model": "gpt-5.3-codex",
        "output": [item],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
    }
    return broken(json.dumps(response))


@pytest.mark.parametrize("provider", ["codex", "chat"])
async def test_openai_answers_cut_off_are_asked_again(
    env, provider, openai_standin, chat_standin, tmp_path
):
    """Responses' `status: incomplete` (`max_output_tokens`) and Chat Completions'
    `finish_reason: length` are a cut-off too, even when the partial call parses."""
    standin = openai_standin if provider == "codex" else chat_standin
    cut = responses_cut_off if provider == "codex" else chat_cut_off
    partial = {**VALID, "findings": VALID["findings"][:0]}
    standin.policy = lambda c: call("submit_review", **VALID) if c.tool_results else cut(partial)
    if provider == "chat":
        from tests.models import chat_settings

        await env["clients"].close()
        env["clients"] = ModelClients(Settings(data_dir=tmp_path, chat=chat_settings(standin)))
    result = await (await make_run(env, provider)).turn("Review.")
    assert result.draft is not None and len(result.draft.findings) == 1
    told = standin.normalise(standin.requests[-1]).tool_results[-1]
    assert CUT_NOTE in told
