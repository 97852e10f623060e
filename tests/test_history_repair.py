"""Pure: a stored conversation whose tool calls were cut short (a stopped turn, a killed
process, an older version of the bot) becomes one the real APIs accept once its dangling
calls are answered (one helper for every provider's shapes): the strict stand-ins' checks
are the oracle."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.agents.base import ToolCall, close_dangling
from bot.agents.chat import ChatProvider, join_user_turns, outgoing
from bot.agents.claude import ClaudeProvider, merge_roles
from bot.agents.codex import CodexProvider
from bot.standin.models import anthropic_rejection, chat_rejection, openai_rejection

INTERRUPTED = "interrupted"
PROVIDERS = {
    "claude": ClaudeProvider(None, "claude-sonnet-5-5"),
    "codex": CodexProvider(None, "m"),
    "chat": ChatProvider(None, "m"),
}


def reply(provider: str, n: int, calls: int, text: bool) -> tuple[list[dict], list[ToolCall]]:
    """A model reply as the provider stores it: prose and/or `calls` tool calls."""
    arguments = {} if provider == "claude" else "{}"
    made = [ToolCall(f"call_{n}_{k}", "git_diff", arguments) for k in range(calls)]
    if provider == "chat":
        message = {"role": "assistant", "content": f"thinking {n}" if text else None}
        if made:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "{"}}
                for c in made
            ]  # arguments cut short: a local model's; resent as `{}`
        return [message], made
    if provider == "claude":
        blocks = [{"type": "text", "text": f"thinking {n}"}] if text else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": {}} for c in made]
        return [{"role": "assistant", "content": blocks}], made
    items = []
    if text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"thinking {n}", "annotations": []}],
            }
        )
    items += [
        {"type": "function_call", "id": f"fc_{c.id}", "call_id": c.id, "name": c.name,
         "arguments": "{}", "status": "completed"}
        for c in made
    ]  # fmt: skip
    return items, made


# A conversation as turns store it: a person's message, then replies; a reply's calls get
# their results (the turn went on), or none (it was cut short: a new message comes next).
step = st.tuples(st.integers(0, 3), st.booleans(), st.booleans())  # calls, prose, cut short


def conversation(provider: str, steps: list[tuple[int, bool, bool]], ends_with_call: bool):
    model = PROVIDERS[provider]
    stored = list(model.user_message("Review this."))
    for n, (calls, text, cut) in enumerate(steps):
        items, made = reply(provider, n, calls, text or not calls)
        stored += items
        if not made:
            stored += model.user_message(f"question {n}")
        elif cut:
            stored += model.user_message(f"question {n}")  # asked after a stopped turn
        else:
            stored += model.tool_results([(c, "ok", False) for c in made])
    if ends_with_call:  # killed while its tool ran: the turn resumes from here
        items, _ = reply(provider, len(steps), 1, False)
        stored += items
    return stored


def closed(provider: str, messages: list[dict]) -> list[dict]:
    return close_dangling(messages, PROVIDERS[provider].tool_results, INTERRUPTED)


def accepted(provider: str, messages: list[dict]):
    if provider == "claude":
        return anthropic_rejection(
            {"model": "m", "max_tokens": 10, "messages": merge_roles(messages)}
        )
    if provider == "chat":  # what ChatProvider.send makes of the stored messages
        sent = join_user_turns([{"role": "system", "content": "s"}, *outgoing(messages)])
        return chat_rejection({"model": "m", "messages": sent})
    return openai_rejection({"model": "m", "input": messages})


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, max_size=6), ends_with_call=st.booleans())
def test_every_stored_conversation_is_accepted_once_its_calls_are_answered(
    provider, steps, ends_with_call
):
    stored = conversation(provider, steps, ends_with_call)
    answered = closed(provider, stored)
    assert accepted(provider, answered) is None
    assert [m for m in answered if m in stored] == stored  # nothing lost or reordered
    assert closed(provider, answered) == answered  # settled


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_call_cut_short_before_a_question_is_answered_before_it(provider):
    stored = conversation(provider, [(1, False, True)], False)
    assert accepted(provider, stored) is not None  # what the APIs refused (400)
    texts = [json.dumps(m) for m in closed(provider, stored)]
    answered = next(n for n, t in enumerate(texts) if INTERRUPTED in t)
    question = next(n for n, t in enumerate(texts) if "question 0" in t)
    assert answered < question
