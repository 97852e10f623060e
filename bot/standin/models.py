"""Local stand-ins for the Anthropic Messages API, the OpenAI Responses API and an
OpenAI-compatible Chat Completions server (vLLM, Ollama, llama.cpp, LiteLLM, Azure OpenAI).

Real HTTP on 127.0.0.1, so the official SDK clients are exercised end to end (pointed here
with ANTHROPIC_BASE_URL / OPENAI_BASE_URL / COCKPIT_CHAT_BASE_URL). Each turn is answered by
a `Policy`: a function of the conversation so far, normalised across providers, returning
the next action.

They are as strict as the real APIs: a request the real API answers with 400 (a tool call
left without its result, a result for an unknown call, a misplaced system message, an empty
message, an invalid tool name …) gets the same status and error shape here, before any
policy sees it (`anthropic_rejection`, `openai_rejection`, `chat_rejection`), so every test
catches it. The chat stand-in also has the known quirks of real servers, switched on one by
one (`CHAT_QUIRKS`).
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.standin import serve_local


@dataclass
class Conversation:
    """A provider request, normalised: what the policy needs to decide the next step."""

    system: str
    tools: list[str]
    user_texts: list[str]
    tool_calls: list[tuple[str, dict]]  # (name, arguments) made so far, in order
    tool_results: list[str]
    raw: dict[str, Any]
    events: list[tuple[str, Any]] = field(default_factory=list)  # ("user"|"call"|"result", …)

    @property
    def last_user_text(self) -> str:
        return self.user_texts[-1] if self.user_texts else ""

    def result_of(self, name: str) -> str | None:
        """The newest answer of a call to tool `name` that ran (an error is no answer: a
        model calls again)."""
        for (called, _), result in zip(
            reversed(self.tool_calls), reversed(self.tool_results), strict=False
        ):
            if called == name and not result.startswith(("error: ", '{"error": ')):
                return result
        return None


@dataclass
class Action:
    """`tool` calls (name, args) pairs; `text` answers in prose; a `status` other than 200
    sends an HTTP error in the API's shape, saying `error_message` (`{key}` in it: the key the
    request carried, as some gateways echo it); `raw` answers with that body and content type
    instead of the API's answer (a proxy's page, a stream nobody asked for); `delay` holds
    the answer that long (a slow or hanging model). `usage` (input, output tokens[, cache-read
    tokens: the Anthropic stand-in only]) is reported as given; None: the stand-in counts them
    (the Anthropic one from the request, its prompt cache and its answer; the others report
    `DEFAULT_USAGE`)."""

    tools: list[tuple[str, dict]] = field(default_factory=list)
    text: str = ""
    status: int = 200
    error_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, ...] | None = None
    delay: float = 0.0
    error_message: str = "stand-in error"
    raw: tuple[str, str] | None = None


Policy = Callable[[Conversation], Action]
DEFAULT_USAGE = (1200, 300)


def call(name: str, **arguments: Any) -> Action:
    return Action(tools=[(name, arguments)])


def say(text: str) -> Action:
    return Action(text=text)


def hang(seconds: float, then: Action | None = None) -> Action:
    """Answer only after `seconds` (past the client's timeout, it never arrives)."""
    return Action(**{**(then or fail(500)).__dict__, "delay": seconds})


def fail(
    status: int,
    error_type: str = "overloaded_error",
    headers: dict[str, str] | None = None,
    message: str = "stand-in error",
) -> Action:
    """An HTTP error; it asks a retrying client to wait a millisecond (the SDKs' own backoff
    starts at half a second, which a test suite would sit through)."""
    if headers is None:
        headers = {"retry-after-ms": "1"}
    return Action(status=status, error_type=error_type, headers=headers, error_message=message)


def broken(body: str, content_type: str = "application/json") -> Action:
    """A 200 answer that is not the API's: `body` as it is, with this content type."""
    return Action(raw=(body, content_type))


@dataclass(frozen=True)
class Rejection:
    """Why the real API would refuse a request: its status, error type and message (and, for
    OpenAI, the `param` and `code` it names)."""

    message: str
    param: str | None = None
    code: str | None = None
    status: int = 400
    error_type: str = "invalid_request_error"


_ANTHROPIC_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_ANTHROPIC_ROLES = ("user", "assistant", "system")
MAX_CACHE_BREAKPOINTS = 4
NO_PREFILL = (
    "This model does not support assistant message prefill. The conversation must end with a"
    " user message."
)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


def _cache_breakpoints(body: dict[str, Any]) -> int:
    system = body.get("system")
    blocks = [*(system if isinstance(system, list) else []), *(body.get("tools") or [])]
    for message in body.get("messages") or []:
        blocks.extend(_blocks(message.get("content")))
    return sum(1 for block in blocks if isinstance(block, dict) and block.get("cache_control"))


def anthropic_rejection(body: dict[str, Any]) -> Rejection | None:
    """What the Messages API answers 400 to, with its own wording (None: accepted).

    Consecutive turns of one role are combined into one turn, as the API does, before the
    tool pairing is checked: a person's text stored between a `tool_use` and its
    `tool_result` then breaks the rule that results open the next user turn."""
    if "max_tokens" not in body:
        return Rejection("max_tokens: Field required")
    names = []
    for n, tool in enumerate(body.get("tools") or []):
        name = tool.get("name")
        if not isinstance(name, str) or not _ANTHROPIC_TOOL_NAME.match(name):
            return Rejection(
                f"tools.{n}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return Rejection(f"tools.{n}.custom.input_schema.type: Input should be 'object'")
        names.append(name)
    if len(set(names)) != len(names):
        return Rejection("tools: Tool names must be unique.")
    breakpoints = _cache_breakpoints(body)
    if breakpoints > MAX_CACHE_BREAKPOINTS:
        return Rejection(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided."
            f" Found {breakpoints}."
        )
    messages = body.get("messages") or []
    if not messages:
        return Rejection("messages: at least one message is required")
    for n in range(len(messages)):
        rejection = _anthropic_message(messages, n)
        if rejection is not None:
            return rejection
    return _anthropic_turns(messages)


def _anthropic_message(messages: list[dict[str, Any]], n: int) -> Rejection | None:
    message = messages[n]
    role = message.get("role")
    if role not in _ANTHROPIC_ROLES:
        return Rejection(f"messages.{n}.role: Input should be 'user', 'assistant' or 'system'")
    blocks = _blocks(message.get("content"))
    if not blocks and not (role == "assistant" and n == len(messages) - 1):
        return Rejection(
            f"messages.{n}: all messages must have non-empty content except for the optional"
            " final assistant message"
        )
    if any(b.get("type") == "text" and not b.get("text") for b in blocks):
        return Rejection("messages: text content blocks must be non-empty")
    if role == "system":  # mid-conversation system messages (placement rules)
        if n == 0 or messages[n - 1].get("role") != "user":
            return Rejection(
                f"messages.{n}: a `system` message must immediately follow a `user` message"
            )
        if any(b.get("type") != "text" for b in blocks):
            return Rejection(f"messages.{n}.content: a `system` message takes text blocks only")
    return None


def _anthropic_turns(messages: list[dict[str, Any]]) -> Rejection | None:
    turns: list[tuple[str, int, list[dict[str, Any]]]] = []  # (role, first index, blocks)
    for n, message in enumerate(messages):
        role, blocks = message["role"], _blocks(message["content"])
        if turns and turns[-1][0] == role and role != "system":
            turns[-1] = (role, turns[-1][1], [*turns[-1][2], *blocks])
        else:
            turns.append((role, n, blocks))
    used: set[str] = set()
    for t, (role, n, blocks) in enumerate(turns):
        before = turns[t - 1] if t else None
        called = (
            [b["id"] for b in before[2] if b.get("type") == "tool_use"]
            if before is not None and before[0] == "assistant"
            else []
        )
        for k, block in enumerate(blocks):
            if block.get("type") == "tool_use":
                if block.get("id") in used:
                    return Rejection(f"messages.{n}.content.{k}: `tool_use` ids must be unique")
                used.add(block.get("id"))
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                return Rejection(
                    f"messages.{n}.content.{k}: unexpected `tool_use_id` found in `tool_result`"
                    f" blocks: {block.get('tool_use_id')}. Each `tool_result` block must have a"
                    " corresponding `tool_use` block in the previous message."
                )
        if role == "assistant":
            rejection = _answered(n, blocks, turns[t + 1] if t + 1 < len(turns) else None)
            if rejection is not None:
                return rejection
    if turns[-1][0] == "assistant":
        return Rejection(NO_PREFILL)
    return None


def _answered(
    n: int, blocks: list[dict[str, Any]], after: tuple[str, int, list[dict[str, Any]]] | None
) -> Rejection | None:
    """Every `tool_use` of an assistant turn is answered at the start of the next turn."""
    calls = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    if not calls:
        return None
    following = after[2] if after is not None and after[0] == "user" else []
    answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
    missing = [call for call in calls if call not in answered]
    if missing:
        return Rejection(
            f"messages.{n}: `tool_use` ids were found without `tool_result` blocks immediately"
            f" after: {', '.join(missing)}. Each `tool_use` block must have a corresponding"
            " `tool_result` block in the next message."
        )
    leading = itertools.takewhile(lambda b: b.get("type") == "tool_result", following)
    if len(list(leading)) < len(calls):
        assert after is not None
        return Rejection(
            f"messages.{after[1]}: Did not find {len(calls)} `tool_result` block(s) at the"
            " beginning of this message. Messages following `tool_use` blocks must begin with a"
            " matching number of `tool_result` blocks."
        )
    return None


_OPENAI_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
_OPENAI_ROLES = ("user", "assistant", "system", "developer")
MAX_OPENAI_TOOL_NAME = 64


def openai_rejection(body: dict[str, Any]) -> Rejection | None:
    """What the Responses API answers 400 to, with its own wording (None: accepted)."""
    for n, tool in enumerate(body.get("tools") or []):
        if tool.get("type") != "function":
            continue
        name, param = str(tool.get("name") or ""), f"tools[{n}].name"
        if not _OPENAI_TOOL_NAME.match(name):
            return Rejection(
                f"Invalid '{param}': string does not match pattern. Expected a string that"
                " matches the pattern '^[a-zA-Z0-9_-]+$'.",
                param,
                "invalid_value",
            )
        if len(name) > MAX_OPENAI_TOOL_NAME:
            return Rejection(
                f"Invalid '{param}': string too long. Expected a string with maximum length"
                f" {MAX_OPENAI_TOOL_NAME}, but got a string with length {len(name)} instead.",
                param,
                "string_above_max_length",
            )
    items = body.get("input")
    if not isinstance(items, list):
        return None
    calls: list[str] = []
    answered: set[str] = set()
    for n, item in enumerate(items):
        kind = item.get("type") or "message"
        if kind == "message":
            if item.get("role") not in _OPENAI_ROLES:
                return Rejection(
                    f"Invalid value: '{item.get('role')}'. Supported values are: 'assistant',"
                    " 'system', 'developer', and 'user'.",
                    f"input[{n}].role",
                    "invalid_value",
                )
            if isinstance(item.get("content"), list) and not item["content"]:
                return Rejection(
                    f"Invalid 'input[{n}].content': empty array. Expected an array with minimum"
                    " length 1, but got an empty array instead.",
                    f"input[{n}].content",
                    "empty_array",
                )
        elif kind == "function_call":
            calls.append(item.get("call_id"))
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return Rejection(
                    "No tool call found for function call output with call_id"
                    f" {item.get('call_id')}.",
                    "input",
                )
            answered.add(item.get("call_id"))
    for call_id in calls:
        if call_id not in answered:
            return Rejection(f"No tool output found for function call {call_id}.", "input")
    return None


_CHAT_ROLES = ("system", "assistant", "user", "function", "tool", "developer")


def _empty(param: str) -> Rejection:
    return Rejection(
        f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got an"
        " empty array instead.",
        param,
        "empty_array",
    )


def chat_rejection(body: dict[str, Any]) -> Rejection | None:
    """What a Chat Completions server answers 400 to, in OpenAI's wording (None: accepted).

    OpenAI's rules: a call answered by `tool` messages right after its assistant message, a
    `tool` message only there and only for a call of that message, no empty arrays, valid
    tool names, `tool_choice` and `parallel_tool_calls` only with tools. And vLLM's: the
    arguments of a call in the history are parsed (for the chat template), so they must be
    JSON."""
    tools = body.get("tools")
    if tools is not None:
        if not tools:
            return _empty("tools")
        for n, tool in enumerate(tools):
            name = str((tool.get("function") or {}).get("name") or "")
            param = f"tools[{n}].function.name"
            if tool.get("type") != "function" or not _OPENAI_TOOL_NAME.match(name):
                return Rejection(
                    f"Invalid '{param}': string does not match pattern. Expected a string that"
                    " matches the pattern '^[a-zA-Z0-9_-]+$'.",
                    param,
                    "invalid_value",
                )
            if len(name) > MAX_OPENAI_TOOL_NAME:
                return Rejection(
                    f"Invalid '{param}': string too long. Expected a string with maximum length"
                    f" {MAX_OPENAI_TOOL_NAME}, but got a string with length {len(name)} instead.",
                    param,
                    "string_above_max_length",
                )
    for option in ("tool_choice", "parallel_tool_calls"):
        if option in body and not tools:
            return Rejection(
                f"Invalid value for '{option}': '{option}' is only allowed when 'tools' are"
                " specified.",
                option,
            )
    for option in ("max_tokens", "max_completion_tokens"):
        value = body.get(option)
        if value is not None and (not isinstance(value, int) or value < 1):
            return Rejection(
                f"Invalid '{option}': integer below minimum value. Expected a value >= 1, but"
                f" got {value} instead.",
                option,
                "integer_below_min_value",
            )
    messages = body.get("messages")
    if not messages:
        return _empty("messages")
    pending: list[str] = []  # calls of the last assistant message not yet answered
    answering = False  # inside the run of `tool` messages after an assistant's calls
    for n, message in enumerate(messages):
        role = message.get("role")
        if role not in _CHAT_ROLES:
            return Rejection(
                f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user',"
                " 'function', 'tool', and 'developer'.",
                f"messages[{n}].role",
                "invalid_value",
            )
        if role != "tool" and pending:
            return Rejection(
                "An assistant message with 'tool_calls' must be followed by tool messages"
                " responding to each 'tool_call_id'. The following tool_call_ids did not have"
                f" response messages: {', '.join(pending)}",
                f"messages.[{n}].role",
            )
        if role == "tool":
            rejection = _chat_tool_message(n, message, answering, pending)
            if rejection is not None:
                return rejection
            continue
        answering = False
        content = message.get("content")
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls is not None and not calls:
                return _empty(f"messages[{n}].tool_calls")
            if content is None and not calls:
                return Rejection(
                    "Invalid value for 'content': expected a string, got null.",
                    f"messages.[{n}].content",
                )
            for k, call in enumerate(calls or []):
                arguments = (call.get("function") or {}).get("arguments")
                if not call.get("id") or not _json_text(arguments):
                    return Rejection(
                        f"Invalid 'messages[{n}].tool_calls[{k}]': the call needs an id and its"
                        " arguments as a JSON string.",
                        f"messages[{n}].tool_calls[{k}]",
                        "invalid_value",
                    )
            pending = [str(c["id"]) for c in calls or []]
            answering = bool(pending)
        elif content is None:
            return Rejection(
                f"Missing required parameter: 'messages[{n}].content'.",
                f"messages[{n}].content",
                "missing_required_parameter",
            )
        elif isinstance(content, list) and not content:
            return _empty(f"messages[{n}].content")
    if pending:
        return Rejection(
            "An assistant message with 'tool_calls' must be followed by tool messages"
            " responding to each 'tool_call_id'. The following tool_call_ids did not have"
            f" response messages: {', '.join(pending)}",
            f"messages.[{len(messages) - 1}].role",
        )
    return None


def _json_text(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def _chat_tool_message(
    n: int, message: dict[str, Any], answering: bool, pending: list[str]
) -> Rejection | None:
    if not answering:
        return Rejection(
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding"
            " message with 'tool_calls'.",
            f"messages.[{n}].role",
        )
    call_id = message.get("tool_call_id")
    if call_id not in pending:
        return Rejection(
            f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in 'tool_calls' of"
            " previous message.",
            f"messages.[{n}].tool_call_id",
        )
    if message.get("content") is None:
        return Rejection(
            f"Missing required parameter: 'messages[{n}].content'.",
            f"messages[{n}].content",
            "missing_required_parameter",
        )
    pending.remove(call_id)
    return None


def _key_of(request: web.Request) -> str:
    """The key a request carried (`X-Api-Key`, or a bearer token)."""
    bearer = request.headers.get("Authorization", "").removeprefix("Bearer ")
    return request.headers.get("X-Api-Key") or bearer


class _Standin(abc.ABC):
    path = ""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.rejected: list[Rejection] = []  # requests the real API would have refused
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.gate = asyncio.Event()  # clear it to hold every answer (a slow model)
        self.gate.set()

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(self.path, self._handle)
        app.router.add_get("/v1/models/{model}", self._model)
        self._runner, self.url = await serve_local(app)
        return self.url

    async def _model(self, request: web.Request) -> web.Response:
        """`GET /v1/models/{id}` (what `cockpit check-config` asks): every id exists here."""
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return self._error(401, "authentication_error", {})
        return web.json_response(self.model_info(request.match_info["model"]))

    def model_info(self, model: str) -> dict[str, Any]:
        """The model object the real API answers (provider-specific where it differs)."""
        return {"id": model, "object": "model", "created": 1735689600, "owned_by": "stand-in"}

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        await self.gate.wait()
        if not self.authorized(request.headers.get("Authorization", "")):
            return self._error(401, "authentication_error", {})
        refused = self.precheck(body)
        if refused is not None:
            return refused
        rejection = self.reject(body)
        if rejection is not None:
            self.rejected.append(rejection)
            return self._refuse(rejection)
        action = self.policy(self.normalise(body))
        if action.delay:
            await asyncio.sleep(action.delay)
        if action.status != 200:
            said = action.error_message.replace("{key}", _key_of(request))
            return self._error(action.status, action.error_type, action.headers, said)
        if action.raw is not None:
            text, content_type = action.raw
            return web.Response(text=text, content_type=content_type)
        return web.json_response(self.render(body, action))

    def authorized(self, authorization: str) -> bool:
        """The hosted APIs refuse a request without a key."""
        return authorization.startswith("Bearer ")

    def precheck(self, body: dict[str, Any]) -> web.Response | None:
        """A refusal that is not a defect of the request (a server's quirk), or None."""
        return None

    @abc.abstractmethod
    def reject(self, body: dict[str, Any]) -> Rejection | None:
        """Provider-specific: why the real API would refuse this request."""

    @abc.abstractmethod
    def _refuse(self, rejection: Rejection) -> web.Response:
        """Provider-specific: the real API's error body for a refused request."""

    @abc.abstractmethod
    def normalise(self, body: dict[str, Any]) -> Conversation:
        """Provider-specific."""

    @abc.abstractmethod
    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
        """Provider-specific."""

    @abc.abstractmethod
    def _error(
        self, status: int, error_type: str, headers: dict[str, str], said: str = "stand-in error"
    ) -> web.Response:
        """Provider-specific."""


class AnthropicStandin(_Standin):
    path = "/v1/messages"

    def model_info(self, model: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model,
            "display_name": model,
            "created_at": "2025-01-01T00:00:00Z",
        }

    def reject(self, body: dict[str, Any]) -> Rejection | None:
        return anthropic_rejection(body)

    def _refuse(self, rejection: Rejection) -> web.Response:
        request_id = f"req_{next(self._ids):04d}"
        return web.json_response(
            {
                "type": "error",
                "error": {"type": rejection.error_type, "message": rejection.message},
                "request_id": request_id,
            },
            status=rejection.status,
            headers={"request-id": request_id},
        )

    def normalise(self, body: dict[str, Any]) -> Conversation:
        system = "".join(b.get("text", "") for b in body.get("system") or [])
        conversation = Conversation(
            system, [t["name"] for t in body.get("tools") or []], [], [], [], body
        )
        for message in body["messages"]:
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks:
                if block["type"] == "text" and message["role"] == "user":
                    conversation.user_texts.append(block["text"])
                    conversation.events.append(("user", block["text"]))
                elif block["type"] == "tool_use":
                    conversation.tool_calls.append((block["name"], block.get("input") or {}))
                    conversation.events.append(("call", block["name"]))
                elif block["type"] == "tool_result":
                    result = block.get("content")
                    if isinstance(result, list):
                        result = "".join(part.get("text", "") for part in result)
                    conversation.tool_results.append(result or "")
                    conversation.events.append(("result", result or ""))
        return conversation

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy)
        self.cached: set[str] = set()  # the prompt cache: digests of the prefixes written
        self.usages: list[dict[str, int]] = []  # the usage of each answer, as reported

    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
        """The answer, cut off at the request's `max_tokens` as the API does (`stop_reason:
        max_tokens`; a call cut mid-way keeps the part of its input written so far, as a
        streaming client's partial JSON). Usage as the API reports it (see `prompt_usage`)."""
        content: list[dict[str, Any]] = []
        if action.text:
            content.append({"type": "text", "text": action.text})
        for name, arguments in action.tools:
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{next(self._ids):04d}",
                    "name": name,
                    "input": arguments,
                }
            )
        stop_reason = "tool_use" if action.tools else "end_turn"
        if action.usage is None:
            uncached, written, read = self.prompt_usage(body)
            output = _tokens(content)
            if output > body["max_tokens"]:
                content = _cut_answer(content, body["max_tokens"] * CHARS_PER_TOKEN)
                output, stop_reason = body["max_tokens"], "max_tokens"
        else:
            uncached, output, *more = action.usage
            written, read = 0, (more[0] if more else 0)
        usage = {
            "input_tokens": uncached,
            "output_tokens": output,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }
        self.usages.append(usage)
        return {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }

    def prompt_usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input, cache write, cache read) tokens of a request, as the Messages API counts
        them: the prompt is tools, then system, then messages, block by block; at each
        `cache_control` breakpoint the longest prefix written by an earlier request is looked
        up, at the breakpoint and up to `CACHE_LOOKBACK` blocks before it; it is read from the
        cache; the prefix up to each breakpoint is written (if at least the model's minimum
        cacheable length), the part past what was read paid as a write; what follows the
        last breakpoint is input, with the few tokens that open the model's turn (never
        cached). Tokens are counted as 4 characters each."""
        system = body.get("system") or []
        system = [{"type": "text", "text": system}] if isinstance(system, str) else system
        blocks = [("tools", tool) for tool in body.get("tools") or []]
        blocks += [("system", block) for block in system]
        for message in body["messages"]:
            blocks += [(message["role"], block) for block in _blocks(message["content"])]
        digest = hashlib.sha256(body["model"].encode())
        prefixes: list[tuple[str, int]] = []  # (digest, tokens) of the prompt up to each block
        tokens = 0
        for where, block in blocks:
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            digest.update(json.dumps([where, plain], sort_keys=True).encode())
            tokens += _tokens(plain)
            prefixes.append((digest.hexdigest(), tokens))
        breakpoints = [n for n, (_, block) in enumerate(blocks) if block.get("cache_control")]
        read = 0
        for n in breakpoints:
            for k in range(n, max(n - CACHE_LOOKBACK, -1), -1):
                if prefixes[k][0] in self.cached:
                    read = max(read, prefixes[k][1])
                    break
        written = 0
        minimum = min_cacheable_tokens(body["model"])
        for n in breakpoints:
            key, length = prefixes[n]
            if length >= minimum:
                self.cached.add(key)
                written = max(written, length - read)
        return tokens - read - written + TURN_TOKENS, written, read

    def _error(
        self, status: int, error_type: str, headers: dict[str, str], said: str = "stand-in error"
    ) -> web.Response:
        return web.json_response(
            {"type": "error", "error": {"type": error_type, "message": said}},
            status=status,
            headers=headers,
        )


CHARS_PER_TOKEN = 4
TURN_TOKENS = 3  # what opens the model's turn, after the prompt
CACHE_LOOKBACK = 20  # blocks before a breakpoint where the API looks for an earlier write
# The minimum cacheable prompt by model (shorter prefixes are neither written nor read).
MIN_CACHEABLE = (("opus-5", 512), ("haiku-4-5", 4096), ("opus-4-5", 4096), ("opus-4-6", 4096))


def min_cacheable_tokens(model: str) -> int:
    return next((tokens for part, tokens in MIN_CACHEABLE if part in model), 1024)


def _tokens(value: Any) -> int:
    return math.ceil(len(json.dumps(value)) / CHARS_PER_TOKEN)


def _cut_answer(content: list[dict[str, Any]], chars: int) -> list[dict[str, Any]]:
    """The blocks of an answer that fit in `chars`; the one being written when the limit came
    keeps the part of its text, or of its call's input, written so far."""
    kept = []
    for block in content:
        size = len(json.dumps(block))
        if size <= chars:
            kept.append(block)
            chars -= size
            continue
        field = "text" if block["type"] == "text" else "input"
        overhead = size - len(json.dumps(block[field]))
        kept.append({**block, field: _cut(block[field], chars - overhead)})
        break
    return kept


def _cut(value: Any, chars: int) -> Any:
    """`value` cut to about `chars` characters of JSON: the items, keys and text that fit
    (a partial JSON parser's reading of an answer stopped mid-way)."""
    if isinstance(value, str):
        return value[: max(chars, 0)]
    if isinstance(value, list | dict):
        items = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        kept: list[tuple[Any, Any]] = []
        for key, item in items:
            size = len(json.dumps(item)) + (
                len(json.dumps(key)) + 2 if isinstance(value, dict) else 1
            )
            if size <= chars:
                kept.append((key, item))
                chars -= size
                continue
            if isinstance(item, str | list | dict) and chars > 0:
                kept.append((key, _cut(item, chars)))
            break
        return dict(kept) if isinstance(value, dict) else [item for _, item in kept]
    return value


class OpenAIStandin(_Standin):
    path = "/v1/responses"

    def reject(self, body: dict[str, Any]) -> Rejection | None:
        return openai_rejection(body)

    def _refuse(self, rejection: Rejection) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": rejection.message,
                    "type": rejection.error_type,
                    "param": rejection.param,
                    "code": rejection.code,
                }
            },
            status=rejection.status,
        )

    def normalise(self, body: dict[str, Any]) -> Conversation:
        conversation = Conversation(
            body.get("instructions") or "",
            [t["name"] for t in body.get("tools") or []],
            [],
            [],
            [],
            body,
        )
        for item in body["input"]:
            if item.get("role") == "user":
                content = item["content"]
                if isinstance(content, list):
                    content = "".join(part.get("text", "") for part in content)
                conversation.user_texts.append(content)
                conversation.events.append(("user", content))
            elif item.get("type") == "function_call":
                conversation.tool_calls.append((item["name"], json.loads(item["arguments"])))
                conversation.events.append(("call", item["name"]))
            elif item.get("type") == "function_call_output":
                conversation.tool_results.append(item["output"])
                conversation.events.append(("result", item["output"]))
        return conversation

    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if action.text:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{next(self._ids):04d}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": action.text, "annotations": []}],
                }
            )
        for name, arguments in action.tools:
            n = next(self._ids)
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n:04d}",
                    "call_id": f"call_{n:04d}",
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
            )
        cached = 0 if len(self.requests) == 1 else 800
        usage = action.usage or DEFAULT_USAGE
        return {
            "id": f"resp_{next(self._ids):04d}",
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": {
                "input_tokens": usage[0],
                "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                "output_tokens": usage[1],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": sum(usage),
            },
        }

    def _error(
        self, status: int, error_type: str, headers: dict[str, str], said: str = "stand-in error"
    ) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": said,
                    "type": error_type,
                    "param": None,
                    "code": error_type,
                }
            },
            status=status,
            headers=headers,
        )


# Known quirks of real Chat Completions servers, switched on one by one in `ChatStandin`:
CHAT_QUIRKS = {
    "no_tool_choice": "`tool_choice` is refused (400)",
    "no_parallel_tool_calls": "`parallel_tool_calls` is refused (400); one call a reply",
    "malformed_arguments": "a conversation's first call has arguments that are not JSON",
    "malformed_arguments_always": "every call has arguments that are not JSON",
    "text_instead_of_tool": "a conversation's first final answer comes as text, not a call",
    "vllm_no_auto_tool_choice": "vLLM without --enable-auto-tool-choice: tools are a 400",
    "no_usage": "answers carry no `usage`",
    "max_completion_tokens_only": "`max_tokens` is refused (OpenAI's reasoning models)",
    "no_system_role": "a chat template without a system role (Gemma's): `system` is a 400",
}
VLLM_AUTO_TOOLS = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
FINAL_TOOLS = ("submit_review", "submit_verification")


class ChatStandin(_Standin):
    """An OpenAI-compatible Chat Completions server: `POST /v1/chat/completions` and
    `GET /v1/models`, serving `models` (another model is a 404, as vLLM answers), with a key
    (`api_key`, as `vllm serve --api-key`) or, by default, none: then any Authorization is
    accepted, as local servers do. `quirks` names some of `CHAT_QUIRKS`; `context_tokens`
    refuses longer requests as vLLM does (counting 4 characters a token, as a real tokenizer
    roughly does). `refused` lists what a quirk refused (on purpose, unlike `rejected`)."""

    path = "/v1/chat/completions"

    def __init__(
        self,
        policy: Policy,
        *,
        models: tuple[str, ...] = ("scripted-reviewer",),
        api_key: str | None = None,
        quirks: set[str] | frozenset[str] = frozenset(),
        context_tokens: int | None = None,
    ) -> None:
        super().__init__(policy)
        unknown = set(quirks) - set(CHAT_QUIRKS)
        if unknown:
            raise ValueError(f"unknown quirks: {', '.join(sorted(unknown))}")
        self.models = models
        self.api_key = api_key
        self.quirks = set(quirks)
        self.context_tokens = context_tokens
        self.refused: list[str] = []
        self._quirked: set[tuple[str, str]] = set()  # (quirk, conversation) done once

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(self.path, self._handle)
        app.router.add_get("/v1/models", self._list_models)
        self._runner, self.url = await serve_local(app)
        return self.url

    async def _list_models(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        if not self.authorized(request.headers.get("Authorization", "")):
            return self._error(401, "invalid_request_error", {})
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 1735689600, "owned_by": "stand-in"}
                    for m in self.models
                ],
            }
        )

    def authorized(self, authorization: str) -> bool:
        return self.api_key is None or authorization == f"Bearer {self.api_key}"

    def precheck(self, body: dict[str, Any]) -> web.Response | None:
        quirks = self.quirks
        if "no_tool_choice" in quirks and "tool_choice" in body:
            return self._quirk(400, "tool_choice is not supported by this server", "tool_choice")
        if "no_parallel_tool_calls" in quirks and "parallel_tool_calls" in body:
            return self._quirk(400, "parallel_tool_calls is not supported", "parallel_tool_calls")
        if "max_completion_tokens_only" in quirks and "max_tokens" in body:
            return self._quirk(
                400,
                "Unsupported parameter: 'max_tokens' is not supported with this model. Use"
                " 'max_completion_tokens' instead.",
                "max_tokens",
                "unsupported_parameter",
            )
        if "no_system_role" in quirks and any(
            m.get("role") == "system" for m in body.get("messages") or []
        ):
            return self._quirk(400, "System role not supported", None, 400, "BadRequestError")
        if (
            "vllm_no_auto_tool_choice" in quirks
            and body.get("tools")
            and body.get("tool_choice", "auto") == "auto"
        ):
            return self._quirk(400, VLLM_AUTO_TOOLS, None, 400, "BadRequestError")
        if body.get("model") not in self.models:
            return self._quirk(
                404, f"The model `{body.get('model')}` does not exist.", None, 404, "NotFoundError"
            )
        if self.context_tokens is not None:
            wanted = body.get("max_tokens") or body.get("max_completion_tokens") or 0
            prompt = math.ceil(len(json.dumps([body.get("messages"), body.get("tools")])) / 4)
            if prompt + wanted > self.context_tokens:
                return self._quirk(
                    400,
                    f"This model's maximum context length is {self.context_tokens} tokens."
                    f" However, you requested {prompt + wanted} tokens ({prompt} in the"
                    f" messages, {wanted} in the completion). Please reduce the length of the"
                    " messages or completion.",
                    "messages",
                    400,
                    "BadRequestError",
                )
        return None

    def _quirk(
        self,
        status: int,
        message: str,
        param: str | None,
        code: str | int | None = None,
        error_type: str = "invalid_request_error",
    ) -> web.Response:
        self.refused.append(message)
        return web.json_response(
            {"error": {"message": message, "type": error_type, "param": param, "code": code}},
            status=status,
        )

    def reject(self, body: dict[str, Any]) -> Rejection | None:
        return chat_rejection(body)

    def _refuse(self, rejection: Rejection) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": rejection.message,
                    "type": rejection.error_type,
                    "param": rejection.param,
                    "code": rejection.code,
                }
            },
            status=rejection.status,
        )

    def normalise(self, body: dict[str, Any]) -> Conversation:
        conversation = Conversation(
            "\n\n".join(
                str(m.get("content") or "")
                for m in body["messages"]
                if m.get("role") in ("system", "developer")
            ),
            [str(t["function"]["name"]) for t in body.get("tools") or []],
            [],
            [],
            [],
            body,
        )
        for message in body["messages"]:
            role = message.get("role")
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(part.get("text", "") for part in content)
            if role == "user":
                conversation.user_texts.append(content or "")
                conversation.events.append(("user", content or ""))
            elif role == "assistant":
                for call in message.get("tool_calls") or []:
                    function = call["function"]
                    conversation.tool_calls.append(
                        (function["name"], json.loads(function["arguments"]))
                    )
                    conversation.events.append(("call", function["name"]))
            elif role == "tool":
                conversation.tool_results.append(content or "")
                conversation.events.append(("result", content or ""))
        return conversation

    def _once(self, quirk: str, body: dict[str, Any]) -> bool:
        """The first time `quirk` applies to this conversation (keyed by its first user
        message): True once, then False."""
        first = next((m for m in body["messages"] if m.get("role") == "user"), {})
        key = (quirk, hashlib.sha256(json.dumps(first.get("content")).encode()).hexdigest())
        if key in self._quirked:
            return False
        self._quirked.add(key)
        return True

    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
        text, tools = action.text, list(action.tools)
        finals = [(name, args) for name, args in tools if name in FINAL_TOOLS]
        if finals and "text_instead_of_tool" in self.quirks and self._once("text", body):
            name, arguments = finals[0]
            text = f"Here is my answer for {name}:\n{json.dumps(arguments)}"
            tools = []
        if "no_parallel_tool_calls" in self.quirks:
            tools = tools[:1]
        calls = []
        for name, arguments in tools:
            encoded = json.dumps(arguments)
            if "malformed_arguments_always" in self.quirks or (
                "malformed_arguments" in self.quirks and self._once("malformed", body)
            ):
                encoded = encoded[:-1]  # cut short, as a model that ran out of tokens
            calls.append(
                {
                    "id": f"call_{next(self._ids):04d}",
                    "type": "function",
                    "function": {"name": name, "arguments": encoded},
                }
            )
        message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        response: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids):04d}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "stop",
                    "logprobs": None,
                }
            ],
        }
        if "no_usage" not in self.quirks:
            usage = action.usage or DEFAULT_USAGE
            response["usage"] = {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": sum(usage),
            }
        return response

    def _error(
        self, status: int, error_type: str, headers: dict[str, str], said: str = "stand-in error"
    ) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": said,
                    "type": error_type,
                    "param": None,
                    "code": error_type,
                }
            },
            status=status,
            headers=headers,
        )
