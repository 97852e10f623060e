"""Which SDK client and model serve each provider, which is "the other one", what stops one."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import anthropic
import openai

from bot.agents.base import MAX_RETRIES, AgentError, Provider, chat_rate, quoted, server_said
from bot.agents.chat import ChatEndpoint, ChatProvider
from bot.agents.claude import ClaudeProvider
from bot.agents.codex import CodexProvider
from bot.config import PROVIDERS, ConfigError, Settings, in_words
from bot.redaction import register_all, url_passwords
from bot.texts import PEOPLE, say

PROBE_TIMEOUT = 15.0
SDKS = {  # each SDK's client, its error, and the variable it reads its key from
    "claude": (anthropic.AsyncAnthropic, anthropic.AnthropicError, "ANTHROPIC_API_KEY"),
    "codex": (openai.AsyncOpenAI, openai.OpenAIError, "OPENAI_API_KEY"),
}
OLLAMA_DEFAULT_TAG = ":latest"  # Ollama serves `qwen3` as `qwen3:latest`
AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def _not_configured(provider: str, *variables: str) -> AgentError:
    said = say(PEOPLE, "provider_not_configured", provider=provider, variables=variables)
    return AgentError(said)


class ModelClients:
    """One SDK client per provider per process; `chat` reads COCKPIT_CHAT_* only."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._sdks: dict[str, Any] = {}
        self._chat: ChatEndpoint | None = None

    def provider(self, name: str, model: str | None = None) -> Provider:
        timeout = self.settings.model_timeout
        if name == "claude":
            return ClaudeProvider(self._sdk(name), model or self.settings.claude_model, timeout)
        if name == "codex":
            return CodexProvider(self._sdk(name), model or self.settings.codex_model, timeout)
        if name != "chat":
            choices = PROVIDERS
            raise AgentError(say(PEOPLE, "unknown_provider", provider=repr(name), choices=choices))
        chat = self.settings.chat
        if chat is None:
            raise _not_configured("chat", "COCKPIT_CHAT_BASE_URL", "COCKPIT_CHAT_MODEL")
        self._chat = self._chat or ChatEndpoint.connect(chat)
        rate = chat_rate(chat.rates)
        return ChatProvider(self._chat, model or chat.model, timeout, chat.context_tokens, rate)

    def _sdk(self, name: str) -> Any:
        """What the client sends (its key, its base URL's password) is masked everywhere."""
        if name not in self._sdks:
            client_class, error, key = SDKS[name]
            try:
                client = client_class(max_retries=MAX_RETRIES)
            except error as exc:
                raise _not_configured(name, key) from exc
            secrets = [client.api_key, getattr(client, "auth_token", None)]
            register_all([s or "" for s in secrets] + url_passwords(str(client.base_url)))
            self._sdks[name] = client
        return self._sdks[name]

    def configured(self, name: str) -> bool:
        try:
            self.provider(name)
        except AgentError:
            return False
        client = self._sdks.get(name)
        return client is None or bool(client.api_key or getattr(client, "auth_token", None))

    def available(self) -> list[str]:
        return [p for p in PROVIDERS if self.configured(p)]

    async def close(self) -> None:
        for client in [*self._sdks.values(), *([self._chat.client] if self._chat else [])]:
            await client.close()


def other_provider(reviewer: str, available: Collection[str]) -> str:
    """The second opinion on `reviewer`'s draft: the first other provider configured here; the
    reviewer's own when it is the only one (local models only still get a critique)."""
    return next((p for p in PROVIDERS if p != reviewer and p in available), reviewer)


async def probe(settings: Settings, provider: str) -> list[str]:
    """What stops `provider` from working here, one line each with what to do (empty: ready).
    `chat`: its server answers `GET /models` and lists COCKPIT_CHAT_MODEL."""
    clients = ModelClients(settings)
    try:
        if provider in SDKS:
            if clients.configured(provider):
                return []
            return [_problem(SDKS[provider][2], "model_key", provider=provider)]
        if provider != "chat":
            return [say(PEOPLE, "unknown_provider", provider=repr(provider), choices=PROVIDERS)]
        chat = settings.chat
        if chat is None:
            return [_problem("COCKPIT_CHAT_BASE_URL", "chat_unset")]
        return await _probe_chat(clients, chat.model)
    finally:
        await clients.close()


class Unanswered(str):
    """A server not answering: nothing in the settings to change (check-config exits 1)."""


def _problem(variable: str, why: str, **context: object) -> str:
    return str(ConfigError(variable, why, **context))


async def _probe_chat(clients: ModelClients, model: str) -> list[str]:
    provider = clients.provider("chat")
    assert isinstance(provider, ChatProvider)
    endpoint = provider.endpoint
    try:
        page = await endpoint.client.with_options(max_retries=0).models.list(
            extra_headers=endpoint.headers, timeout=PROBE_TIMEOUT
        )
    except openai.APIConnectionError as exc:
        return [Unanswered(_problem("COCKPIT_CHAT_BASE_URL", "chat_silent", reason=in_words(exc)))]
    except openai.APIStatusError as exc:
        said = quoted(server_said(exc.body), 200)
        if exc.status_code in (401, 403):
            keyless, status = endpoint.keyless, exc.status_code
            return [_problem("COCKPIT_CHAT_API_KEY", "chat_key", keyless=keyless, status=status)]
        if exc.status_code == 404:
            return [_problem("COCKPIT_CHAT_BASE_URL", "chat_no_models")]
        status = exc.status_code
        problem = _problem("COCKPIT_CHAT_BASE_URL", "chat_models", status=status, said=said)
        return [Unanswered(problem) if status >= 500 else problem]
    host = (endpoint.client.base_url.host or "").lower()
    if host.endswith(AZURE_HOSTS):
        return []  # deployments are not listed; the deployment name is checked by its first run
    served = [m.id for m in page.data]
    if model in served or f"{model}{OLLAMA_DEFAULT_TAG}" in served:
        return []
    return [_problem("COCKPIT_CHAT_MODEL", "chat_unlisted", model=model, served=served)]
