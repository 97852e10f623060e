"""`chat`: any OpenAI-compatible Chat Completions server with tool calling, each quirk handled
here (docs/architecture.md says which and why)."""

from __future__ import annotations

import json
import logging
import math
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import openai

from bot import texts
from bot.agents.base import (
    MAX_RETRIES,
    AgentError,
    ModelReply,
    ProviderRequest,
    ToolCall,
    Usage,
    arguments_problem,
    quoted,
    server_said,
)
from bot.config import ChatSettings
from bot.texts import render

log = logging.getLogger(__name__)

MAX_OUTPUT_TOKENS = 16_000  # the cap sent when the context is known (a quarter of it at most)
REQUEST_TIMEOUT = 300.0  # local models are slow
ASCII_PER_TOKEN = 2.5  # tokenizers average 3 to 4.5 ASCII characters a token on code and prose
MESSAGE_TOKENS = 8  # a message's role markers and separators (chat templates differ)
MIN_CLIPPED_CHARS = 1_000  # a tool result is never cut shorter than this
_THINK = re.compile(r"\A\s*<think>.*?</think>\s*", re.S)
_CONTEXT_FULL = re.compile(  # what servers say of a request longer than the context
    r"context[ _]length|context (window|size)|maximum context|too many tokens"
    r"|prompt is too long|max_model_len|exceeds the available context"
)


async def _no_key() -> str:  # the SDK insists on a key; a local server needs none
    return ""


@dataclass
class ChatEndpoint:
    """One server: its SDK client, and what this process learned about it."""

    client: openai.AsyncOpenAI
    keyless: bool
    output_param: str = "max_tokens"
    scale: dict[str, float] = field(default_factory=dict)  # model -> reported / estimated
    no_system: set[str] = field(default_factory=set)  # models whose template refuses `system`
    unreported: set[str] = field(default_factory=set)  # models whose answers carry no usage

    @classmethod
    def connect(cls, settings: ChatSettings) -> ChatEndpoint:
        key = settings.api_key.reveal() if settings.api_key is not None else ""
        client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=key or _no_key,
            max_retries=MAX_RETRIES,
            # OPENAI_ORG_ID / OPENAI_PROJECT_ID belong to OpenAI, not to this server.
            default_headers={"OpenAI-Organization": openai.Omit(), "OpenAI-Project": openai.Omit()},
        )
        return cls(client, keyless=not key)

    @property
    def headers(self) -> dict[str, Any] | None:
        return {"Authorization": openai.Omit()} if self.keyless else None


@dataclass
class ChatProvider:
    name = "chat"
    endpoint: ChatEndpoint
    model: str
    timeout: float | None = None  # None: REQUEST_TIMEOUT
    context_tokens: int | None = None
    fallback_rate: dict[str, float] | None = None

    @property
    def output_tokens(self) -> int | None:
        if self.context_tokens is None:
            return None
        return min(MAX_OUTPUT_TOKENS, self.context_tokens // 4)

    async def send(self, request: ProviderRequest) -> ModelReply:
        tools = [{"type": "function", "function": tool} for tool in request.tools]
        messages = [{"role": "system", "content": request.system}, *outgoing(request.messages)]
        scale = self.endpoint.scale.get(self.model, 1.0)
        if self.context_tokens is not None:
            assert self.output_tokens is not None
            fitted = fit_context(messages, tools, self.context_tokens - self.output_tokens, scale)
            if fitted.dropped or fitted.clipped:
                fields = {"model": self.model, "context_tokens": self.context_tokens}
                fields |= {"dropped_messages": fitted.dropped, "clipped_results": fitted.clipped}
                fields["estimated_tokens"] = fitted.tokens
                log.warning(
                    "chat conversation trimmed to fit the model's context", extra={"fields": fields}
                )
            messages = fitted.messages
        messages = join_user_turns(messages)
        answer = await self._create(messages, tools)
        text = _THINK.sub("", answer.text).strip()
        stored: dict[str, Any] = {"role": "assistant", "content": text or None}
        if answer.calls:
            stored["tool_calls"] = answer.calls
        said = text + "".join(call["function"]["arguments"] for call in answer.calls)
        return ModelReply(
            text=text,
            usage=self._usage(answer.usage, request_tokens(messages, tools), said),
            # An empty answer is not stored: the API refuses an assistant message with neither.
            items=[stored] if text or answer.calls else [],
            # Recorded under the configured name (an Azure deployment, an Ollama tag): servers
            # answer with another (llama.cpp's file name, Azure's dated model), or none.
            model=self.model,
            cut_off=answer.cut_off,
        )

    async def _create(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> Completion:
        timeout = self.timeout or REQUEST_TIMEOUT
        while True:
            sent = fold_system(messages) if self.model in self.endpoint.no_system else messages
            params: dict[str, Any] = {"model": self.model, "messages": sent, "timeout": timeout}
            if tools:  # an empty list is refused (400) by OpenAI
                params["tools"] = tools
            if self.output_tokens is not None:
                params[self.endpoint.output_param] = self.output_tokens
            try:
                # Read as sent, not as the SDK guesses it (a text body came back as a `str`).
                create = self.endpoint.client.chat.completions.with_raw_response.create
                answer = (await create(**params, extra_headers=self.endpoint.headers)).http_response
                return read_completion(answer.headers.get("content-type", ""), answer.text)
            except openai.APIStatusError as exc:
                said = server_said(exc.body)
                if (
                    exc.status_code == 400
                    and self.endpoint.output_param == "max_tokens"
                    and "max_tokens" in said
                    and "max_completion_tokens" in said
                ):  # OpenAI's reasoning models: the same cap under its newer name, at once
                    self.endpoint.output_param = "max_completion_tokens"
                    log.warning("chat server refused max_tokens; sending max_completion_tokens")
                    continue
                if (
                    exc.status_code == 400
                    and "system role" in said.lower()
                    and self.model not in self.endpoint.no_system
                ):  # a chat template without a system role (Gemma's): the prompt leads the task
                    self.endpoint.no_system.add(self.model)
                    log.warning(
                        "chat model refused a system message; sending it as the task's start"
                    )
                    continue
                if exc.status_code not in (400, 401, 403, 404, 422):
                    raise  # the SDK retried what is transient; the loop describes the rest
                fields = {"status": exc.status_code, "server_said": quoted(said, 1000)}
                log.warning("chat server refused the request", extra={"fields": fields})
                raise AgentError(explain(exc.status_code, said, self.model)) from exc

    def _usage(self, usage: Usage | None, estimated: int, said: str) -> Usage:
        """The usage reported, else an estimate; a report above the estimate scales later ones."""
        if usage is not None:
            reported = usage.input_tokens + usage.cache_read_tokens
            scale = self.endpoint.scale.get(self.model, 1.0)
            if reported > estimated * scale:  # the estimate fell short: trim earlier from now
                self.endpoint.scale[self.model] = reported / estimated * 1.05
            return usage
        if self.model not in self.endpoint.unreported:  # logged once, not at every answer
            self.endpoint.unreported.add(self.model)
            log.warning(
                "chat server sent no usage; recording estimated tokens",
                extra={"fields": {"model": self.model}},
            )
        return Usage(input_tokens=estimated, output_tokens=estimate_tokens(said))

    def user_message(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": text}]

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        return [
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": output if not is_error else f"error: {output}",
            }
            for call, output, is_error in results
        ]


@dataclass(frozen=True)
class Completion:
    text: str
    calls: list[dict[str, Any]]  # as stored: ids unique in the reply, arguments as JSON text
    usage: Usage | None
    cut_off: bool = False  # `finish_reason: "length"`: stopped at the output limit


_JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number"}
_JSON_TYPES |= {str: "string", list: "array"}


def read_completion(content_type: str, body: str) -> Completion:
    """A server's answer, checked as far as it is used; AgentError saying what it sent instead.
    A call's id is made up when a server sends none, or repeats one (9 characters, as Mistral's
    templates need); arguments sent as an object are stored as their JSON text."""
    kind = content_type.split(";", 1)[0].strip().lower()

    def wrong(why: str, value: Any = None, **context: Any) -> AgentError:
        try:
            shown = quoted(json.dumps(value, ensure_ascii=False), 80)
        except (ValueError, RecursionError):  # nested past the limit: the body says enough
            shown = ""
        what = _JSON_TYPES.get(type(value), "object")
        sent = quoted(body, 120)
        said = texts.say(
            texts.PEOPLE, "chat_malformed", why=why, sent=sent, what=what, value=shown, **context
        )
        return AgentError(said)

    if kind == "text/event-stream" or body.lstrip().startswith("data:"):
        raise wrong("stream")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # JSON nested past Python's limit is none it reads
        raise wrong("not_json", content_type=kind) from None
    if not isinstance(data, dict):
        raise wrong("not_object", data)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise wrong("no_choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise wrong("no_message")
    content = message.get("content")
    if isinstance(content, list):  # content parts, as some servers answer
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        for part in parts:
            if not isinstance(part, str):
                raise wrong("content_part", part)
        content = "".join(parts)
    if content is not None and not isinstance(content, str):
        raise wrong("content", content)
    raw_calls = message.get("tool_calls")
    if raw_calls is not None and not isinstance(raw_calls, list):
        raise wrong("tool_calls", raw_calls)
    calls: list[dict[str, Any]] = []
    for call in raw_calls or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or not isinstance(function, dict | None):
            raise wrong("tool_call", call)
        if function is None:
            continue
        call_id = str(call.get("id") or "")
        if not call_id or call_id in {c["id"] for c in calls}:
            call_id = secrets.token_hex(5)[:9]
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        function = {"name": str(function.get("name") or ""), "arguments": arguments}
        calls.append({"id": call_id, "type": "function", "function": function})
    cut_off = choices[0].get("finish_reason") == "length"
    usage = data.get("usage")
    if usage is None:
        return Completion(content or "", calls, None, cut_off)
    if not isinstance(usage, dict):
        raise wrong("usage", usage)

    def count(*path: str) -> int:
        value: Any = usage
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return 0
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise wrong("count", value, field=".".join(("usage", *path)))
        return value

    prompt = count("prompt_tokens")
    cached = min(count("prompt_tokens_details", "cached_tokens"), prompt)
    completion = count("completion_tokens")
    reported = Usage(prompt - cached, completion, cache_read_tokens=cached) if prompt else None
    return Completion(content or "", calls, reported, cut_off)


def outgoing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A call whose arguments were not a JSON object goes back with `{}` (its result told the
    model what was wrong)."""
    sent = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") == "assistant" and calls:
            message = {
                **message,
                "tool_calls": [
                    {**c, "function": {**c["function"], "arguments": "{}"}}
                    if arguments_problem(c.get("function", {}).get("arguments"))
                    else c
                    for c in calls
                ],
            }
        sent.append(message)
    return sent


def join_user_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive user messages as one: some chat templates refuse two user turns in a row."""
    joined: list[dict[str, Any]] = []
    for message in messages:
        before = joined[-1] if joined else None
        if (
            before is not None
            and message.get("role") == "user" == before.get("role")
            and isinstance(message.get("content"), str)
            and isinstance(before.get("content"), str)
        ):
            joined[-1] = {**before, "content": f"{before['content']}\n\n{message['content']}"}
        else:
            joined.append(message)
    return joined


def fold_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    system = "\n\n".join(str(m["content"]) for m in messages if m.get("role") == "system")
    rest = [m for m in messages if m.get("role") != "system"]
    users = [
        n for n, m in enumerate(rest) if m.get("role") == "user" and isinstance(m["content"], str)
    ]
    if not system or not users:
        return messages
    first = users[0]
    rest[first] = {**rest[first], "content": f"{system}\n\n{rest[first]['content']}"}
    return rest


def estimate_tokens(text: str) -> int:
    """Over- rather than under-estimated, without a tokenizer: any non-ASCII character at its
    UTF-8 size (a byte-level tokenizer never needs more than a token a byte)."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return math.ceil(ascii_chars / ASCII_PER_TOKEN) + other_bytes


def request_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    total = estimate_tokens(json.dumps(tools)) if tools else 0
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else json.dumps(content or "")
        calls = message.get("tool_calls")
        total += MESSAGE_TOKENS + estimate_tokens(text)
        total += estimate_tokens(json.dumps(calls)) if calls else 0
    return total


@dataclass(frozen=True)
class Fitted:
    messages: list[dict[str, Any]]
    tokens: int  # estimated (scaled) tokens of what is sent
    dropped: int = 0  # messages left out
    clipped: int = 0  # tool results cut short


def fit_context(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    budget: int,
    scale: float = 1.0,
) -> Fitted:
    """`messages` within `budget` estimated tokens. Kept always: the system prompt, the task
    and the newest exchange. Left out first: whole exchanges, oldest first (a call keeps its
    result), noted in the task; then the longest tool results are cut."""

    def size(candidate: list[dict[str, Any]]) -> int:
        return math.ceil(request_tokens(candidate, tools) * scale)

    if size(messages) <= budget:
        return Fitted(messages, size(messages))
    first = next((n for n, m in enumerate(messages) if m.get("role") == "user"), 0)
    head, units = messages[: first + 1], _exchanges(messages[first + 1 :])
    kept, dropped = units, 0
    while size(_joined(head, kept, dropped)) > budget and len(kept) > 1:
        dropped += len(kept[0])
        kept = kept[1:]
    candidate = _joined(head, kept, dropped)
    clipped = 0
    for n in sorted(
        (n for n, m in enumerate(candidate) if m.get("role") == "tool"),
        key=lambda n: -len(str(candidate[n].get("content") or "")),
    ):
        over = size(candidate) - budget
        if over <= 0:
            break
        content = str(candidate[n].get("content") or "")
        room = len(content) - math.ceil(over / scale * ASCII_PER_TOKEN) - 200
        keep = max(MIN_CLIPPED_CHARS, room)
        if keep >= len(content):
            continue
        marker = render("prompts/context_trimmed.md.j2", kind="clipped", cut=len(content) - keep)
        candidate[n] = {**candidate[n], "content": content[:keep] + "\n" + marker.strip()}
        clipped += 1
    tokens = size(candidate)
    if tokens > budget:
        raise AgentError(texts.say(texts.PEOPLE, "chat_context_full", tokens=tokens, budget=budget))
    return Fitted(candidate, tokens, dropped, clipped)


def _exchanges(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A message with the tool results that follow it: left out together."""
    units: list[list[dict[str, Any]]] = []
    for message in messages:
        if message.get("role") == "tool" and units:
            units[-1].append(message)
        else:
            units.append([message])
    return units


def _joined(
    head: list[dict[str, Any]], kept: list[list[dict[str, Any]]], dropped: int
) -> list[dict[str, Any]]:
    head = list(head)
    if dropped:
        note = render("prompts/context_trimmed.md.j2", kind="note", dropped=dropped).strip()
        task = head[-1]
        content = task.get("content")
        head[-1] = {
            **task,
            "content": f"{content}\n\n{note}"
            if isinstance(content, str)
            else [*(content or []), {"type": "text", "text": note}],
        }
    return [*head, *(m for unit in kept for m in unit)]


def explain(status: int, said: str, model: str) -> str:
    """What the operator (and the PR) is told of a refusal: what is wrong, what to change."""
    shown = quoted(said)
    low = said.lower()
    if status in (401, 403):  # not quoted: a server may echo (part of) the key it refused
        why = "key"
    elif "enable-auto-tool-choice" in low or "tool-call-parser" in low:
        why = "vllm_tools"
    elif "--jinja" in low:
        why = "llama_tools"
    elif "support tools" in low or "tools are not supported" in low:
        why = "no_tools"
    elif _CONTEXT_FULL.search(low):
        why = "context"
    else:
        why = "model" if status == 404 else "other"
    quote = f'{status}: "{shown}"' if shown else str(status)
    return texts.say(texts.PEOPLE, "chat_refused", why=why, status=status, quote=quote, model=model)
