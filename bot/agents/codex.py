"""`codex`: the OpenAI Responses API (official openai SDK), the conversation resent in full."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import openai

from bot.agents.base import ModelReply, ProviderRequest, ToolCall, Usage

MAX_OUTPUT_TOKENS = 16_000
REQUEST_TIMEOUT = 300.0


@dataclass
class CodexProvider:
    name = "codex"
    fallback_rate = None  # every model's rate is in rates.json or unknown
    client: openai.AsyncOpenAI
    model: str
    timeout: float | None = None  # None: REQUEST_TIMEOUT

    async def send(self, request: ProviderRequest) -> ModelReply:
        tools = [{"type": "function", **tool, "strict": False} for tool in request.tools]
        response = await self.client.responses.create(
            model=self.model,
            instructions=request.system,
            input=request.messages,
            tools=tools,
            store=False,
            include=["reasoning.encrypted_content"],
            prompt_cache_key=request.cache_key,
            max_output_tokens=MAX_OUTPUT_TOKENS,
            timeout=self.timeout or REQUEST_TIMEOUT,
        )
        items = [item.to_dict() for item in response.output]
        usage = response.usage
        cached = 0
        if usage and usage.input_tokens_details:
            cached = usage.input_tokens_details.cached_tokens or 0
        return ModelReply(
            text=(response.output_text or "").strip(),
            usage=Usage(
                input_tokens=(usage.input_tokens - cached) if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                cache_read_tokens=cached,
            ),
            items=items,
            model=response.model or self.model,
            cut_off=response.status == "incomplete"
            and getattr(response.incomplete_details, "reason", None) == "max_output_tokens",
        )

    def user_message(self, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": text}]

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        return [
            {
                "type": "function_call_output",
                "call_id": call.id,
                "output": output if not is_error else json.dumps({"error": output}),
            }
            for call, output, is_error in results
        ]
