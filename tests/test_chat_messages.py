"""Pure: what the `chat` provider sends (stored messages made acceptable, trimmed to the
context), what it counts, what a refusal tells the operator, and Chat Completions messages
read back as plain text for a cross-review."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.agents import base
from bot.agents.base import AgentError, Usage, arguments_problem
from bot.agents.chat import (
    estimate_tokens,
    explain,
    fit_context,
    fold_system,
    join_user_turns,
    outgoing,
    read_completion,
    request_tokens,
    server_said,
)
from bot.agents.transcript import answer_text, tool_call
from bot.standin.models import chat_rejection


def user(text):
    return {"role": "user", "content": text}


def system(text="You review code."):
    return {"role": "system", "content": text}


def calls(*pairs, content=None):
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": a}}
            for i, a in pairs
        ],
    }


def result(call_id, text="ok"):
    return {"role": "tool", "tool_call_id": call_id, "content": text}


@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ([user("a")], [user("a")]),
        ([calls(("a", '{"path": "x"}'))], [calls(("a", '{"path": "x"}'))]),
        ([calls(("a", '{"path": "x'))], [calls(("a", "{}"))]),  # cut short
        ([calls(("a", "[1, 2]"))], [calls(("a", "{}"))]),  # JSON, not an object
        ([calls(("a", ""))], [calls(("a", ""))]),  # empty: no arguments (`{}`), kept
        ([calls(("a", "{"), ("b", "{}"))], [calls(("a", "{}"), ("b", "{}"))]),
        ([{"role": "assistant", "content": "Done."}], [{"role": "assistant", "content": "Done."}]),
    ],
)
def test_outgoing_resends_unreadable_arguments_as_an_empty_object(stored, sent):
    assert outgoing(stored) == sent


@pytest.mark.parametrize(
    ("messages", "joined"),
    [
        ([user("a"), user("b")], [user("a\n\nb")]),
        ([system(), user("a"), user("b"), user("c")], [system(), user("a\n\nb\n\nc")]),
        ([user("a"), calls(("x", "{}")), result("x"), user("b")], None),  # nothing to join
        ([user("a"), {"role": "user", "content": [{"type": "text", "text": "b"}]}], None),
    ],
)
def test_consecutive_user_turns_are_joined(messages, joined):
    assert join_user_turns(messages) == (messages if joined is None else joined)


@pytest.mark.parametrize(
    ("messages", "folded"),
    [
        ([system("S"), user("task")], [user("S\n\ntask")]),
        ([system("S"), user("task"), user("more")], [user("S\n\ntask"), user("more")]),
        ([user("task")], [user("task")]),
        ([system("S")], [system("S")]),  # no user message to carry it
    ],
)
def test_a_system_prompt_folds_into_the_first_user_message(messages, folded):
    assert fold_system(messages) == folded


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("abcde", 2),
        ("x" * 1000, 400),  # 2.5 characters a token
        ("é", 2),  # two UTF-8 bytes
        ("日本語", 9),  # three each
        ("a😀", 5),  # 1 + four bytes
    ],
)
def test_tokens_are_estimated_conservatively(text, tokens):
    assert estimate_tokens(text) == tokens


@given(st.text())
def test_an_estimate_never_undercounts_a_byte_level_tokenizer_at_3_ascii_characters(text):
    ascii_chars = len(text.encode("ascii", "ignore"))
    other = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    assert estimate_tokens(text) >= ascii_chars / 3 + other


def conversation(exchanges: int, size: int = 2000) -> list[dict]:
    messages = [system(), user("Review this pull request.")]
    for n in range(exchanges):
        messages += [calls((f"c{n}", "{}")), result(f"c{n}", f"[{n}]" + "x" * size)]
    return messages


@pytest.mark.parametrize(
    ("exchanges", "budget", "dropped", "clipped"),
    [
        (3, 100_000, 0, 0),  # fits: sent as stored
        (10, 3_000, 14, 0),  # the oldest seven exchanges out
        (10, 1_500, 18, 0),  # only the newest exchange is kept
        (1, 600, 0, 1),  # one exchange too big: its result is cut
    ],
)
def test_fit_leaves_out_the_oldest_exchanges_then_cuts_results(exchanges, budget, dropped, clipped):
    messages = conversation(exchanges)
    fitted = fit_context(messages, [], budget)
    assert (fitted.dropped, fitted.clipped) == (dropped, clipped)
    assert fitted.tokens <= budget and fitted.tokens == request_tokens(fitted.messages, [])
    assert fitted.messages[0] == messages[0]  # the system prompt
    assert fitted.messages[1]["content"].startswith("Review this pull request.")
    assert ("were left out" in fitted.messages[1]["content"]) == bool(dropped)
    assert f"[{exchanges - 1}]" in fitted.messages[-1]["content"]  # the newest result
    assert chat_rejection({"model": "m", "messages": fitted.messages}) is None


def test_fit_counts_with_the_scale_the_server_taught():
    messages = conversation(4)
    assert fit_context(messages, [], 4_000).dropped == 0
    assert fit_context(messages, [], 4_000, scale=1.5).dropped > 0


def test_fit_fails_clearly_when_the_task_alone_is_too_long():
    messages = [system("s" * 10_000), user("Review.")]
    with pytest.raises(AgentError, match="COCKPIT_CHAT_CONTEXT_TOKENS"):
        fit_context(messages, [], 2_000)


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({}, None),
        ('{"path": "a"}', None),
        ("", None),
        ("{", "invalid JSON: Expecting property name enclosed in double quotes at character 1"),
        ("[]", "valid JSON, but not an object"),
        ("null", "valid JSON, but not an object"),
        (None, "not an object"),
    ],
)
def test_which_arguments_cannot_be_read(arguments, problem):
    assert arguments_problem(arguments) == problem


def test_an_empty_final_answer_is_told_what_it_lacks():
    """Empty arguments read as `{}` everywhere: the repair turn names the missing keys
    instead of saying the input is not an object."""
    from bot.agents.answers import InvalidAnswer, parse_submission
    from bot.agents.base import arguments_object

    assert arguments_object("") == {}
    with pytest.raises(InvalidAnswer, match="summary"):
        parse_submission(arguments_object(""))


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"error": {"message": "bad", "type": "x"}}, "bad"),
        ({"object": "error", "message": "old vllm"}, "old vllm"),
        ({"error": "llama3 does not support tools"}, "llama3 does not support tools"),
        ({"detail": "nope"}, "nope"),
        (None, ""),
        ("plain", "plain"),
    ],
)
def test_a_servers_error_message_is_found_in_its_shape(body, said):
    assert server_said(body) == said


@pytest.mark.parametrize(
    ("status", "said", "expected"),
    [
        (
            400,
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be'
            " set",
            "--enable-auto-tool-choice and --tool-call-parser PARSER",
        ),
        (400, "tools param requires --jinja flag", "start llama-server with --jinja"),
        (400, "registry.ollama.ai/library/gemma:2b does not support tools", "cannot call tools"),
        (
            400,
            "This model's maximum context length is 8192 tokens. However, you requested 9000",
            "set COCKPIT_CHAT_CONTEXT_TOKENS",
        ),
        (400, "the request exceeds the available context size", "COCKPIT_CHAT_CONTEXT_TOKENS"),
        (404, "The model `llama` does not exist.", "does not serve m ("),
        (401, "Incorrect API key provided: sk-ab***yz", "refused the key (401): set COCKPIT"),
        (422, "field required", 'rejected the request (422: "field required")'),
    ],
)
def test_a_refusal_says_what_to_change(status, said, expected):
    assert expected in explain(status, said, "m")
    if status == 401:
        assert "sk-ab" not in explain(status, said, "m")  # a key is never quoted


@given(st.text())
def test_a_refusal_quotes_the_server_on_one_short_line(said):
    text = explain(400, said, "m")
    assert "\n" not in text and len(text) < 700


@pytest.mark.parametrize(
    ("item", "text", "calls_any"),
    [
        (calls(("a", "{}")), "", True),
        (calls(("a", "{}"), content=" Reading. "), "Reading.", True),
        ({"role": "assistant", "content": "Done."}, "Done.", False),
        (result("a"), "", False),
    ],
)
def test_a_chat_answer_and_its_calls(item, text, calls_any):
    assert answer_text(item) == text
    assert bool(base.calls(item)) == calls_any


def test_the_draft_is_found_in_a_chat_submit_review_call():
    draft = {"summary": "s", "verdict": "comment", "findings": []}
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "a",
                "type": "function",
                "function": {"name": "submit_review", "arguments": json.dumps(draft)},
            }
        ],
    }
    assert tool_call(message, "submit_review") == draft
    assert tool_call(message, "read_file") is None
    broken = json.loads(json.dumps(message))
    broken["tool_calls"][0]["function"]["arguments"] = "{"
    assert tool_call(broken, "submit_review") is None


# -- what a server answers ----------------------------------------------------------------------


def _choice(message, **rest) -> str:
    return json.dumps({"choices": [{"index": 0, "message": message}], **rest})


@pytest.mark.parametrize(
    ("content_type", "body", "text", "calls", "usage"),
    [
        ("application/json", _choice({"content": "ok"}), "ok", 0, None),
        ("application/json; charset=utf-8", _choice({"content": None}), "", 0, None),
        (  # content parts (some servers), a call with its arguments as an object
            "application/json",
            _choice(
                {
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "tool_calls": [{"id": 7, "function": {"name": "x", "arguments": {}}}],
                }
            ),
            "ab",
            1,
            None,
        ),
        (  # whole numbers written as floats; cached tokens counted apart
            "application/json",
            _choice(
                {"content": "ok"},
                usage={
                    "prompt_tokens": 1000.0,
                    "completion_tokens": 20,
                    "prompt_tokens_details": {"cached_tokens": 800},
                },
            ),
            "ok",
            0,
            Usage(input_tokens=200, output_tokens=20, cache_read_tokens=800),
        ),
        ("", _choice({"content": "ok"}, usage={"prompt_tokens": 0}), "ok", 0, None),
    ],
)
def test_an_answer_is_read(content_type, body, text, calls, usage):
    answer = read_completion(content_type, body)
    assert (answer.text, len(answer.calls), answer.usage) == (text, calls, usage)


@pytest.mark.parametrize(
    ("content_type", "body", "said"),
    [
        ("text/html", "<html>502 Bad Gateway</html>", 'it sent text/html, not JSON: "<html>'),
        ("", "Bad Gateway", "it sent a body without a content type, not JSON"),
        ("application/json", "[1, 2]", 'it sent a list, not an object: "[1, 2]"'),
        ("application/json", '{"choices": []}', "it has no choices"),
        ("application/json", '{"choices": ["x"]}', "its first choice has no message"),
        ("application/json", _choice({"content": {"a": 1}}), 'content is an object ({"a": 1})'),
        ("application/json", _choice({"tool_calls": "x"}), 'tool_calls is text ("x")'),
        ("application/json", _choice({"tool_calls": [3]}), "a tool call is a number (3)"),
        ("application/json", _choice({}, usage=[1]), "usage is a list ([1])"),
        (
            "application/json",
            _choice({}, usage={"prompt_tokens": 5, "completion_tokens": -1}),
            "usage.completion_tokens is a number (-1), not a count of tokens",
        ),
        (
            "application/json",
            _choice({}, usage={"prompt_tokens": True}),
            "usage.prompt_tokens is true or false (true)",
        ),
    ],
)
def test_an_answer_that_is_not_one_says_what_was_sent(content_type, body, said):
    with pytest.raises(AgentError) as caught:
        read_completion(content_type, body)
    text = str(caught.value)
    assert text.startswith("the chat server's answer is not a Chat Completions answer: ")
    assert said in text and "\n" not in text
