"""Both providers through their official SDKs against local stand-ins: tools, submit,
repair, budgets, retries, usage and cost, and sessions that survive a restart."""

from __future__ import annotations

import logging

import pytest

from bot.agents.base import AgentError, Budget, BudgetExceeded
from bot.agents.loop import AgentRun, Answer
from bot.agents.providers import ModelClients
from bot.agents.toolbox import Toolbox
from bot.config import Settings
from bot.records.messages import load_messages
from bot.records.sessions import create_session
from bot.records.sqlite import SqliteDatabase
from bot.skills import load_skill
from bot.standin.models import Action, call, fail, say
from bot.standin.repo import make_pr
from bot.standin.scripted import scripted_reviewer
from bot.worktrees import Mirrors
from tests.models import Scripted

BASE = {"calc.py": "def parse(text):\n    return int(text)\n"}
HEAD = {"calc.py": "def parse(text):\n    return eval(text)\n"}
VALID = {
    "summary": "One problem.",
    "verdict": "request_changes",
    "findings": [
        {
            "path": "calc.py",
            "line": 2,
            "severity": "critical",
            "title": "eval on input",
            "body": "Use int().",
            "evidence": "calc.py:2 reads `return eval(text)`: parse('1+1') runs code",
            "confidence": 95,
        }
    ],
}


@pytest.fixture
async def env(tmp_path):
    pr = make_pr(tmp_path / "origin", base=BASE, head=HEAD, number=1)
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
    await clients.close()
    await env["db"].close()  # a test may have swapped in a reopened database


async def make_run(
    env,
    provider_name,
    *,
    budget=None,
    model=None,
    answer=Answer.REQUIRED,
    session=None,
    toolbox=None,
    answer_when_spent=False,
):
    db = env["db"]
    provider = env["clients"].provider(provider_name, model)
    skill = await load_skill(db)
    session = session or await create_session(db, provider=provider.name, model=provider.model)
    budget = budget or Budget()
    return AgentRun(
        db=db,
        provider=provider,
        session=session,
        toolbox=toolbox or Toolbox(env["tree"]),
        system=skill.text,
        kind="review",
        budget=budget,
        skill_version_id=skill.id,
        answer=answer,
        answer_when_spent=answer_when_spent,
    )


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_model_explores_with_tools_then_submits(
    env, provider, anthropic_standin, openai_standin
):
    run = await make_run(env, provider)
    result = await run.turn("Review this pull request.")
    assert [f.title for f in result.draft.findings] == ["eval() runs untrusted input"]
    assert result.draft.findings[0].line == 2
    assert result.tool_calls == 2  # git_diff, read_file
    standin = anthropic_standin if provider == "claude" else openai_standin
    sent_tools = standin.normalise(standin.requests[0]).tools
    assert sent_tools == [
        "read_file",
        "list_files",
        "search_code",
        "git_diff",
        "git_log",
        "submit_review",
    ]
    row = await env["db"].fetchone("SELECT * FROM runs WHERE id = ?", (result.run_id,))
    assert row["status"] == "done" and row["skill_version_id"] is not None


async def test_claude_caches_system_prompt_and_tools(env, anthropic_standin):
    await (await make_run(env, "claude")).turn("Review.")
    request = anthropic_standin.requests[0]
    assert request["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert request["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in request["tools"][0]


async def test_codex_resends_items_without_server_state(env, openai_standin):
    await (await make_run(env, "codex")).turn("Review.")
    second = openai_standin.requests[1]
    assert second["store"] is False
    assert second["prompt_cache_key"].startswith("pr-cockpit-session-")
    types = [item.get("type", item.get("role")) for item in second["input"]]
    assert types == ["user", "function_call", "function_call_output"]


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_invalid_output_gets_one_repair_turn(
    env, provider, anthropic_standin, openai_standin
):
    script = Scripted(
        call("submit_review", summary="x", verdict="approve", findings="none"),
        call("submit_review", **VALID),
    )
    (anthropic_standin if provider == "claude" else openai_standin).policy = script
    result = await (await make_run(env, provider)).turn("Review.")
    assert result.draft.verdict == "request_changes"
    repair = script.seen[1].tool_results[-1]
    assert "verdict" in repair and "findings" in repair


async def test_invalid_output_twice_fails_clearly(env, anthropic_standin):
    anthropic_standin.policy = Scripted(call("submit_review", summary="x"))
    run = await make_run(env, "claude")
    with pytest.raises(AgentError, match="invalid submit_review output after one repair"):
        await run.turn("Review.")
    row = await env["db"].fetchone("SELECT status, error FROM runs")
    assert row["status"] == "failed" and "missing `verdict`" in row["error"]


async def test_prose_without_submit_is_nudged_once(env, anthropic_standin):
    anthropic_standin.policy = Scripted(say("Looks fine to me!"), call("submit_review", **VALID))
    result = await (await make_run(env, "claude")).turn("Review.")
    assert result.draft is not None


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_tool_call_budget_is_enforced(env, provider, anthropic_standin, openai_standin):
    standin = anthropic_standin if provider == "claude" else openai_standin
    standin.policy = Scripted(Action(tools=[("list_files", {})] * 2))  # two calls a reply
    run = await make_run(env, provider, budget=Budget(max_tool_calls=5))
    with pytest.raises(BudgetExceeded, match="more than 5 tool calls"):
        await run.turn("Review.")
    row = await env["db"].fetchone("SELECT status, error, tool_calls FROM runs")
    assert row["status"] == "failed" and "budget exhausted" in row["error"]
    usage = await env["db"].fetchone(
        "SELECT SUM(input_tokens + cache_read_tokens + cache_write_tokens) FROM run_usage"
    )
    assert usage[0] > 0  # what the failed run cost is still recorded
    # The calls refused by the budget have their result: the conversation can go on.
    standin.policy = Scripted(say("Six calls were too many."))
    again = await make_run(env, provider, session=run.session, answer=Answer.NONE)
    assert (await again.turn("What did you find?")).text == "Six calls were too many."
    results = standin.normalise(standin.requests[-1]).tool_results
    assert len(results) == 6 and "not run: the budget is spent" in results[-1]


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_a_turn_resumed_after_the_models_answer_takes_the_next_step(
    env, provider, anthropic_standin, openai_standin
):
    """The answer was stored, then the process died before the nudge was: the resumed turn
    nudges (a request never ends with the model's own message: Claude refuses prefill)."""
    standin = anthropic_standin if provider == "claude" else openai_standin
    standin.policy = Scripted(say("I will revise the draft."))
    first = await make_run(env, provider, answer=Answer.NONE)
    await first.turn("Review feedback: F2 is a nit.")
    standin.policy = Scripted(call("submit_review", **VALID))
    resumed = await make_run(env, provider, session=first.session)
    assert (await resumed.turn(None)).draft is not None
    texts = standin.normalise(standin.requests[-1]).user_texts
    assert texts[-1].startswith("You ended your turn without calling submit_review")


async def test_an_offered_final_tool_is_listed_but_a_call_is_told_not_now(env, anthropic_standin):
    """A reviewer's later turns keep `submit_review` listed (the prompt cache holds), but a
    question is answered in prose."""
    anthropic_standin.policy = Scripted(call("submit_review", **VALID), say("It is the eval."))
    result = await (await make_run(env, "claude", answer=Answer.OFFERED)).turn("Why?")
    assert result.text == "It is the eval." and result.answer is None
    last = anthropic_standin.normalise(anthropic_standin.requests[-1])
    assert "submit_review" in last.tools and "plain text" in last.tool_results[-1]


async def test_an_empty_claude_answer_is_not_stored(env, anthropic_standin):
    anthropic_standin.policy = Scripted(call("git_diff"), Action(), call("submit_review", **VALID))
    result = await (await make_run(env, "claude")).turn("Review.")
    assert result.draft is not None  # nudged after the empty answer, then submitted
    sent = anthropic_standin.requests[-1]["messages"]
    assert all(message["content"] for message in sent)


async def test_token_and_dollar_budgets(env, anthropic_standin):
    anthropic_standin.policy = Scripted(call("list_files"))
    with pytest.raises(BudgetExceeded, match="tokens"):
        await (await make_run(env, "claude", budget=Budget(max_tokens=5000))).turn("Review.")
    with pytest.raises(BudgetExceeded, match="COCKPIT_REVIEW_MAX_USD"):
        await (await make_run(env, "claude", budget=Budget(max_usd=0.01))).turn("Review.")


def budget_lines(texts):
    return [text.rpartition("\n\n")[2] for text in texts]


async def test_each_turn_tells_the_model_what_is_left_of_its_budget(env, anthropic_standin):
    anthropic_standin.policy = Scripted(*[call("list_files")] * 3, call("submit_review", **VALID))
    run = await make_run(env, "claude", budget=Budget(max_tool_calls=10))
    assert (await run.turn("Review.")).draft is not None
    seen = [anthropic_standin.normalise(r) for r in anthropic_standin.requests]
    first, *later = seen
    [told] = budget_lines(first.user_texts)
    assert told.startswith("[budget left: 10 of 10 tool calls, 1,500,000 of 1,500,000 tokens")
    assert "of 600 seconds]" in told
    told = budget_lines(c.tool_results[-1] for c in later)
    assert [t.partition(" tool calls")[0] for t in told] == [
        "[budget left: 9 of 10",
        "[budget left: 8 of 10",
        "[budget left: 7 of 10",
    ]
    # what the first two answers reported, cached input at its price (a tenth to read, 1.25 to
    # write, Claude's multipliers)
    spent = sum(
        u["input_tokens"]
        + u["output_tokens"]
        + 0.1 * u["cache_read_input_tokens"]
        + 1.25 * u["cache_creation_input_tokens"]
        for u in anthropic_standin.usages[:2]
    )
    assert anthropic_standin.usages[1]["cache_read_input_tokens"] > 0
    assert f"{1_500_000 - round(spent):,} of 1,500,000 tokens" in told[1]


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_near_the_end_of_the_budget_only_the_finishing_tool_is_offered(
    env, provider, anthropic_standin, openai_standin
):
    """With 3 tool calls left the request offers only `submit_review`; the model submits
    what it has, and its summary says the budget cut it short."""
    standin = anthropic_standin if provider == "claude" else openai_standin

    def explore_until_told(conversation):
        if conversation.tools == ["submit_review"]:
            return call("submit_review", **VALID)
        return call("list_files")

    standin.policy = explore_until_told
    result = await (await make_run(env, provider, budget=Budget(max_tool_calls=6))).turn("Go.")
    seen = [standin.normalise(r) for r in standin.requests]
    assert [len(c.tools) for c in seen] == [6, 6, 6, 1]
    assert seen[-1].tools == ["submit_review"]
    told = seen[-1].tool_results[-1]
    assert told.endswith(
        "It is nearly spent: only submit_review is offered;"
        " call submit_review now with what you have found so far]"
    )
    assert result.cut_short == "budget nearly spent: 3 of 6 tool calls"
    assert result.draft.findings and result.draft.summary.startswith("One problem.\n\n")
    assert "**Cut short** (budget nearly spent: 3 of 6 tool calls)" in result.draft.summary


async def test_calls_made_after_the_finishing_tool_alone_is_offered_are_refused_and_count(
    env, anthropic_standin
):
    anthropic_standin.policy = Scripted(call("list_files"))
    run = await make_run(env, "claude", budget=Budget(max_tool_calls=5))
    with pytest.raises(BudgetExceeded, match="more than 5 tool calls"):
        await run.turn("Go.")
    seen = [anthropic_standin.normalise(r) for r in anthropic_standin.requests]
    assert len(seen) == 6  # 2 run, 3 refused (counted), the 6th refused as over the budget
    assert [len(c.tools) for c in seen] == [6, 6, 1, 1, 1, 1]
    refused = [r for r in seen[-1].tool_results if r.startswith("not run")]
    assert len(refused) == 3
    stored = await load_messages(env["db"], run.session.id)
    assert "not run: the budget is spent" in stored[-1]["content"][0]["content"]
    row = await env["db"].fetchone("SELECT tool_calls FROM runs")
    assert row["tool_calls"] == 2  # run, as before


async def test_a_spent_budget_ends_a_review_in_a_draft_saying_what_it_covered(
    env, anthropic_standin
):
    """A model that never submits: no findings, and the draft says which budget ran out and
    how many of the files under review the model saw."""
    anthropic_standin.policy = Scripted(call("read_file", path="calc.py"), call("list_files"))
    toolbox = Toolbox(env["tree"], reviewed=["calc.py", "gone.py"])
    run = await make_run(
        env, "claude", budget=Budget(max_tool_calls=5), toolbox=toolbox, answer_when_spent=True
    )
    result = await run.turn("Review.")
    assert result.cut_short == "budget exhausted: more than 5 tool calls"
    draft = result.draft
    assert draft is not None and draft.findings == () and draft.verdict == "comment"
    assert draft.summary.startswith("⚠️ **Cut short** (budget exhausted: more than 5 tool calls)")
    assert "no findings. It reviewed 1 of 2 files" in draft.summary
    row = await env["db"].fetchone("SELECT status, error, tool_calls FROM runs")
    assert (row["status"], row["error"]) == ("done", "budget exhausted: more than 5 tool calls")


async def test_cache_reads_count_at_their_price_in_the_token_budget(env, anthropic_standin):
    """Each turn reads 900 tokens from the cache: at full weight 9 turns pass 3,000 tokens,
    at Claude's price (a tenth of input) they do not. What is recorded and charged is as
    before."""
    cheap = Action(tools=[("list_files", {})], usage=(0, 10, 900))
    submit = Action(tools=[("submit_review", VALID)], usage=(1200, 300))
    anthropic_standin.policy = Scripted(*[cheap] * 8, submit)
    run = await make_run(env, "claude", budget=Budget(max_tokens=3000))
    result = await run.turn("Review.")
    assert result.draft is not None and result.cut_short is None
    row = await env["db"].fetchone("SELECT * FROM run_usage WHERE run_id = ?", (result.run_id,))
    assert row["cache_read_tokens"] == 8 * 900 and row["output_tokens"] == 8 * 10 + 300
    expected = (1200 * 2.0 + 380 * 10.0 + 7200 * 0.2) / 1e6
    assert row["cost_usd"] == pytest.approx(expected)


async def test_overloaded_529_is_retried_waiting_what_the_server_asks(
    env, anthropic_standin, caplog
):
    """The SDK retries a transient error; a Retry-After is honoured (a tiny one here, as the
    stand-in sends by default: the suite does not wait)."""
    anthropic_standin.policy = Scripted(
        fail(529, headers={"retry-after-ms": "7"}), fail(529), scripted_reviewer
    )
    with caplog.at_level(logging.INFO):
        result = await (await make_run(env, "claude")).turn("Review.")
    assert result.draft is not None
    retries = [{k.lower(): v for k, v in h.items()} for h in anthropic_standin.headers[:3]]
    assert [h["x-stainless-retry-count"] for h in retries] == ["0", "1", "2"]
    assert f"in {0.007:f} seconds" in caplog.text  # the server's wait, not the SDK's backoff


async def test_rate_limit_429_is_retried_for_codex(env, openai_standin, caplog):
    openai_standin.policy = Scripted(
        fail(429, "rate_limit_exceeded", {"retry-after-ms": "3"}), scripted_reviewer
    )
    with caplog.at_level(logging.INFO):
        assert (await (await make_run(env, "codex")).turn("Review.")).draft is not None
    assert len(openai_standin.requests) > 1 and f"in {0.003:f} seconds" in caplog.text


async def test_persistent_outage_fails_clearly(env, anthropic_standin):
    anthropic_standin.policy = Scripted(fail(503, "api_error"))
    with pytest.raises(AgentError, match="unavailable after 5 attempts"):
        await (await make_run(env, "claude")).turn("Review.")
    assert len(anthropic_standin.requests) == 5


async def test_bad_key_fails_without_retry(env, anthropic_standin):
    anthropic_standin.policy = Scripted(fail(401, "authentication_error"))
    run = await make_run(env, "claude")
    with pytest.raises(AgentError, match="rejected the API key"):
        await run.turn("Review.")
    assert len(anthropic_standin.requests) == 1


async def test_usage_and_cost_per_model(env, anthropic_standin):
    result = await (await make_run(env, "claude")).turn("Review.")
    rows = await env["db"].fetchall("SELECT * FROM run_usage WHERE run_id = ?", (result.run_id,))
    assert [r["model"] for r in rows] == ["claude-sonnet-5-5"]
    row = rows[0]
    assert row["input_tokens"] > 0 and row["cache_read_tokens"] > 0 and row["cache_write_tokens"]
    counts = [row[f"{kind}_tokens"] for kind in ("input", "output", "cache_write", "cache_read")]
    expected = sum(n * rate for n, rate in zip(counts, (2.0, 10.0, 2.5, 0.2), strict=True)) / 1e6
    assert row["cost_usd"] == pytest.approx(expected)


async def test_unknown_model_cost_is_null_not_zero(env, anthropic_standin):
    result = await (await make_run(env, "claude", model="claude-future-9")).turn("Review.")
    run = await env["db"].fetchone("SELECT cost_usd FROM runs WHERE id = ?", (result.run_id,))
    usage = await env["db"].fetchone("SELECT cost_usd, input_tokens FROM run_usage")
    assert run["cost_usd"] is None and usage["cost_usd"] is None and usage["input_tokens"] > 0


@pytest.mark.parametrize(
    ("model", "known"),
    [
        ("claude-sonnet-5-5", True),
        ("claude-sonnet-5-5-20260901", True),
        ("gpt-5.3-codex", True),
        ("gpt-5-2025-08-07", True),
        ("gpt-5.5", False),
        ("claude-sonnet-5-5-turbo", False),
        ("unknown", False),
    ],
)
def test_rates_match_exact_ids_and_dated_snapshots_only(model, known):
    from bot.agents.base import rate_for

    assert (rate_for(model) is not None) == known


async def test_session_messages_have_stable_ids_and_survive_restart(
    env, anthropic_standin, tmp_path
):
    run = await make_run(env, "claude")
    await run.turn("Review.")
    rows = await env["db"].fetchall("SELECT id, role FROM messages ORDER BY seq")
    assert [r["id"] for r in rows] == [f"msg-{n}" for n in range(len(rows))]
    assert rows[0]["role"] == "user" and rows[1]["role"] == "assistant"
    session = run.session
    await env["db"].close()  # the process restarts …
    env["db"] = await SqliteDatabase.open(tmp_path / "db.sqlite3")
    anthropic_standin.policy = Scripted(say("It is the eval on line 2."))
    again = await make_run(env, "claude", session=session, answer=Answer.NONE)
    result = await again.turn("Which finding matters most?")
    assert result.text == "It is the eval on line 2."
    history = await load_messages(env["db"], session.id)
    assert len(history) == len(rows) + 2  # … and the conversation goes on where it was
    sent = anthropic_standin.requests[-1]["messages"]
    assert sent[-1]["role"] == "user" and sent[-1]["content"][-1]["text"].startswith("Which")
