"""The pure parts of sessions: an answer's prose in either provider's shape, feedback's header."""

from __future__ import annotations

import pytest

from bot.agents.transcript import answer_text, feedback

CLAUDE = [
    ("msg-0", "user", {"role": "user", "content": [{"type": "text", "text": "Review it"}]}),
    (
        "msg-1",
        "assistant",
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "t1", "name": "git_diff", "input": {}},
            ],
        },
    ),
    (
        "msg-2",
        "user",
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "d" * 2000}],
        },
    ),
]
CODEX = [
    ("msg-0", "user", {"role": "user", "content": "Critique it"}),
    ("msg-1", "assistant", {"type": "reasoning", "encrypted_content": "xyz"}),
    (
        "msg-2",
        "assistant",
        {"type": "function_call", "name": "read_file", "arguments": '{"path": "a.py"}'},
    ),
    ("msg-3", "tool", {"type": "function_call_output", "call_id": "c", "output": "ok"}),
    (
        "msg-4",
        "assistant",
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "F1 holds."}],
        },
    ),
]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (CLAUDE[1][2], "Looking."),
        (CODEX[4][2], "F1 holds."),
        (CODEX[2][2], ""),
        ({"role": "user", "content": "hi"}, ""),
        ({"role": "assistant", "content": "[link](x) first"}, "[link](x) first"),
    ],
)
def test_answer_text_is_the_prose_of_an_assistant_message(item, expected):
    assert answer_text(item) == expected


def test_feedback_has_the_fixed_header():
    assert feedback("codex", "F2 is wrong") == "[Review feedback from codex]:\nF2 is wrong"
    assert feedback("codex", "m", "be brief", "octocat").endswith("[Note from octocat]: be brief")
