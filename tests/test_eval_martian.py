"""`cockpit eval import-martian` on the real Martian Code Review Bench files (MIT, see
tests/fixtures/martian/), and `--resolve` through the GitHub stand-in."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import jsonschema
import pytest

from bot.cli import build_parser
from bot.evals.commands import _import_martian
from bot.evals.golden import SCHEMA_FILE, GoldenError, parse_golden
from bot.evals.martian import convert_entries, martian_golden, parse_pr_url
from bot.github import GitHubApp
from tests.serverproc import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "martian"
SEVERITIES = {"Low", "Medium", "High", "Critical"}


def test_the_five_martian_files_become_50_cases_and_137_labels(tmp_path):
    golden = martian_golden(FIXTURES)
    jsonschema.validate(golden, json.loads(SCHEMA_FILE.read_text()))
    cases = golden["cases"]
    assert len(cases) == 50 and sum(len(c["labels"]) for c in cases) == 137
    assert len({c["id"] for c in cases}) == 50
    assert all(c["base_sha"] is None and c["head_sha"] is None for c in cases)
    labels = [label for c in cases for label in c["labels"]]
    assert all(set(label) == {"problem", "severity"} for label in labels)  # free text only
    assert {label["severity"] for label in labels} == SEVERITIES
    assert "shas pending" in golden["note"]

    first = cases[0]
    assert first["id"] == "cal_dot_com-1" and first["pr"] == 8087
    assert first["repository"] == "https://github.com/calcom/cal.com.git"
    assert first["title"] == "Async import of the appStore packages"
    assert first["labels"][0] == {
        "problem": "Consider adding try-catch around the await to handle import failures "
        "gracefully",
        "severity": "Low",
    }
    keycloak = next(c for c in cases if c["id"] == "keycloak-1")
    assert keycloak["original_url"] == "https://github.com/keycloak/keycloak/pull/41249"
    assert keycloak["note"] == "reviewed commit is not in the repo"

    loaded = parse_golden(golden, tmp_path / "martian.json")
    assert loaded.labels == 137
    assert {c.repository for c in loaded.cases} >= {
        "https://github.com/getsentry/sentry.git",
        "https://github.com/ai-code-review-evaluation/sentry-greptile.git",
    }


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/o/n/issues/1",
        "https://github.com.evil.test/o/n/pull/1",
        "http://github.com/o/n/pull/1",
        "https://github.com/o/n/pull/x",
    ],
)
def test_only_github_pull_request_urls_are_accepted(url):
    with pytest.raises(GoldenError):
        parse_pr_url(url)


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ({}, "expected a list"),
        ([{"comments": []}], "with a `url`"),
        ([{"url": "https://github.com/o/n/pull/1", "comments": "x"}], "must be a list"),
        ([{"url": "https://github.com/o/n/pull/1", "comments": [{"severity": "Low"}]}], "needs"),
    ],
)
def test_malformed_entries_are_refused(entries, problem):
    with pytest.raises(GoldenError, match=problem):
        convert_entries("x", entries)


async def test_import_martian_command_writes_a_golden_file_offline(tmp_path):
    out_file = tmp_path / "martian.json"
    args = build_parser().parse_args(
        ["eval", "import-martian", str(FIXTURES), "--out", str(out_file)]
    )
    out = io.StringIO()
    assert await _import_martian(args, out) == 0
    assert len(json.loads(out_file.read_text())["cases"]) == 50
    text = out.getvalue()
    assert "50 case(s), 137 label(s) from 5 file(s)" in text
    assert "The shas are pending (50 case(s))" in text and "--judge claude" in text


async def test_resolve_reads_shas_from_the_github_api(tmp_path, github, settings, monkeypatch):
    """`--resolve` asks GITHUB_API_URL for each PR; one GitHub does not know stays pending."""
    source = tmp_path / "bench"
    source.mkdir()
    entries = [
        {
            "pr_title": "Known",
            "url": "https://github.com/octo/widgets/pull/3",
            "comments": [{"comment": "Off by one in the loop", "severity": "High"}],
        },
        {
            "pr_title": "Gone",
            "url": "https://github.com/octo/widgets/pull/4",
            "comments": [{"comment": "Leaks a file handle", "severity": "Low"}],
        },
    ]
    (source / "widgets.json").write_text(json.dumps(entries))
    repo = github.add_repo(
        "octo", "widgets", clone_url="https://example.test/w.git", installation_id=5
    )
    github.add_pull(repo, 3, head_sha="c" * 40, base_sha="d" * 40, diff="")
    async with aiohttp.ClientSession() as session:
        token = await GitHubApp(settings, session).installation_token(5)
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    monkeypatch.setenv("GITHUB_TOKEN", token)

    out_file = tmp_path / "resolved.json"
    args = build_parser().parse_args(
        ["eval", "import-martian", str(source), "--out", str(out_file), "--resolve"]
    )
    out = io.StringIO()
    assert await _import_martian(args, out) == 0
    known, gone = json.loads(out_file.read_text())["cases"]
    assert (known["head_sha"], known["base_sha"], known["base_ref"]) == ("c" * 40, "d" * 40, "main")
    assert gone["head_sha"] is None
    assert "GitHub does not know 1 of these pull requests (404)" in out.getvalue()
    assert "widgets-2" in out.getvalue()
    paths = [r["path"] for r in github.requests if r["method"] == "GET"]
    assert "/repos/octo/widgets/pulls/3" in paths and "/repos/octo/widgets/pulls/4" in paths
    assert all(r["method"] in ("GET", "POST") for r in github.requests)
    assert [r["path"] for r in github.requests if r["method"] == "POST"] == [
        "/app/installations/5/access_tokens"  # the test minting its token, not the import
    ]


async def test_resolve_without_github_exits_1_and_says_why(tmp_path):
    """No network (here: nothing listens at GITHUB_API_URL): the command says it could not
    ask GitHub and exits 1; before, it wrote the file and exited 0 ("shas are pending")."""
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
        "GITHUB_API_URL": f"http://127.0.0.1:{free_port()}",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "bot", "eval", "import-martian", str(FIXTURES), "--resolve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "could not resolve 50 case(s)" in proc.stderr
    assert "GitHub could not be reached (ClientConnectorError)" in proc.stderr
    assert "GITHUB_API_URL is http://127.0.0.1:" in proc.stderr
    written = json.loads((tmp_path / "eval" / "golden" / "martian.json").read_text())
    assert written["note"] == "50 case(s) still have pending shas"
