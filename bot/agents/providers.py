"""Provider options in one place: which SDK client and model serve `claude` and `codex`."""

from __future__ import annotations

import anthropic
import openai

from bot.agents.base import AgentError, Provider
from bot.agents.claude import ClaudeProvider
from bot.agents.codex import CodexProvider
from bot.config import Settings


class ModelClients:
    """One SDK client per provider per process (connection reuse); keys come from the SDKs'
    own environment variables. SDK retries are off: the agent loop retries with budgets."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._anthropic: anthropic.AsyncAnthropic | None = None
        self._openai: openai.AsyncOpenAI | None = None

    def provider(self, name: str, model: str | None = None) -> Provider:
        if name == "claude":
            if self._anthropic is None:
                try:
                    self._anthropic = anthropic.AsyncAnthropic(max_retries=0)
                except anthropic.AnthropicError as exc:
                    raise AgentError("claude is not configured: set ANTHROPIC_API_KEY") from exc
            return ClaudeProvider(self._anthropic, model or self.settings.claude_model)
        if name == "codex":
            if self._openai is None:
                try:
                    self._openai = openai.AsyncOpenAI(max_retries=0)
                except openai.OpenAIError as exc:
                    raise AgentError("codex is not configured: set OPENAI_API_KEY") from exc
            return CodexProvider(self._openai, model or self.settings.codex_model)
        raise AgentError(f"unknown provider {name!r}; use claude or codex")

    def configured(self, name: str) -> bool:
        """Whether `name` can be used here: its SDK found a key in the environment."""
        try:
            self.provider(name)
        except AgentError:
            return False
        if name == "claude":
            assert self._anthropic is not None
            return bool(self._anthropic.api_key or self._anthropic.auth_token)
        return True

    async def close(self) -> None:
        for client in (self._anthropic, self._openai):
            if client is not None:
                await client.close()
