"""The pure parts of sessions and revisions: transcripts, the capped excerpt, stable numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.agents.transcript import Line, answer_text, excerpt, feedback, render, to_lines

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


def test_both_providers_read_as_plain_lines_with_tool_output_clipped():
    lines = to_lines(CLAUDE)
    assert [line.id for line in lines] == ["msg-0", "msg-1", "msg-2"]
    assert "[called git_diff {}]" in lines[1].text
    assert len(lines[2].text) < 700 and "more chars" in lines[2].text
    codex = to_lines(CODEX)
    assert [line.id for line in codex] == ["msg-0", "msg-2", "msg-3", "msg-4"]  # no reasoning
    assert codex[1].text == '[called read_file {"path": "a.py"}]'
    assert codex[-1].text == "F1 holds."


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


def lines(count: int, size: int) -> list[Line]:
    return [Line(f"msg-{n}", "user", f"{n}:" + "x" * size) for n in range(count)]


@pytest.mark.parametrize(
    ("count", "size", "kept", "omitted"),
    [
        (0, 10, 0, 0),
        (10, 10, 10, 0),  # fits both caps
        (80, 10, 50, 30),  # the message cap binds
        (80, 1250, 23, 57),  # the byte cap binds first (whichever is smaller)
        (50, 100, 50, 0),
    ],
)
def test_the_excerpt_keeps_the_newest_messages_within_both_caps(count, size, kept, omitted):
    part = excerpt(lines(count, size))
    assert (len(part.lines), part.omitted) == (kept, omitted)
    assert len(render(part).encode()) <= 30_000
    if kept:
        assert part.lines[-1].id == f"msg-{count - 1}"


def test_one_huge_message_keeps_its_end():
    part = excerpt([Line("msg-0", "user", "start " + "y" * 50_000 + " the end")])
    assert len(part.lines) == 1 and part.lines[0].text.endswith("the end")
    assert len(render(part).encode()) <= 30_000


@given(
    st.lists(st.text(max_size=3000), max_size=120),
    st.integers(min_value=0, max_value=60),
    st.integers(min_value=0, max_value=40_000),
)
def test_the_excerpt_never_exceeds_its_caps(texts, max_messages, max_bytes):
    part = excerpt(
        [Line(f"msg-{n}", "user", t) for n, t in enumerate(texts)], max_messages, max_bytes
    )
    assert len(part.lines) <= max_messages
    assert len(render(part).encode()) <= max_bytes
    assert part.omitted == len(texts) - len(part.lines)


def test_feedback_has_the_fixed_header():
    assert feedback("codex", "F2 is wrong") == "[Review feedback from codex]:\nF2 is wrong"
    assert feedback("codex", "m", "be brief", "octocat").endswith("[Note from octocat]: be brief")
