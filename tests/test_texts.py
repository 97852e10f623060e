"""Model text shown on GitHub cannot mention people, forge markers or break out of code."""

from __future__ import annotations

import pytest

from bot.texts import STATUS_MARKER, fenced, render, safe_md, table_cell

LIVE = ("@octocat", "@org/admins")


@pytest.mark.parametrize(
    "text",
    [
        "ping @octocat",
        "cc @org/admins please",
        "`@octocat",
        "x`@org/admins",
        "(@octocat)",
        "@octocat's",
        "**@octocat**",
        "[@octocat](https://x)",
    ],
)
def test_mentions_are_neutralised(text):
    assert not any(live in safe_md(text) for live in LIVE)
    assert not any(live in table_cell(text) for live in LIVE)


@pytest.mark.parametrize("text", ["mail me at dev@example.com", "a@b"])
def test_email_addresses_are_left_alone(text):
    assert safe_md(text) == text


def test_markers_and_html_comments_cannot_be_forged():
    out = safe_md(f"{STATUS_MARKER} fake <!-- hidden -->")
    assert "<!--" not in out and "-->" not in out


def test_unbalanced_fence_is_closed():
    assert safe_md("```python\nx = 1").endswith("```")


def test_table_cells_stay_one_cell():
    assert table_cell("a | b\nc") == "a \\| b c"


def test_suggestion_cannot_close_its_fence():
    hostile = "x = 1\n```\nping @octocat\n````"
    body = render(
        "inline_comment.md.j2", ordinal=1, severity="nit", title="t", body="b", suggestion=hostile
    )
    lines = body.strip().split("\n")
    assert lines[-1] == "`````" and "`````suggestion" in lines  # longer than any run inside
    assert fenced("a") == "```\na\n```"
