"""Provider options in one place: which SDK client and model serve `claude`, `codex` and
`chat`, which provider is "the other one", and what stops one from working (`probe`)."""

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
SDK_KEYS = {"claude": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}  # read by the SDKs themselves
SDKS = {
    "claude": (anthropic.AsyncAnthropic, anthropic.AnthropicError),
    "codex": (openai.AsyncOpenAI, openai.OpenAIError),
}
OLLAMA_DEFAULT_TAG = ":latest"  # Ollama serves `qwen3` as `qwen3:latest`
AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


def _not_configured(provider: str, *variables: str) -> AgentError:
    said = say(PEOPLE, "provider_not_configured", provider=provider, variables=variables)
    return AgentError(said)


class ModelClients:
    """One SDK client per provider per process (connection reuse). `claude` and `codex` take
    their keys from the SDKs' own environment variables, `chat` from COCKPIT_CHAT_* only."""

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
        """`claude`'s or `codex`'s SDK client; what it sends (its key, its base URL's password)
        is masked wherever it could be shown."""
        if name not in self._sdks:
            client_class, error = SDKS[name]
            try:
                client = client_class(max_retries=MAX_RETRIES)
            except error as exc:
                raise _not_configured(name, SDK_KEYS[name]) from exc
            secrets = [client.api_key, getattr(client, "auth_token", None)]
            register_all([s or "" for s in secrets] + url_passwords(str(client.base_url)))
            self._sdks[name] = client
        return self._sdks[name]

    def configured(self, name: str) -> bool:
        """Whether `name` can be used here: its SDK found a key in the environment (`chat`:
        its endpoint and model are set; a local server needs no key)."""
        try:
            self.provider(name)
        except AgentError:
            return False
        client = self._sdks.get(name)
        return client is None or bool(client.api_key or getattr(client, "auth_token", None))

    def available(self) -> list[str]:
        """The providers configured here, in `PROVIDERS` order."""
        return [p for p in PROVIDERS if self.configured(p)]

    async def close(self) -> None:
        for client in [*self._sdks.values(), *([self._chat.client] if self._chat else [])]:
            await client.close()


def other_provider(reviewer: str, available: Collection[str]) -> str:
    """The second opinion on `reviewer`'s draft (a cross-AI critique, a verify pass): the
    first provider configured here, in `PROVIDERS` order (claude, codex, chat), that is not
    the reviewer's; the reviewer's own when it is the only one (a fresh session on the same
    model: an installation with local models only still gets a critique)."""
    return next((p for p in PROVIDERS if p != reviewer and p in available), reviewer)


async def probe(settings: Settings, provider: str) -> list[str]:
    """What stops `provider` from working here, one line each with what to do (empty: ready).

    `claude` and `codex`: their SDK finds a key. `chat`: its server answers `GET /models`
    (through the SDK, with the configured key or none) and lists COCKPIT_CHAT_MODEL. Azure
    OpenAI lists models, not deployments, so there only the endpoint and key are checked."""
    clients = ModelClients(settings)
    try:
        if provider in SDK_KEYS:
            if clients.configured(provider):
                return []
            return [_problem(SDK_KEYS[provider], "model_key", provider=provider)]
        if provider != "chat":
            return [say(PEOPLE, "unknown_provider", provider=repr(provider), choices=PROVIDERS)]
        chat = settings.chat
        if chat is None:
            return [_problem("COCKPIT_CHAT_BASE_URL", "chat_unset")]
        return await _probe_chat(clients, chat.model)
    finally:
        await clients.close()


class Unanswered(str):
    """A probe's problem that is only a server not answering: nothing in the settings to
    change (`cockpit check-config` exits 1 for it, not 2)."""


def _problem(variable: str, why: str, **context: object) -> str:
    """`VARIABLE: what is wrong` (templates/cli/config.txt.j2), as check-config lists it."""
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
