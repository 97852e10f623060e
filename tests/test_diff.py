"""The diff model: which lines a review comment may sit on, per file and side."""

from __future__ import annotations

import pytest

from bot.diff import parse_diff
from bot.standin.repo import make_pr


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    base = {
        "mod.py": "a\nb\nc\n",
        "gone.py": "x\ny\n",
        "old_name.py": "".join(f"line {n}\n" for n in range(1, 41)),
        "img.bin": b"\x00\x01",
        "tail.txt": "no newline",
    }
    head = {
        "mod.py": "a\nB\nc\nd\n",
        "gone.py": None,
        "old_name.py": None,
        "new_name.py": "".join(f"line {n}\n" for n in range(1, 41)) + "line 41\n",
        "img.bin": b"\x00\x02",
        "tail.txt": "no newline, still",
        "added dir/ü.py": "x = 1\n",
    }
    pr = make_pr(tmp_path_factory.mktemp("diff") / "repo", base=base, head=head)
    return parse_diff(pr.diff)


@pytest.mark.parametrize(
    ("path", "status", "old_path"),
    [
        ("mod.py", "modified", None),
        ("gone.py", "removed", None),
        ("new_name.py", "renamed", "old_name.py"),
        ("img.bin", "binary", None),
        ("tail.txt", "modified", None),
        ("added dir/ü.py", "added", None),
    ],
)
def test_file_status(model, path, status, old_path):
    assert model.get(path).status == status
    assert model.get(path).old_path == old_path


@pytest.mark.parametrize(
    ("path", "line", "side", "ok"),
    [
        ("mod.py", 2, "RIGHT", True),  # changed line
        ("mod.py", 4, "RIGHT", True),  # added line
        ("mod.py", 1, "RIGHT", True),  # context inside the hunk
        ("mod.py", 2, "LEFT", True),  # removed line, base side
        ("mod.py", 9, "RIGHT", False),  # past the hunk
        ("gone.py", 1, "LEFT", True),
        ("gone.py", 1, "RIGHT", False),
        ("new_name.py", 41, "RIGHT", True),
        ("new_name.py", 5, "RIGHT", False),  # unchanged, far from the hunk
        ("img.bin", 1, "RIGHT", False),
        ("tail.txt", 1, "RIGHT", True),
        ("added dir/ü.py", 1, "RIGHT", True),
    ],
)
def test_commentable_lines(model, path, line, side, ok):
    assert model.get(path).commentable(line, side) is ok


def test_ranges_must_stay_in_one_hunk():
    diff = (
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n"
        "@@ -1,2 +1,3 @@\n a\n+b\n c\n"
        "@@ -20,2 +21,3 @@\n t\n+u\n v\n"
    )
    f = parse_diff(diff).get("f")
    assert f.same_hunk(1, 3) and f.same_hunk(21, 23)
    assert not f.same_hunk(2, 22) and not f.same_hunk(3, 1)


@pytest.mark.parametrize(
    ("quoted", "name"),
    [
        ('"added dir/\\303\\274.py"', "added dir/ü.py"),
        ('"new\\nline.txt"', "new\nline.txt"),
        ('"say \\"hi\\".txt"', 'say "hi".txt'),
        ("plain.txt", "plain.txt"),
        ('"a\\\\b"', "a\\b"),
    ],
)
def test_unquote(quoted, name):
    from bot.diff import unquote

    assert unquote(quoted) == name


def test_empty_diff():
    assert parse_diff("").files == {}
