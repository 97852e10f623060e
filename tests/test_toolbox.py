"""The read-only toolbox under hostile input: nothing outside the head tree ever leaks."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tracemalloc

import pytest

from bot.agents.toolbox import (
    MAX_OUTPUT_CHARS,
    SEARCH_TIMEOUT,
    TOOLS,
    Toolbox,
    clean_path,
)
from bot.standin.repo import git, make_pr
from bot.worktrees import OUTPUT_LIMIT, Mirrors, truncated
from tests.slowgit import slow_git

SECRET_LINE = "root:x:0:0"  # what /etc/passwd starts with
TIMED_OUT = (
    f"error: search timed out after {SEARCH_TIMEOUT:.0f}s; use a simpler pattern or a narrower path"
)
BIG = 50 * 1024 * 1024

BASE = {"src/app.py": "def add(a, b):\n    return a + b\n", "README.md": "# demo\n"}
HEAD = {
    "src/app.py": "def add(a, b):\n    return eval(f'{a}+{b}')\n",
    "escape": "link:/etc/passwd",
    "escape_rel": "link:../../../../../../etc/passwd",
    "inner_link": "link:src/app.py",
    "big.txt": "x" * (BIG - 1) + "\n",
    "blob.dat": b"\x00\x01\x02binary\x00" * 100,
    "with space.txt": "spaces\n",
    "new\nline.txt": "newline in name\n",
    "ünïcødé.py": "print('ü')\n",
    "-rf": "dash file\n",
    "--output=pwned": "option-looking file\n",
    "long.txt": "a" * 100_000 + "!\n",
    ".gitattributes": "* filter=evil diff=evil\n",
}


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory):
    """Built once (a 50 MB blob is slow to commit); the toolbox itself holds no loop state."""
    return asyncio.run(_build_toolbox(tmp_path_factory))


async def _build_toolbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("toolbox")
    pr = make_pr(root / "origin", base=BASE, head=HEAD, number=3)
    mirrors = Mirrors(root / "data")
    mirror = await mirrors.sync(
        "octo/widgets", pr.clone_url, ["refs/heads/main", "refs/pull/3/head"]
    )
    marker = root / "driver-ran"
    # Even if drivers were configured, reading and diffing must never run them.
    for key, value in (
        ("filter.evil.smudge", f"sh -c 'touch {marker}; cat'"),
        ("filter.evil.clean", f"sh -c 'touch {marker}; cat'"),
        ("diff.evil.textconv", f"sh -c 'touch {marker}; cat'"),
        ("diff.evil.command", f"sh -c 'touch {marker}'"),
    ):
        git(mirror, "config", key, value)
    tree = await mirrors.add_worktree(
        "octo/widgets", name="t", head_sha=pr.head_sha, base_ref="refs/heads/main"
    )
    box = Toolbox(tree)
    box.marker = marker
    return box


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "../../etc/passwd"}),
        ("read_file", {"path": "src/../../etc/passwd"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "//etc/passwd"}),
        ("read_file", {"path": "C:\\Windows\\win.ini"}),
        ("read_file", {"path": "escape"}),
        ("read_file", {"path": "escape_rel"}),
        ("read_file", {"path": ".git/config"}),
        ("read_file", {"path": ".GIT/config"}),
        ("read_file", {"path": "src/.git/../../.git/HEAD"}),
        ("read_file", {"path": "src/app.py\x00/etc/passwd"}),
        ("list_files", {"path": "../"}),
        ("list_files", {"path": "/etc"}),
        ("list_files", {"path": ".git"}),
        ("search_code", {"pattern": "root", "path": "/etc"}),
        ("search_code", {"pattern": "root", "path": "../.."}),
        ("git_diff", {"path": "../../etc/passwd"}),
        ("git_log", {"path": "/etc/passwd"}),
        ("read_file", {"path": ["src/app.py"]}),
        ("read_file", {}),
        ("read_file", {"path": "src/app.py", "mode": "w"}),
        ("write_file", {"path": "x", "content": "y"}),
        ("run_shell", {"command": "cat /etc/passwd"}),
    ],
)
async def test_hostile_paths_never_leak(toolbox, tool, arguments):
    answer = await toolbox.call(tool, arguments)
    assert SECRET_LINE not in answer
    assert "[core]" not in answer  # .git/config content


async def test_symlinks_are_reported_not_followed(toolbox):
    assert "symbolic link to '/etc/passwd'" in await toolbox.call("read_file", {"path": "escape"})
    inner = await toolbox.call("read_file", {"path": "inner_link"})
    assert "symbolic link to 'src/app.py'" in inner and "eval" not in inner


async def test_read_file_numbers_lines_and_ranges(toolbox):
    answer = await toolbox.call("read_file", {"path": "src/app.py", "start_line": 2})
    assert answer == "2|     return eval(f'{a}+{b}')"


async def test_fifty_megabyte_file_is_capped_with_a_marker(toolbox):
    tracemalloc.start()
    try:
        answer = await toolbox.call("read_file", {"path": "big.txt"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, f"peak {peak} bytes reading a 50 MiB file"  # not read whole
    assert len(answer) <= MAX_OUTPUT_CHARS + 200
    assert "truncated" in answer or "only the first" in answer


async def test_binary_file_is_reported_not_dumped(toolbox):
    answer = await toolbox.call("read_file", {"path": "blob.dat"})
    assert "binary file" in answer and "\x00" not in answer


@pytest.mark.parametrize(
    "name", ["with space.txt", "new\nline.txt", "ünïcødé.py", "-rf", "--output=pwned"]
)
async def test_awkward_names_are_read_as_names(toolbox, name, tmp_path):
    answer = await toolbox.call("read_file", {"path": name})
    assert not answer.startswith("error"), answer
    assert not (tmp_path / "pwned").exists()


async def test_list_files_shows_awkward_names_and_dirs(toolbox):
    answer = await toolbox.call("list_files", {})
    assert "src/" in answer and "-rf" in answer and "ünïcødé.py" in answer
    assert "new\\nline.txt" in answer  # escaped, one entry per line


async def test_pathological_regex_is_answered_without_leaking(toolbox):
    answer = await toolbox.call("search_code", {"pattern": "(a+)+$", "path": "long.txt"})
    assert answer in ("no matches", TIMED_OUT), answer  # whichever, within SEARCH_TIMEOUT
    assert SECRET_LINE not in answer


async def test_a_search_that_never_ends_is_stopped_at_its_timeout(toolbox, tmp_path):
    """The bound itself, whatever the machine's speed: a `git grep` that would run forever
    (held by a stand-in git first on the worktree's PATH) is stopped after SEARCH_TIMEOUT and
    the model is told so."""
    slow = slow_git(tmp_path, "grep")
    path = f"{slow.bin_dir}{os.pathsep}{toolbox.tree.env['PATH']}"
    held = Toolbox(dataclasses.replace(toolbox.tree, env={**toolbox.tree.env, "PATH": path}))
    try:
        answer = await held.call("search_code", {"pattern": "a", "path": "long.txt"})
    finally:
        slow.release()
    assert slow.started.exists()  # the held git ran
    assert answer == TIMED_OUT


async def test_search_finds_code_with_paths_and_lines(toolbox):
    answer = await toolbox.call("search_code", {"pattern": "eval\\(", "path": "src"})
    assert answer.startswith("src/app.py:2:")


async def test_search_pattern_that_looks_like_an_option(toolbox):
    answer = await toolbox.call("search_code", {"pattern": "--output=pwned"})
    assert not answer.startswith("error")


async def test_git_diff_is_merge_base_to_head_and_runs_no_drivers(toolbox):
    answer = await toolbox.call("git_diff", {"path": "src/app.py"})
    assert "+    return eval(f'{a}+{b}')" in answer and "-    return a + b" in answer
    await toolbox.call("read_file", {"path": "src/app.py"})
    await toolbox.call("git_diff", {})
    assert not toolbox.marker.exists()


async def test_git_log_lists_commits(toolbox):
    answer = await toolbox.call("git_log", {"max_count": 5})
    assert "change under review" in answer and "base" in answer


async def test_arguments_are_read_through_each_tools_declaration(toolbox):
    """Every problem of a call's arguments at once, as the model can fix them; nothing runs."""
    answer = await toolbox.call("read_file", {"path": 5, "start_line": 0, "mode": "w"})
    assert answer == (
        "error: unexpected keys: mode; `path` must be a string; "
        "`start_line` must be a positive integer"
    )
    assert "must match" in await toolbox.call("search_code", {"pattern": "a\nb"})
    too_many = await toolbox.call("git_log", {"max_count": 500})
    assert too_many == "error: `max_count` must be an integer from 1 to 100"


def test_the_toolbox_offers_only_read_tools():
    assert {"read_file", "list_files", "search_code", "git_diff", "git_log"} == set(TOOLS)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("src/app.py", "src/app.py"),
        ("./src//app.py", "src/app.py"),
        ("src/./x", "src/x"),
        (None, None),
        ("..", None),
        ("a/../b", None),
        ("/abs", None),
        (".git", None),
        ("x/.Git/y", None),
        ("a\x00b", None),
    ],
)
def test_clean_path(raw, expected):
    from bot.agents.toolbox import ToolError

    if expected is None:
        with pytest.raises(ToolError):
            clean_path(raw)
    else:
        assert clean_path(raw) == expected


SUBJECT_BYTES = 8 * 1024 * 1024


@pytest.fixture(scope="module")
def huge_subjects(tmp_path_factory):
    """A PR whose four commits have 8 MiB subjects (the audit used 64 MiB: same shape)."""
    return asyncio.run(_build_huge_subjects(tmp_path_factory))


async def _build_huge_subjects(tmp_path_factory):
    root = tmp_path_factory.mktemp("subjects")
    pr = make_pr(root / "origin", base=BASE, head={"src/app.py": "x = 1\n"}, number=4)
    message = root / "message"
    head = pr.head_sha
    for n in range(4):
        message.write_text(f"{n}" + "s" * SUBJECT_BYTES + "\n")
        tree = git(pr.path, "rev-parse", f"{head}^{{tree}}").strip()
        head = git(pr.path, "commit-tree", tree, "-p", head, "-F", str(message)).strip()
    git(pr.path, "update-ref", "refs/pull/4/head", head)
    mirrors = Mirrors(root / "data")
    await mirrors.sync("octo/subjects", pr.clone_url, ["refs/heads/main", "refs/pull/4/head"])
    tree = await mirrors.add_worktree(
        "octo/subjects", name="s", head_sha=head, base_ref="refs/heads/main"
    )
    return tree


async def test_git_log_streams_with_a_byte_cap(huge_subjects):
    tracemalloc.start()
    try:
        answer = await Toolbox(huge_subjects).call("git_log", {"max_count": 4})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    note = "[… output truncated: git was stopped after 48000 bytes; narrow the request]"
    assert answer.endswith(note)
    assert len(answer) <= MAX_OUTPUT_CHARS
    assert peak < 16 * 1024 * 1024, f"peak {peak} bytes with 32 MiB of subjects"


async def test_every_git_call_has_a_byte_cap(toolbox):
    entry = await toolbox._entry("big.txt")
    out = await toolbox.tree.git("cat-file", "blob", entry.oid)  # no limit asked for
    assert truncated(out) and len(out) == OUTPUT_LIMIT + 1


async def test_git_diff_leaves_out_the_files_a_review_leaves_out(toolbox):
    box = Toolbox(toolbox.tree, left_out={"long.txt": "generated", "big.txt": "matches a glob"})
    whole = await box.call("git_diff", {})
    assert "+++ b/src/app.py" in whole and "+++ b/with space.txt" in whole
    assert "long.txt" not in whole and "big.txt" not in whole
    assert whole.startswith("[2 changed file(s) left out of this diff: files matching an `ignore` "
                          "glob and generated, vendored, lock or minified files are not "
                          "reviewed]")  # fmt: skip
    assert await box.call("git_diff", {"path": "long.txt"}) == (
        "long.txt is left out of this review (generated)"
    )
    only_hidden = Toolbox(toolbox.tree, left_out={"src/app.py": "vendored"})
    answer = await only_hidden.call("git_diff", {"path": "src"})
    assert "+++" not in answer and answer.startswith("[1 changed file(s) left out")
    # the rest of the PR is as ever: the same diff as without anything left out
    assert (await only_hidden.call("git_diff", {"path": "with space.txt"})) == (
        await Toolbox(toolbox.tree).call("git_diff", {"path": "with space.txt"})
    )


async def test_a_git_that_cannot_start_is_an_answer_to_the_model_never_a_crash(toolbox, tmp_path):
    """An OSError from starting git (here: no git on PATH; at 30,000 files it was a command
    line over the kernel's limit) comes back as the tool's answer."""
    broken = dataclasses.replace(toolbox.tree, env={**toolbox.tree.env, "PATH": str(tmp_path)})
    for tool, arguments in (("git_diff", {}), ("read_file", {"path": "src/app.py"})):
        answer = await Toolbox(broken, left_out={"long.txt": "generated"}).call(tool, arguments)
        assert answer.startswith("error: git ") and "could not start" in answer


async def test_a_file_left_out_can_be_read_and_says_it_is_not_reviewed(toolbox):
    box = Toolbox(toolbox.tree, left_out={"src/app.py": "matches an `ignore` glob"})
    answer = await box.call("read_file", {"path": "src/app.py"})
    note, _, content = answer.partition("\n")
    assert note == (
        "[src/app.py is left out of this review (matches an `ignore` glob): read it for "
        "context only; findings on it are dropped]"
    )
    assert content == await Toolbox(toolbox.tree).call("read_file", {"path": "src/app.py"})
