"""What every provider shares: budgets, usage and cost, errors, and the provider interface."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Protocol

from bot.redaction import redact
from bot.texts import MODEL, say

RATES_FILE = Path(__file__).with_name("rates.json")
SAID_CHARS = 240  # how much of what a server said is quoted
# The SDKs retry a network failure, a timeout, 408, 409, 429 and 5xx, honouring Retry-After:
# five attempts in all, within the run's wall-clock budget.
MAX_RETRIES = 4


class AgentError(Exception):
    """A model run failed; the message is safe to show on the PR (redacted as it is made)."""

    def __init__(self, text: str) -> None:
        super().__init__(redact(text))


class BudgetExceeded(AgentError):
    pass


@dataclass(frozen=True)
class Budget:
    """What one model run may spend, and the daily limits of the installation it is charged
    to (checked as the run starts, whatever started it)."""

    max_tool_calls: int = 40
    max_tokens: int = 1_500_000
    max_seconds: float = 600.0
    max_usd: float | None = None  # per run: COCKPIT_REVIEW_MAX_USD
    daily_max_runs: int | None = None  # per installation per UTC day: COCKPIT_DAILY_MAX_RUNS
    daily_max_usd: float | None = None  # COCKPIT_DAILY_MAX_USD

    @classmethod
    def from_settings(cls, settings: Any) -> Budget:
        return cls(
            max_usd=settings.review_max_usd,
            daily_max_runs=settings.daily_max_runs,
            daily_max_usd=settings.daily_max_usd,
        )


@dataclass
class Allowance:
    """One run's budget shared by several sessions (a verify pass's, a review's groups): each
    starts with an equal share of what is left (tokens, dollars) and gives back what it did
    not spend; all end by the one deadline."""

    tokens: int
    usd: float | None
    deadline: float
    waiting: int  # sessions not started yet

    def take(self, budget: Budget, calls: int) -> Budget | None:
        """The next session's budget, with at most `calls` tool calls; None when the time is
        up."""
        seconds = self.deadline - time.monotonic()
        share = self.tokens // self.waiting
        usd = None if self.usd is None else self.usd / self.waiting
        self.waiting -= 1
        if seconds <= 0:
            return None
        self.tokens -= share
        if usd is not None:
            self.usd -= usd
        calls = min(calls, budget.max_tool_calls)
        return replace(
            budget, max_tool_calls=calls, max_tokens=share, max_usd=usd, max_seconds=seconds
        )

    def give_back(self, share: Budget, tokens: int, usd: float | None) -> None:
        self.tokens += max(share.max_tokens - tokens, 0)
        if self.usd is not None and share.max_usd is not None:
            self.usd += max(share.max_usd - (usd or 0.0), 0.0)


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def counts(self) -> dict[str, int]:
        return {f.name.removesuffix("_tokens"): getattr(self, f.name) for f in fields(self)}

    def add(self, other: Usage) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def total(self) -> int:
        return sum(self.counts().values())


@cache
def _rates() -> dict[str, dict[str, float]]:
    data = json.loads(RATES_FILE.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


_SNAPSHOT = re.compile(r"^(?P<base>.+?)-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


def rate_for(model: str) -> dict[str, float] | None:
    """The model's rate, or its base id's for a dated snapshot; never a guess by prefix
    (`gpt-5.5` is not priced like `gpt-5`)."""
    rates = _rates()
    if model in rates:
        return rates[model]
    snapshot = _SNAPSHOT.match(model)
    return rates.get(snapshot.group("base")) if snapshot else None


# What the token budget charges a cached input token, when the model's rate does not say:
# Anthropic bills a cache read at 0.1x its input price and a cache write at 1.25x.
CACHE_READ_WEIGHT = 0.1
CACHE_WRITE_WEIGHT = 1.25


def budget_tokens(model: str, usage: Usage, fallback: dict[str, float] | None = None) -> float:
    """`usage` as the token budget counts it: cached input at its price relative to input
    (the model's rate, else Anthropic's multipliers), so a conversation resent every turn and
    read from the cache is not charged in full each time. Costs in USD are counted apart."""
    read, write = CACHE_READ_WEIGHT, CACHE_WRITE_WEIGHT
    rate = rate_for(model) or fallback
    if rate is not None and rate["input"] > 0:
        read, write = rate["cache_read"] / rate["input"], rate["cache_write"] / rate["input"]
    plain = usage.input_tokens + usage.output_tokens
    return plain + read * usage.cache_read_tokens + write * usage.cache_write_tokens


def chat_rate(rates: tuple[float, float] | None) -> dict[str, float] | None:
    """COCKPIT_CHAT_RATES as a rate; cached input is charged as input (conservative)."""
    if rates is None:
        return None
    return {"input": rates[0], "output": rates[1], "cache_read": rates[0], "cache_write": rates[0]}


def cost_usd(model: str, usage: Usage, fallback: dict[str, float] | None = None) -> float | None:
    rate = rate_for(model) or fallback
    if rate is None:
        return None
    return sum(count * rate[kind] for kind, count in usage.counts().items()) / 1_000_000


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: Any  # an object (Claude) or its JSON text (Codex, chat), maybe broken


def arguments_object(arguments: Any) -> dict[str, Any] | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            return None
    return arguments if isinstance(arguments, dict) else None


def arguments_problem(arguments: Any) -> str | None:
    if isinstance(arguments, dict):
        return None
    if not isinstance(arguments, str):
        return say(MODEL, "arguments_problem", why="type")
    try:
        value = json.loads(arguments or "{}")
    except ValueError as exc:
        return say(MODEL, "arguments_problem", why="json", error=exc.msg, at=exc.pos)
    return None if isinstance(value, dict) else say(MODEL, "arguments_problem", why="not_object")


@dataclass
class ModelReply:
    """`items` are the native messages to store and resend; `cut_off`: the answer stopped at
    the output limit, so its last tool call may be incomplete."""

    text: str
    usage: Usage
    items: list[dict[str, Any]]
    model: str
    cut_off: bool = False

    @cached_property
    def tool_calls(self) -> list[ToolCall]:
        return [call for item in self.items for call in calls(item)]


Results = Callable[[list[tuple[ToolCall, str, bool]]], list[dict[str, Any]]]


def calls(item: dict[str, Any]) -> list[ToolCall]:
    if item.get("type") == "function_call":  # Responses
        arguments = item.get("arguments") or "{}"
        return [ToolCall(str(item.get("call_id")), str(item.get("name", "")), arguments)]
    made = []
    for call in item.get("tool_calls") or []:  # Chat Completions
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments") or "{}"
            made.append(ToolCall(str(call.get("id")), str(function.get("name", "")), arguments))
    for block in blocks(item, "tool_use"):  # Messages
        arguments = block.get("input") or {}
        made.append(ToolCall(str(block.get("id")), str(block.get("name", "")), arguments))
    return made


def answered(item: dict[str, Any]) -> set[str]:
    if item.get("type") == "function_call_output":
        return {str(item.get("call_id"))}
    if item.get("role") == "tool":
        return {str(item.get("tool_call_id"))}
    return {str(block.get("tool_use_id")) for block in blocks(item, "tool_result")}


def close_dangling(messages: list[dict[str, Any]], results: Results, text: str) -> list[dict]:
    """`messages` with an error result `text` for every call that has none (a turn stopped
    mid-tool, a killed process): the APIs refuse a call without its result. The missing ones go
    before the next message that is neither a result nor part of that reply."""
    closed: list[dict[str, Any]] = []
    pending: dict[str, ToolCall] = {}
    for item in messages:
        done = answered(item)
        in_reply = item.get("type") in ("reasoning", "function_call", "message")
        if pending and not done and not in_reply:
            closed.extend(results([(call, text, True) for call in pending.values()]))
            pending = {}
        for call_id in done:
            pending.pop(call_id, None)
        closed.append(item)
        pending.update((call.id, call) for call in calls(item))
    if pending:
        closed.extend(results([(call, text, True) for call in pending.values()]))
    return closed


def blocks(item: dict[str, Any], *kinds: str) -> list[dict[str, Any]]:
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") in kinds]


def server_said(body: Any) -> str:
    """A server's error message, from OpenAI's, vLLM's or Ollama's shape of it."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner.get("detail") or json.dumps(inner))
        return str(inner)
    return "" if body is None else str(body)


def quoted(said: str, limit: int = SAID_CHARS) -> str:
    """One line, secrets masked before it is cut (half a key is no longer recognised as one)."""
    text = " ".join(redact(said).split())
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass
class ProviderRequest:
    system: str
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    cache_key: str


class Provider(Protocol):
    name: str
    model: str
    fallback_rate: dict[str, float] | None  # for models not in rates.json (COCKPIT_CHAT_RATES)

    async def send(self, request: ProviderRequest) -> ModelReply: ...

    def user_message(self, text: str) -> list[dict[str, Any]]: ...

    def tool_results(self, results: list[tuple[ToolCall, str, bool]]) -> list[dict[str, Any]]:
        """Native messages answering (call, output, is_error)."""
