"""Local stand-ins for the Anthropic Messages API and the OpenAI Responses API.

Real HTTP on 127.0.0.1, so the official SDK clients are exercised end to end (pointed here
with ANTHROPIC_BASE_URL / OPENAI_BASE_URL). Each turn is answered by a `Policy`: a function
of the conversation so far, normalised across providers, returning the next action.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import json
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
        for (called, _), result in zip(
            reversed(self.tool_calls), reversed(self.tool_results), strict=False
        ):
            if called == name:
                return result
        return None


@dataclass
class Action:
    """`tool` calls (name, args) pairs; `text` answers in prose; `error` sends an HTTP error;
    `delay` holds the answer that long (a slow or hanging model)."""

    tools: list[tuple[str, dict]] = field(default_factory=list)
    text: str = ""
    status: int = 200
    error_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] = (1200, 300)
    delay: float = 0.0


Policy = Callable[[Conversation], Action]


def call(name: str, **arguments: Any) -> Action:
    return Action(tools=[(name, arguments)])


def say(text: str) -> Action:
    return Action(text=text)


def hang(seconds: float, then: Action | None = None) -> Action:
    """Answer only after `seconds` (past the client's timeout, it never arrives)."""
    return Action(**{**(then or fail(500)).__dict__, "delay": seconds})


def fail(
    status: int, error_type: str = "overloaded_error", headers: dict[str, str] | None = None
) -> Action:
    return Action(status=status, error_type=error_type, headers=headers or {})


class _Standin(abc.ABC):
    path = ""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.url = ""
        self.gate = asyncio.Event()  # clear it to hold every answer (a slow model)
        self.gate.set()

    async def start(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(self.path, self._handle)
        self._runner, self.url = await serve_local(app)
        return self.url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        await self.gate.wait()
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return self._error(401, "authentication_error", {})
        action = self.policy(self.normalise(body))
        if action.delay:
            await asyncio.sleep(action.delay)
        if action.status != 200:
            return self._error(action.status, action.error_type, action.headers)
        return web.json_response(self.render(body, action))

    @abc.abstractmethod
    def normalise(self, body: dict[str, Any]) -> Conversation:
        """Provider-specific."""

    @abc.abstractmethod
    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
        """Provider-specific."""

    @abc.abstractmethod
    def _error(self, status: int, error_type: str, headers: dict[str, str]) -> web.Response:
        """Provider-specific."""


class AnthropicStandin(_Standin):
    path = "/v1/messages"

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

    def render(self, body: dict[str, Any], action: Action) -> dict[str, Any]:
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
        return {
            "id": f"msg_{next(self._ids):04d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if action.tools else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": action.usage[0],
                "output_tokens": action.usage[1],
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0 if len(self.requests) == 1 else 900,
            },
        }

    def _error(self, status: int, error_type: str, headers: dict[str, str]) -> web.Response:
        return web.json_response(
            {"type": "error", "error": {"type": error_type, "message": "stand-in error"}},
            status=status,
            headers=headers,
        )


class OpenAIStandin(_Standin):
    path = "/v1/responses"

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
                "input_tokens": action.usage[0],
                "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
                "output_tokens": action.usage[1],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": sum(action.usage),
            },
        }

    def _error(self, status: int, error_type: str, headers: dict[str, str]) -> web.Response:
        return web.json_response(
            {
                "error": {
                    "message": "stand-in error",
                    "type": error_type,
                    "param": None,
                    "code": error_type,
                }
            },
            status=status,
            headers=headers,
        )
