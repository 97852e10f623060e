"""Pure: a session's native messages read whichever provider wrote them."""

from __future__ import annotations

from typing import Any

from bot.agents.base import arguments_object, blocks, calls
from bot.texts import render as render_text


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


def feedback(child_adapter: str, message: str, note: str = "", actor: str = "") -> str:
    return render_text(
        "prompts/feedback.md.j2",
        child_adapter=child_adapter,
        message=message,
        note=note,
        actor=actor,
    ).rstrip()
