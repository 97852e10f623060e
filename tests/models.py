"""Fixtures for the model stand-ins: real SDK clients pointed at loopback servers."""

from __future__ import annotations

import pytest

from bot.config import ChatSettings
from bot.standin.models import AnthropicStandin, ChatStandin, OpenAIStandin
from bot.standin.scripted import MODEL, scripted_reviewer


class Scripted:
    """A policy from a list of actions (or one callable), so a test reads like a script."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.seen = []

    def __call__(self, conversation):
        self.seen.append(conversation)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        return step(conversation) if callable(step) else step


@pytest.fixture
async def anthropic_standin(monkeypatch):
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    monkeypatch.setenv("ANTHROPIC_BASE_URL", standin.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key-0123456789")
    yield standin
    await standin.stop()
    assert standin.rejected == [], "a request the real Messages API refuses (400) was sent"


@pytest.fixture
async def openai_standin(monkeypatch):
    standin = OpenAIStandin(scripted_reviewer)
    await standin.start()
    monkeypatch.setenv("OPENAI_BASE_URL", f"{standin.url}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-openai-0123456789")
    yield standin
    await standin.stop()
    assert standin.rejected == [], "a request the real Responses API refuses (400) was sent"


@pytest.fixture
async def chat_standin():
    """An OpenAI-compatible Chat Completions server (no key, as local servers); point
    `Settings.chat` at it with `chat_settings(standin)`. Quirks are switched on per test."""
    standin = ChatStandin(scripted_reviewer)
    await standin.start()
    yield standin
    await standin.stop()
    assert standin.rejected == [], "a request a Chat Completions server refuses (400) was sent"


def chat_settings(standin: ChatStandin, model: str = MODEL, **options) -> ChatSettings:
    return ChatSettings(f"{standin.url}/v1", model, **options)
