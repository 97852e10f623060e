"""`claude`: the Anthropic Messages API tool-use loop (official anthropic SDK)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic

from bot.agents.base import ModelReply, ProviderRequest, ToolCall, Usage

MAX_OUTPUT_TOKENS = 8192
REQUEST_TIMEOUT = 180.0
CACHED = {"type": "ephemeral"}
# `stop_reason`s of an answer cut off before its end (its last tool call may be incomplete).
CUT_OFF = ("max_tokens", "model_context_window_exceeded")


@dataclass
class ClaudeProvider:
    name = "claude"
    fallback_rate = None  # every model's rate is in rates.json or unknown
    client: anthropic.AsyncAnthropic
    model: str
    timeout: float | None = None  # None: REQUEST_TIMEOUT

    async def send(self, request: ProviderRequest) -> ModelReply:
        tools = [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in request.tools
        ]
        if tools:  # cache the long, stable prefix: system prompt and tool definitions
            tools[-1] = {**tools[-1], "cache_control": CACHED}
        response = await self.client.messages.create(
            model=self.model,
            max_tokens=MAX_OUTPUT_TOKENS,
            system=[{"type": "text", "text": request.system, "cache_control": CACHED}],
            tools=tools,
            messages=rolling_breakpoints(merge_roles(request.messages)),
            timeout=self.timeout or REQUEST_TIMEOUT,
        )
        blocks = [block.to_dict() for block in response.content]
        usage = response.usage
        return ModelReply(
            text="\n".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip(),
            usage=Usage(
                input_tokens=usage.input_tokens or 0,
                output_tokens=usage.output_tokens or 0,
                cache_read_tokens=usage.cache_read_input_tokens or 0,
                cache_write_tokens=usage.cache_creation_input_tokens or 0,
            ),
            # An empty answer is not stored: the API refuses an empty message (or text block).
            items=[{"role": "assistant", "content": blocks}] if blocks else [],
            model=response.model or self.model,
            cut_off=response.stop_reason in CUT_OFF,
        )

    def user_message(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "text", "text": text}]}]

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        return [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": output,
                        **({"is_error": True} if is_error else {}),
                    }
                    for call, output, is_error in results
                ],
            }
        ]


def merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive messages of one role (a tool result then a person's text)."""
    merged: list[dict[str, Any]] = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if merged and merged[-1]["role"] == message["role"]:
            merged[-1] = {"role": message["role"], "content": [*merged[-1]["content"], *blocks]}
        else:
            merged.append({"role": message["role"], "content": list(blocks)})
    return merged


def rolling_breakpoints(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cache breakpoints on the last block of the newest user turn (written now, so the next
    request reads the whole conversation so far from the cache) and of the user turn before
    it (what the previous request wrote: read now, however many blocks the model's reply
    added). With the system prompt's and the tools' that is 4, the API's maximum."""
    marked = list(messages)
    users = [n for n, message in enumerate(marked) if message["role"] == "user"][-2:]
    for n in users:
        content = marked[n]["content"]
        marked[n] = {
            **marked[n],
            "content": [*content[:-1], {**content[-1], "cache_control": CACHED}],
        }
    return marked
