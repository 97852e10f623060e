"""Pure: a session's native messages (Messages, Responses or Chat Completions shapes) read
whichever provider wrote them: their calls and results, their text, a critic's excerpt."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.agents.base import ToolCall, arguments_object
from bot.texts import render as render_text

MAX_MESSAGES = 50
MAX_BYTES = 30_000
TOOL_OUTPUT_CHARS = 600  # a tool result is summarised, not replayed in full

Results = Callable[[list[tuple[ToolCall, str, bool]]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Line:
    id: str  # msg-N
    role: str
    text: str


@dataclass(frozen=True)
class Excerpt:
    lines: tuple[Line, ...]
    omitted: int  # older messages left out


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
    for block in _blocks(item, "tool_use"):  # Messages
        arguments = block.get("input") or {}
        made.append(ToolCall(str(block.get("id")), str(block.get("name", "")), arguments))
    return made


def answered(item: dict[str, Any]) -> set[str]:
    """The ids of the calls a native message holds the results of."""
    if item.get("type") == "function_call_output":
        return {str(item.get("call_id"))}
    if item.get("role") == "tool":
        return {str(item.get("tool_call_id"))}
    return {str(block.get("tool_use_id")) for block in _blocks(item, "tool_result")}


def close_dangling(messages: list[dict[str, Any]], results: Results, text: str) -> list[dict]:
    """`messages` with an error result `text` for every call that has none (a turn stopped
    mid-tool, a killed process): the APIs refuse a call without its result. A reply's results
    follow it; the missing ones go before the next message that is neither a result nor part
    of that reply (a Responses reply is several items)."""
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


def tool_call(item: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The input of a call to tool `name` in an assistant message (None: no readable one)."""
    call = next((call for call in calls(item) if call.name == name), None)
    return arguments_object(call.arguments) if call is not None else None


def calls_tools(item: dict[str, Any]) -> bool:
    return bool(calls(item))


def answer_text(item: dict[str, Any]) -> str:
    """The prose of an assistant message (its tool calls left out); "" for anything else."""
    if item.get("role") != "assistant":
        return ""
    return "\n".join(_texts(item)).strip()


def _blocks(item: dict[str, Any], *kinds: str) -> list[dict[str, Any]]:
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") in kinds]


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if content is None or isinstance(content, str):
        return [content or ""]
    return [b.get("text", "") for b in _blocks(item, "text", "input_text", "output_text")]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more chars)"


def _parts(item: dict[str, Any]) -> list[str]:
    """Readable pieces of one native message."""
    if item.get("type") == "reasoning":
        return []
    if item.get("type") == "function_call_output" or item.get("role") == "tool":
        output = item.get("output", item.get("content"))
        return [f"[tool result] {_clip(str(output or ''), TOOL_OUTPUT_CHARS)}"]
    parts = _texts(item)
    for block in _blocks(item, "tool_result"):
        result = block.get("content")
        if isinstance(result, list):
            result = "".join(p.get("text", "") for p in result if isinstance(p, dict))
        parts.append(f"[tool result] {_clip(str(result or ''), TOOL_OUTPUT_CHARS)}")
    for call in calls(item):
        arguments = call.arguments
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        parts.append(f"[called {call.name} {arguments}]")
    return parts


def to_lines(messages: list[tuple[str, str, dict[str, Any]]]) -> list[Line]:
    """(id, role, native item) → readable lines; messages with nothing to read are skipped."""
    lines = []
    for message_id, role, item in messages:
        text = "\n".join(p for p in _parts(item) if p.strip())
        if text.strip():
            lines.append(Line(message_id, role, text))
    return lines


def excerpt(
    lines: list[Line], max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES
) -> Excerpt:
    """The newest messages that fit both caps (whichever is smaller wins), oldest dropped
    first; a message too big on its own is cut from its start so the newest text stays."""
    kept: list[Line] = []
    used = 0
    for line in reversed(lines[-max_messages:] if max_messages else []):
        size = len(_render(line).encode())
        if used + size > max_bytes:
            room = max_bytes - used - len(_render(Line(line.id, line.role, "… ")).encode())
            if not kept and room > 0:  # the newest message alone is too big: keep its end
                tail = line.text.encode()[-room:].decode("utf-8", errors="ignore")
                kept.append(Line(line.id, line.role, "… " + tail))
            break
        kept.append(line)
        used += size
    kept.reverse()
    return Excerpt(tuple(kept), len(lines) - len(kept))


def _render(line: Line) -> str:
    return f"[{line.id} · {line.role}]\n{line.text}\n\n"


def render(part: Excerpt) -> str:
    """The excerpt as the child reads it (the same form whose size the caps measure)."""
    return "".join(_render(line) for line in part.lines)


def feedback(child_adapter: str, message: str, note: str = "", actor: str = "") -> str:
    """What `send-back` delivers to the parent."""
    return render_text(
        "prompts/feedback.md.j2",
        child_adapter=child_adapter,
        message=message,
        note=note,
        actor=actor,
    ).rstrip()
