"""The model stand-ins refuse what the real Messages and Responses APIs refuse, with their
status, error shape and wording: a test that sends such a request fails (tests/models.py)."""

from __future__ import annotations

import anthropic
import openai
import pytest

from bot.standin.models import anthropic_rejection, chat_rejection, openai_rejection

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


# -- Chat Completions (vLLM, Ollama, llama.cpp, LiteLLM, Azure OpenAI) ---------------------------


def said_chat(text="Done."):
    return {"role": "assistant", "content": text}


def calls_chat(*ids, arguments="{}"):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "git_diff", "arguments": arguments}}
            for i in ids
        ],
    }


def answers_chat(*ids):
    return [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids]


def chat_body(*messages, tools=("git_diff", "submit_review"), **extra):
    body = {
        "model": "scripted-reviewer",
        "messages": [{"role": "system", "content": "You review code."}, *messages],
        **extra,
    }
    if tools is not None:
        body["tools"] = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in tools
        ]
    return body


@pytest.mark.parametrize(
    "messages",
    [
        [ask()],
        [ask(), calls_chat("a"), *answers_chat("a"), said_chat()],
        [ask(), calls_chat("a", "b"), *answers_chat("b", "a"), ask("And F2?")],  # any order
        [ask(), {**calls_chat("a"), "content": "Reading."}, *answers_chat("a")],
        [ask("one"), ask("two")],
        [ask(), said_chat(), {"role": "developer", "content": "d"}, ask()],
        [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
    ],
    ids=lambda m: "-".join(x["role"][0] for x in m),
)
def test_chat_accepts_a_well_formed_conversation(messages):
    assert chat_rejection(chat_body(*messages)) is None


@pytest.mark.parametrize(
    ("body", "message", "param"),
    [
        (
            chat_body(ask(), calls_chat("call_1"), ask("and now?")),
            "An assistant message with 'tool_calls' must be followed by tool messages responding"
            " to each 'tool_call_id'. The following tool_call_ids did not have response"
            " messages: call_1",
            "messages.[3].role",
        ),
        (
            chat_body(ask(), calls_chat("a", "b"), *answers_chat("a")),
            "An assistant message with 'tool_calls' must be followed by tool messages responding"
            " to each 'tool_call_id'. The following tool_call_ids did not have response"
            " messages: b",
            "messages.[3].role",
        ),
        (
            chat_body(ask(), *answers_chat("x")),
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding"
            " message with 'tool_calls'.",
            "messages.[2].role",
        ),
        (
            chat_body(ask(), calls_chat("a"), *answers_chat("b")),
            "Invalid parameter: 'tool_call_id' of 'b' not found in 'tool_calls' of previous"
            " message.",
            "messages.[3].tool_call_id",
        ),
        (
            chat_body(ask(), calls_chat("a"), *answers_chat("a"), said_chat(), *answers_chat("a")),
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding"
            " message with 'tool_calls'.",
            "messages.[5].role",
        ),
        (
            chat_body(ask(), {"role": "assistant", "content": None}),
            "Invalid value for 'content': expected a string, got null.",
            "messages.[2].content",
        ),
        (
            chat_body(ask(), calls_chat("a", arguments="{"), *answers_chat("a")),
            "Invalid 'messages[2].tool_calls[0]': the call needs an id and its arguments as a"
            " JSON string.",
            "messages[2].tool_calls[0]",
        ),
        (
            chat_body(ask(), {"role": "robot", "content": "x"}),
            "Invalid value: 'robot'. Supported values are: 'system', 'assistant', 'user',"
            " 'function', 'tool', and 'developer'.",
            "messages[2].role",
        ),
        (
            chat_body(ask(), tools=()),
            "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an"
            " empty array instead.",
            "tools",
        ),
        (
            chat_body(ask(), tools=None, tool_choice="auto"),
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are"
            " specified.",
            "tool_choice",
        ),
        (
            chat_body(ask(), tools=None, parallel_tool_calls=False),
            "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when"
            " 'tools' are specified.",
            "parallel_tool_calls",
        ),
        (
            chat_body(ask(), max_tokens=0),
            "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0"
            " instead.",
            "max_tokens",
        ),
        (
            chat_body(ask(), tools=("bot.read",)),
            "Invalid 'tools[0].function.name': string does not match pattern. Expected a string"
            " that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "tools[0].function.name",
        ),
        (
            {"model": "m", "messages": []},
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an"
            " empty array instead.",
            "messages",
        ),
    ],
)
def test_chat_refuses_what_the_servers_refuse(body, message, param):
    rejection = chat_rejection(body)
    assert rejection is not None
    assert (rejection.message, rejection.param) == (message, param)


async def test_the_openai_sdk_sees_a_chat_servers_error_shape(chat_standin):
    client = openai.AsyncOpenAI(base_url=f"{chat_standin.url}/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        await client.chat.completions.create(
            model="scripted-reviewer", messages=[ask(), calls_chat("call_1"), ask("and now?")]
        )
    await client.close()
    error = raised.value
    assert error.status_code == 400 and error.param == "messages.[2].role"
    assert "call_1" in error.body["message"]
    chat_standin.rejected.clear()  # refused on purpose
