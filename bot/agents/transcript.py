"""Pure: a session's native messages (Claude's, Codex's or Chat Completions' shapes) as plain
text, and the capped excerpt of a parent conversation that a cross-review child is given."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

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


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more chars)"


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _parts(item: dict[str, Any]) -> list[str]:
    """Readable pieces of one native message, whichever provider wrote it."""
    kind = item.get("type")
    if kind == "function_call":
        return [f"[called {item.get('name')} {_arguments(item.get('arguments'))}]"]
    if kind == "function_call_output":
        return [f"[tool result] {_clip(str(item.get('output', '')), TOOL_OUTPUT_CHARS)}"]
    if kind == "reasoning":
        return []
    content = item.get("content")
    if item.get("role") == "tool":  # Chat Completions: a tool's result
        return [f"[tool result] {_clip(str(content or ''), TOOL_OUTPUT_CHARS)}"]
    calls = [
        f"[called {c['function'].get('name')} {_arguments(c['function'].get('arguments'))}]"
        for c in item.get("tool_calls") or []
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]  # Chat Completions: an assistant message's calls
    if content is None or isinstance(content, str):
        return [content or "", *calls]
    parts = []
    for block in content or []:
        block_type = block.get("type")
        if block_type in ("text", "input_text", "output_text"):
            parts.append(block.get("text", ""))
        elif block_type == "tool_use":
            parts.append(f"[called {block.get('name')} {_arguments(block.get('input'))}]")
        elif block_type == "tool_result":
            result = block.get("content")
            if isinstance(result, list):
                result = "".join(p.get("text", "") for p in result if isinstance(p, dict))
            parts.append(f"[tool result] {_clip(str(result or ''), TOOL_OUTPUT_CHARS)}")
    return parts


def answer_text(item: dict[str, Any]) -> str:
    """The prose of an assistant message (its tool calls left out); "" for anything else."""
    if item.get("role") != "assistant":
        return ""
    content = item.get("content")
    if content is None or isinstance(content, str):
        return (content or "").strip()
    texts = [b.get("text", "") for b in content or [] if b.get("type") in ("text", "output_text")]
    return "\n".join(texts).strip()


def tool_call(item: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The input of a call to tool `name` in an assistant message, whichever provider wrote it."""
    if item.get("type") == "function_call" and item.get("name") == name:
        return _json_object(item.get("arguments"))
    for call in item.get("tool_calls") or []:  # Chat Completions
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            return _json_object(function.get("arguments"))
    content = item.get("content")
    for block in content if isinstance(content, list) else []:
        if block.get("type") == "tool_use" and block.get("name") == name:
            return block.get("input") or {}
    return None


def _json_object(arguments: str | None) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def calls_tools(item: dict[str, Any]) -> bool:
    """Whether a native message makes tool calls, whichever provider wrote it."""
    if item.get("type") == "function_call" or item.get("tool_calls"):
        return True
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" for b in content
    )


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
