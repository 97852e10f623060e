"""The model stand-ins refuse what the real Messages and Responses APIs refuse, with their
status, error shape and wording: a test that sends such a request fails (tests/models.py)."""

from __future__ import annotations

import anthropic
import openai
import pytest

from bot.standin.models import anthropic_rejection, openai_rejection

TOOLS = [
    {"name": "git_diff", "description": "d", "input_schema": {"type": "object"}},
    {"name": "submit_review", "description": "s", "input_schema": {"type": "object"}},
]


def user(text="Review this."):
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def said(text="Done."):
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def uses(*ids):
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": i, "name": "git_diff", "input": {}} for i in ids],
    }


def results(*ids):
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids],
    }


def system(text="Be brief."):
    return {"role": "system", "content": text}


def messages_body(*messages, tools=None, **extra):
    return {
        "model": "claude-sonnet-5-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You review code.", "cache_control": {"type": "x"}}],
        "tools": TOOLS if tools is None else tools,
        "messages": list(messages),
        **extra,
    }


@pytest.mark.parametrize(
    "messages",
    [
        [user()],
        [user(), uses("a"), results("a")],
        [user(), uses("a", "b"), results("a", "b"), said(), user("And F2?")],
        [user(), uses("a"), results("a"), user("Call submit_review now.")],  # combined
        [user("one"), user("two")],  # consecutive turns of one role are combined
        [user(), system()],  # a mid-conversation system message after a user turn
        [user(), uses("a"), results("a"), system()],
        [{"role": "user", "content": "plain text"}],
    ],
    ids=lambda m: "-".join(x["role"][0] for x in m),
)
def test_messages_accepts_a_well_formed_conversation(messages):
    assert anthropic_rejection(messages_body(*messages)) is None


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (
            [user(), uses("a")],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately"
            " after: a. Each `tool_use` block must have a corresponding `tool_result` block in"
            " the next message.",
        ),
        (
            [user(), uses("a", "b"), results("a"), user("ask")],
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately"
            " after: b.",
        ),
        ([user(), uses("call_0001"), user("ask")], "immediately after: call_0001."),
        (
            [user(), uses("a"), user("ask"), results("a")],
            "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message."
            " Messages following `tool_use` blocks must begin with a matching number of"
            " `tool_result` blocks.",
        ),
        (
            [user(), uses("a"), results("a", "zz")],
            "messages.2.content.1: unexpected `tool_use_id` found in `tool_result` blocks: zz."
            " Each `tool_result` block must have a corresponding `tool_use` block in the"
            " previous message.",
        ),
        ([user(), results("x")], "unexpected `tool_use_id` found in `tool_result` blocks: x."),
        (
            [user(), uses("a"), results("a"), uses("a"), results("a")],
            "messages.3.content.0: `tool_use` ids must be unique",
        ),
        ([system(), user()], "messages.0: a `system` message must immediately follow a `user`"),
        ([user(), said(), system(), user()], "messages.2: a `system` message must immediately"),
        ([user(), system(), system()], "messages.2: a `system` message must immediately"),
        ([{"role": "developer", "content": "x"}], "messages.0.role: Input should be 'user',"),
        ([user(""), said()], "messages: text content blocks must be non-empty"),
        (
            [user(), {"role": "assistant", "content": []}, user()],
            "messages.1: all messages must have non-empty content except for the optional"
            " final assistant message",
        ),
        ([{"role": "user", "content": ""}], "messages.0: all messages must have non-empty"),
        ([user(), said()], "This model does not support assistant message prefill."),
        ([], "messages: at least one message is required"),
    ],
)
def test_messages_refuses_what_the_api_refuses(messages, message):
    rejection = anthropic_rejection(messages_body(*messages))
    assert rejection is not None and message in rejection.message
    assert (rejection.status, rejection.error_type) == (400, "invalid_request_error")


def tool(name, schema_type="object", **extra):
    return {"name": name, "description": "d", "input_schema": {"type": schema_type}, **extra}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (
            [tool("git_diff"), tool("read file")],
            "tools.1.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
        ),
        ([tool("x" * 129)], "tools.0.custom.name: String should match pattern"),
        ([tool("git_diff"), tool("git_diff")], "tools: Tool names must be unique."),
        ([tool("git_diff", "array")], "tools.0.custom.input_schema.type: Input should be"),
        (
            [tool(f"t{n}", cache_control={"type": "ephemeral"}) for n in range(4)],
            "A maximum of 4 blocks with cache_control may be provided. Found 5.",
        ),
    ],
)
def test_messages_refuses_invalid_tools(tools, message):
    rejection = anthropic_rejection(messages_body(user(), tools=tools))
    assert rejection is not None and rejection.message.startswith(message)


def test_messages_requires_max_tokens():
    body = messages_body(user())
    del body["max_tokens"]
    assert anthropic_rejection(body).message == "max_tokens: Field required"


def ask(text="Review this."):
    return {"role": "user", "content": text}


def call(call_id):
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": "git_diff",
        "arguments": "{}",
        "status": "completed",
    }


def output(call_id):
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def answer(text="Done."):
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def responses_body(*items, tools=None):
    names = ["git_diff", "submit_review"] if tools is None else tools
    return {
        "model": "gpt-5.3-codex",
        "instructions": "You review code.",
        "input": list(items),
        "tools": [{"type": "function", "name": n, "parameters": {}} for n in names],
        "store": False,
    }


@pytest.mark.parametrize(
    "items",
    [
        [ask()],
        [ask(), call("a"), output("a"), answer()],
        [ask(), call("a"), call("b"), output("a"), output("b")],
        [ask(), call("a"), answer(), output("a")],  # an output need not be adjacent
        [ask(), ask("more")],
        [{"role": "system", "content": "s"}, {"role": "developer", "content": "d"}, ask()],
    ],
)
def test_responses_accepts_a_well_formed_input(items):
    assert openai_rejection(responses_body(*items)) is None


@pytest.mark.parametrize(
    ("items", "message", "param", "code"),
    [
        (
            [ask(), call("call_0001"), ask("ask")],
            "No tool output found for function call call_0001.",
            "input",
            None,
        ),
        (
            [ask(), output("call_9")],
            "No tool call found for function call output with call_id call_9.",
            "input",
            None,
        ),
        (
            [ask(), output("a"), call("a")],
            "No tool call found for function call output with call_id a.",
            "input",
            None,
        ),
        (
            [{"role": "tool", "content": "x"}],
            "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer',"
            " and 'user'.",
            "input[0].role",
            "invalid_value",
        ),
        (
            [ask(), {"role": "user", "content": []}],
            "Invalid 'input[1].content': empty array. Expected an array with minimum length 1,"
            " but got an empty array instead.",
            "input[1].content",
            "empty_array",
        ),
    ],
)
def test_responses_refuses_what_the_api_refuses(items, message, param, code):
    rejection = openai_rejection(responses_body(*items))
    assert rejection is not None
    assert (rejection.message, rejection.param, rejection.code) == (message, param, code)


@pytest.mark.parametrize(
    ("name", "message", "code"),
    [
        (
            "bot.read",
            "Invalid 'tools[1].name': string does not match pattern. Expected a string that"
            " matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "invalid_value",
        ),
        (
            "x" * 65,
            "Invalid 'tools[1].name': string too long. Expected a string with maximum length 64,"
            " but got a string with length 65 instead.",
            "string_above_max_length",
        ),
    ],
)
def test_responses_refuses_invalid_tool_names(name, message, code):
    rejection = openai_rejection(responses_body(ask(), tools=["git_diff", name]))
    assert (rejection.message, rejection.param, rejection.code) == (message, "tools[1].name", code)


async def test_the_anthropic_sdk_sees_the_real_error_shape(anthropic_standin):
    client = anthropic.AsyncAnthropic(max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as raised:
        await client.messages.create(
            model="claude-sonnet-5-5",
            max_tokens=64,
            messages=[user(), uses("toolu_1"), user("and now?")],
        )
    await client.close()
    error = raised.value
    assert error.status_code == 400 and error.request_id
    assert error.body["type"] == "error"
    assert error.body["error"]["type"] == "invalid_request_error"
    assert "toolu_1" in error.body["error"]["message"]
    assert len(anthropic_standin.rejected) == 1
    anthropic_standin.rejected.clear()  # refused on purpose


async def test_the_openai_sdk_sees_the_real_error_shape(openai_standin):
    client = openai.AsyncOpenAI(max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        await client.responses.create(
            model="gpt-5.3-codex", input=[ask(), call("call_0001"), ask("and now?")], store=False
        )
    await client.close()
    error = raised.value
    assert error.status_code == 400
    assert (error.type, error.param, error.code) == ("invalid_request_error", "input", None)
    assert error.body["message"] == "No tool output found for function call call_0001."
    openai_standin.rejected.clear()  # refused on purpose
