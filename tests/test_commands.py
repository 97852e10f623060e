"""The command parser over real-looking comments."""

from __future__ import annotations

import pytest

from bot.commands.parse import parse_commands


def names(body, prefix="/cockpit"):
    return [(c.name, c.findings, c.flags, c.text) for c in parse_commands(body, prefix)]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/cockpit approve", [("approve", (), {}, "")]),
        ("/cockpit", [("help", (), {}, "")]),
        (
            "/cockpit approve F1 F3 --request-changes",
            [("approve", (1, 3), {"request-changes": True}, "F1 F3 --request-changes")],
        ),
        ("/cockpit approve F1,F3, f5.", [("approve", (1, 3, 5), {}, "F1,F3, f5.")]),
        ("/cockpit drop F2 F2", [("drop", (2,), {}, "F2 F2")]),
        (
            "/cockpit review --provider codex --verify",
            [("review", (), {"provider": "codex", "verify": True}, "--provider codex --verify")],
        ),
        (
            "/cockpit review --provider=Codex",
            [("review", (), {"provider": "codex"}, "--provider=Codex")],
        ),
        (
            "/cockpit codex-review --with claude focus on SQL",
            [("codex-review", (), {"with": "claude"}, "--with claude focus on SQL")],
        ),
        ("/cockpit ask why is F2 a problem?", [("ask", (2,), {}, "why is F2 a problem?")]),
        ("/cockpit send-back please drop the nit", [("send-back", (), {}, "please drop the nit")]),
        ("/COCKPIT APPROVE", [("approve", (), {}, "")]),
        ("/Cockpit Status  ", [("status", (), {}, "")]),
        (
            "/cockpit status\r\n/cockpit approve\r\n",
            [("status", (), {}, ""), ("approve", (), {}, "")],
        ),
        ("  /cockpit stop", [("stop", (), {}, "")]),
        (
            "Thanks!\n\n/cockpit drop F1\nand then\n/cockpit approve",
            [("drop", (1,), {}, "F1"), ("approve", (), {}, "")],
        ),
        ("/cockpit frobnicate now", [("frobnicate", (), {}, "now")]),
        (
            "/cockpit ask ¿qué pasa con F2? ünïcödé",
            [("ask", (2,), {}, "¿qué pasa con F2? ünïcödé")],
        ),
    ],
)
def test_commands_are_found(body, expected):
    assert names(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "",
        None,
        "please run /cockpit approve when ready",  # prefix in the middle of a line
        "`/cockpit approve`",  # inline code
        "> /cockpit approve",  # a quote of someone else's command
        "> > /cockpit approve",
        "```\n/cockpit approve\n```",
        "~~~md\n/cockpit approve\n~~~",
        "````\n```\n/cockpit approve\n```\n````",
        "    /cockpit approve",  # indented code block
        "\t/cockpit approve",
        "/cockpitapprove",
        "/cockpit-approve",
        "//cockpit approve",
        "<!--\n/cockpit approve\n-->",  # an HTML comment: nobody sees it
        "<!-- /cockpit approve -->",
        "text <!-- hidden\n/cockpit approve\nstill hidden --> shown",
        "<!--\n/cockpit approve",  # never closed: hidden to the end
        "<pre>\n/cockpit approve\n</pre>",
        "<PRE class=x>\n/cockpit approve\n</PRE>",
        "<textarea>\n/cockpit approve\n</textarea>",
        "<pre>/cockpit approve</pre>",
    ],
)
def test_text_that_is_not_a_command(body):
    assert parse_commands(body) == []


@pytest.mark.parametrize(
    "body",
    [
        "<!-- note -->\n/cockpit approve",
        "<!--\nhidden\n-->\n/cockpit approve",
        "<pre>x</pre>\n/cockpit approve",
        "```\n<!--\n```\n/cockpit approve",  # a comment opener inside code hides nothing
        "<preview>\n/cockpit approve",  # not a <pre> block
    ],
)
def test_commands_after_hidden_parts_still_run(body):
    assert names(body) == [("approve", (), {}, "")]


def test_a_comment_opened_after_a_command_hides_the_next_lines():
    body = "/cockpit status <!-- the rest is hidden\n/cockpit approve\n-->"
    assert [c.name for c in parse_commands(body)] == ["status"]


def test_unclosed_fence_hides_the_rest():
    assert parse_commands("```python\n/cockpit approve") == []


def test_custom_prefix():
    assert names("/cp approve\n/cockpit drop F1", prefix="/cp") == [("approve", (), {}, "")]


def test_line_numbers_are_kept():
    commands = parse_commands("hi\n/cockpit status\n\n/cockpit help")
    assert [c.line for c in commands] == [1, 3]
