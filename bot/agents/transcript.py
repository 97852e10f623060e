"""Pure: a session's native messages read whichever provider wrote them, and a critic's excerpt."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.agents.base import arguments_object, blocks, calls
from bot.texts import render as render_text

MAX_MESSAGES = 50
MAX_BYTES = 30_000
TOOL_OUTPUT_CHARS = 600  # a tool result is summarised, not replayed in full


@dataclass(frozen=True)
class Line:
    id: str  # msg-N
    role: str
    text: str


@dataclass(frozen=True)
class Excerpt:
    lines: tuple[Line, ...]
    omitted: int  # older messages left out


def tool_call(item: dict[str, Any], name: str) -> dict[str, Any] | None:
    call = next((call for call in calls(item) if call.name == name), None)
    return arguments_object(call.arguments) if call is not None else None


def answer_text(item: dict[str, Any]) -> str:
    if item.get("role") != "assistant":
        return ""
    return "\n".join(_texts(item)).strip()


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if content is None or isinstance(content, str):
        return [content or ""]
    return [b.get("text", "") for b in blocks(item, "text", "input_text", "output_text")]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more chars)"


def _parts(item: dict[str, Any]) -> list[str]:
    if item.get("type") == "reasoning":
        return []
    if item.get("type") == "function_call_output" or item.get("role") == "tool":
        output = item.get("output", item.get("content"))
        return [f"[tool result] {_clip(str(output or ''), TOOL_OUTPUT_CHARS)}"]
    parts = _texts(item)
    for block in blocks(item, "tool_result"):
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
    lines = []
    for message_id, role, item in messages:
        text = "\n".join(p for p in _parts(item) if p.strip())
        if text.strip():
            lines.append(Line(message_id, role, text))
    return lines


def excerpt(
    lines: list[Line], max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES
) -> Excerpt:
    """The newest messages that fit both caps; a message too big on its own is cut from its
    start so the newest text stays."""
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
    return "".join(_render(line) for line in part.lines)


def feedback(child_adapter: str, message: str, note: str = "", actor: str = "") -> str:
    return render_text(
        "prompts/feedback.md.j2",
        child_adapter=child_adapter,
        message=message,
        note=note,
        actor=actor,
    ).rstrip()
