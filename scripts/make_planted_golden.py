"""Generate the shipped offline golden set: a small repository with planted defects.

`stockroom`, a little inventory service, gets seven pull requests (refs/pull/1..7/head, all
based on `main`): five plant eleven realistic defects (off-by-one, SQL and command
injection, code injection, resource leak, unchecked errors, wrong conditions, a race), two
are clean (one with a test fixture that looks like a credential). Every label points at the
line of its defect. Commits have fixed authors and dates, so the shas are the same on every
machine; the repository ships as a git bundle next to the golden file.

    python scripts/make_planted_golden.py [--out eval/golden/planted]

tests/test_eval_planted.py checks that running this reproduces the shipped files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.evals.golden import write_golden  # noqa: E402
from bot.standin.repo import git, write_files  # noqa: E402

BASE = {
    "README.md": "# stockroom\n\nA small inventory service: items, settings, exchange rates, "
    "report export and uploads.\n",
    "stockroom/__init__.py": '"""stockroom: a small inventory service."""\n',
    "stockroom/db.py": '''"""SQLite access for the inventory."""

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    id: int
    name: str
    quantity: int


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT, quantity INTEGER)"
    )
    return conn
''',
    "stockroom/items.py": '''"""Queries over the items table."""

import sqlite3

from stockroom.db import Item


def get_item(conn: sqlite3.Connection, item_id: int) -> Item | None:
    row = conn.execute("SELECT id, name, quantity FROM items WHERE id = ?", (item_id,)).fetchone()
    return Item(*row) if row else None


def add_item(conn: sqlite3.Connection, name: str, quantity: int) -> int:
    cursor = conn.execute("INSERT INTO items (name, quantity) VALUES (?, ?)", (name, quantity))
    conn.commit()
    return cursor.lastrowid
''',
    "stockroom/settings.py": '''"""Service settings."""

DEFAULTS = {"database": "stockroom.db", "timeout": 30.0, "currency": "EUR"}


def merged(overrides: dict) -> dict:
    return {**DEFAULTS, **overrides}
''',
    "stockroom/rates.py": '''"""Exchange rates from the rates service."""

import json
import threading
import time
import urllib.request

RATES_URL = "https://rates.example.test/v1/latest"
MAX_AGE = 600.0  # seconds a cached rate stays fresh

_cache: dict[str, tuple[float, float]] = {}  # currency -> (rate, fetched at)
_lock = threading.Lock()


def fetch_rate(currency: str) -> float:
    with urllib.request.urlopen(f"{RATES_URL}?base={currency}", timeout=10) as response:
        return float(json.load(response)["rate"])


def refresh_all() -> None:
    with _lock:
        for currency in list(_cache):
            _cache[currency] = (fetch_rate(currency), time.time())
''',
    "stockroom/export.py": '''"""Reports as HTML."""

import html

PAGE_ROWS = 40


def render_rows(rows: list[tuple[str, int]]) -> str:
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{qty}</td></tr>" for name, qty in rows)
    return f"<table>{cells}</table>"
''',
    "stockroom/upload.py": '''"""Uploads of stock files to the warehouse service."""

import json
import urllib.request

UPLOAD_URL = "https://warehouse.example.test/v1/uploads"
MAX_RETRIES = 3
''',
    "stockroom/cli.py": '''"""Command line entry point."""

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stockroom")
    parser.add_argument("--db", default="stockroom.db")
    parser.parse_args(argv)
    return 0
''',
    "tests/__init__.py": "",
}

PULLS = [
    {
        "id": "pr-1-pagination",
        "title": "Paginate and search the item list",
        "body": "Adds `list_page` for the item list's pages and `search_items` for the search box.",
        "files": {
            "stockroom/items.py": BASE["stockroom/items.py"]
            + '''

def list_page(conn: sqlite3.Connection, page: int, size: int = 20) -> list[Item]:
    """The items on `page` (pages start at 1), `size` per page, oldest first."""
    offset = page * size
    rows = conn.execute(
        "SELECT id, name, quantity FROM items ORDER BY id LIMIT ? OFFSET ?", (size, offset)
    ).fetchall()
    return [Item(*row) for row in rows]


def search_items(conn: sqlite3.Connection, text: str) -> list[Item]:
    """Items whose name contains `text`."""
    rows = conn.execute(f"SELECT id, name, quantity FROM items WHERE name LIKE '%{text}%'")
    return [Item(*row) for row in rows.fetchall()]
''',
        },
        "labels": [
            {
                "path": "stockroom/items.py",
                "anchor": "offset = page * size",
                "title": "Off-by-one: page 1 skips the first page",
                "problem": "Pages start at 1, but the offset is `page * size`, so page 1 begins "
                "after the first `size` items and they are never listed. Use `(page - 1) * size`.",
                "severity": "major",
            },
            {
                "path": "stockroom/items.py",
                "anchor": "LIKE '%{text}%'",
                "title": "SQL injection in search_items",
                "problem": "The search text is put into the SQL string with an f-string, so a "
                "quote in `text` changes the query. Pass it as a parameter: `name LIKE ?` with "
                '`f"%{text}%"`.',
                "severity": "critical",
            },
        ],
    },
    {
        "id": "pr-2-settings-file",
        "title": "Load and save settings as JSON",
        "body": "Settings can now live in a JSON file; `save` writes the current ones back.",
        "files": {
            "stockroom/settings.py": '''"""Service settings."""

import json

DEFAULTS = {"database": "stockroom.db", "timeout": 30.0, "currency": "EUR"}


def merged(overrides: dict) -> dict:
    return {**DEFAULTS, **overrides}


def load(path: str) -> dict:
    """Settings from a JSON file, over the defaults."""
    handle = open(path)
    data = json.load(handle)
    try:
        data["timeout"] = float(data.get("timeout", DEFAULTS["timeout"]))
    except:
        pass
    return merged(data)


def save(path: str, settings: dict) -> None:
    handle = open(path, "w")
    json.dump(settings, handle, indent=2)
''',
        },
        "labels": [
            {
                "path": "stockroom/settings.py",
                "anchor": "handle = open(path)",
                "title": "Settings files are opened and never closed",
                "problem": "`load` and `save` open the file without `with` and never close it: "
                "the handle leaks, and `save` may leave a truncated file because the write is "
                "never flushed.",
                "severity": "major",
            },
            {
                "path": "stockroom/settings.py",
                "anchor": "except:",
                "title": "Invalid timeout silently ignored",
                "problem": "The bare `except: pass` swallows the ValueError when `timeout` is not "
                "a number, so the bad value stays in the settings unnoticed; catch ValueError "
                "and report it.",
                "severity": "major",
            },
        ],
    },
    {
        "id": "pr-3-rate-cache",
        "title": "Cache exchange rates",
        "body": "Rates are cached for ten minutes so a page of prices makes one request per "
        "currency.",
        "files": {
            "stockroom/rates.py": BASE["stockroom/rates.py"]
            + '''

def get_rate(currency: str) -> float:
    """The cached rate for `currency`, fetched again once it is older than MAX_AGE."""
    entry = _cache.get(currency)
    if entry is None or time.time() - entry[1] < MAX_AGE:
        rate = fetch_rate(currency)
        _cache[currency] = (rate, time.time())
        return rate
    return entry[0]


def convert(amount: float, currency: str) -> float:
    rate = get_rate(currency)
    if rate == None:
        raise ValueError(f"no rate for {currency}")
    return amount * rate
''',
        },
        "labels": [
            {
                "path": "stockroom/rates.py",
                "anchor": "entry[1] < MAX_AGE",
                "title": "Freshness check is inverted",
                "problem": "The rate is fetched again while it is still fresh (`age < MAX_AGE`) "
                "and a stale rate is served forever; the condition must be `age > MAX_AGE`.",
                "severity": "major",
            },
            {
                "path": "stockroom/rates.py",
                "anchor": "_cache[currency] = (rate, time.time())",
                "title": "Cache written without the lock",
                "problem": "`get_rate` reads and writes `_cache` without `_lock` while "
                "`refresh_all` iterates it under the lock: concurrent callers race, and "
                "`refresh_all` can fail with 'dictionary changed size during iteration'.",
                "severity": "major",
            },
        ],
    },
    {
        "id": "pr-4-pdf-export",
        "title": "Export reports as PDF",
        "body": "Converts a rendered report to PDF with wkhtmltopdf.",
        "files": {
            "stockroom/export.py": '''"""Reports as HTML and PDF."""

import html
import os
import subprocess

PAGE_ROWS = 40


def render_rows(rows: list[tuple[str, int]]) -> str:
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{qty}</td></tr>" for name, qty in rows)
    return f"<table>{cells}</table>"


def page_count(total_rows: int) -> int:
    """How many PDF pages a report of `total_rows` rows needs."""
    return total_rows // PAGE_ROWS


def export_pdf(report_name: str, out_dir: str) -> str:
    """Write `<report_name>.pdf` next to its HTML and return its path."""
    source = os.path.join(out_dir, report_name + ".html")
    target = os.path.join(out_dir, report_name + ".pdf")
    subprocess.run(f"wkhtmltopdf {source} {target}", shell=True, check=True)
    return target
''',
        },
        "labels": [
            {
                "path": "stockroom/export.py",
                "anchor": "return total_rows // PAGE_ROWS",
                "title": "Last partial page is not counted",
                "problem": "Floor division drops the last, partial page: 41 rows need 2 pages but "
                "`page_count` says 1 (and 0 for fewer than 40). Round up instead.",
                "severity": "major",
            },
            {
                "path": "stockroom/export.py",
                "anchor": "shell=True",
                "title": "Command injection through the report name",
                "problem": "The report name goes into a shell command line (`shell=True`), so a "
                "name like `x; rm -rf ~` runs arbitrary commands. Pass an argument list without "
                "a shell.",
                "severity": "critical",
            },
        ],
    },
    {
        "id": "pr-5-uploads",
        "title": "Upload stock files with retries",
        "body": "Uploads a stock file to the warehouse service, retrying up to three times.",
        "files": {
            "stockroom/upload.py": BASE["stockroom/upload.py"]
            + '''

def parse_quota(header: str) -> int:
    """Remaining uploads, from the service's `X-Quota` header (e.g. "12")."""
    return int(eval(header))


def upload(path: str, retries: int = MAX_RETRIES) -> str:
    """Upload the file at `path`; return the upload id."""
    with open(path, "rb") as handle:
        payload = handle.read()
    for _attempt in range(retries):
        request = urllib.request.Request(UPLOAD_URL, data=payload, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            status = response.status
            body = json.load(response)
        if 200 <= status <= 300:
            return body["id"]
    raise RuntimeError(f"upload of {path} failed after {retries} attempts")
''',
        },
        "labels": [
            {
                "path": "stockroom/upload.py",
                "anchor": "eval(header)",
                "title": "eval() on a response header",
                "problem": "The quota header comes from the network and `eval` runs it as Python "
                "code: a malicious or compromised service can execute code here. Use "
                "`int(header)`.",
                "severity": "critical",
            },
            {
                "path": "stockroom/upload.py",
                "anchor": "urllib.request.urlopen(request",
                "title": "Failed attempts are never retried",
                "problem": "`urlopen` raises HTTPError for 4xx/5xx answers and URLError when the "
                "network fails; neither is caught inside the loop, so the first failure ends the "
                "upload instead of trying again.",
                "severity": "major",
            },
            {
                "path": "stockroom/upload.py",
                "anchor": "200 <= status <= 300",
                "title": "Status 300 counted as success",
                "problem": "`200 <= status <= 300` accepts 300 (a redirect, with no upload id) as "
                "success; the success range is `200 <= status < 300`.",
                "severity": "minor",
            },
        ],
    },
    {
        "id": "pr-6-cli-help",
        "title": "Document the command line",
        "body": "Help texts for the command line and a usage section in the README.",
        "files": {
            "stockroom/cli.py": '''"""Command line entry point."""

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="stockroom", description="Manage the stock of a small warehouse."
    )
    parser.add_argument(
        "--db", default="stockroom.db", help="SQLite database file (created when missing)"
    )
    parser.parse_args(argv)
    return 0
''',
            "README.md": BASE["README.md"]
            + "\n## Usage\n\n    python -m stockroom.cli --db stock.db\n",
        },
        "labels": [],
    },
    {
        "id": "pr-7-item-tests",
        "title": "Test item queries",
        "body": "Tests for `get_item` and `add_item` against an in-memory database.",
        "files": {
            "tests/test_items.py": """from stockroom.db import connect
from stockroom.items import add_item, get_item

API_TOKEN = "test-token-not-a-secret"  # the fake warehouse accepts any token


def test_added_items_can_be_read_back():
    conn = connect(":memory:")
    item_id = add_item(conn, "bolt", 12)
    assert get_item(conn, item_id).quantity == 12


def test_missing_items_are_none():
    assert get_item(connect(":memory:"), 404) is None
""",
        },
        "labels": [],
    },
]


def line_of(text: str, anchor: str) -> int:
    [line] = [n for n, content in enumerate(text.splitlines(), start=1) if anchor in content]
    return line


def build(out: Path) -> dict:
    """Create the repository, bundle it into `out`, and return the golden document."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "stockroom"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        write_files(repo, BASE)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "stockroom: items, settings, rates, export, uploads")
        base_sha = git(repo, "rev-parse", "HEAD").strip()
        cases = []
        for number, pull in enumerate(PULLS, start=1):
            git(repo, "checkout", "-q", "-b", f"pr-{number}", base_sha)
            write_files(repo, pull["files"])
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", pull["title"])
            head_sha = git(repo, "rev-parse", "HEAD").strip()
            git(repo, "update-ref", f"refs/pull/{number}/head", head_sha)
            git(repo, "checkout", "-q", "main")
            git(repo, "branch", "-q", "-D", f"pr-{number}")
            labels = []
            for label in pull["labels"]:
                text = pull["files"][label["path"]]
                labels.append(
                    {
                        "path": label["path"],
                        "line": line_of(text, label["anchor"]),
                        **{k: label[k] for k in ("title", "problem", "severity")},
                    }
                )
            cases.append(
                {
                    "id": pull["id"],
                    "pr": number,
                    "title": pull["title"],
                    "body": pull["body"],
                    "base_sha": base_sha,
                    "head_sha": head_sha,
                    "labels": labels,
                }
            )
        out.mkdir(parents=True, exist_ok=True)
        refs = ["HEAD", "main", *(f"refs/pull/{n}/head" for n in range(1, len(PULLS) + 1))]
        git(repo, "bundle", "create", "-q", str(out / "stockroom.bundle"), *refs)
        shutil.rmtree(repo)
    return {
        "version": 1,
        "name": "planted",
        "description": "Offline set shipped with PR Cockpit: the generated `stockroom` "
        "repository with eleven planted defects across five pull requests and two clean ones "
        "(scripts/make_planted_golden.py). With the scripted model its scores are known in "
        "advance, so the harness itself is tested in CI.",
        "repository": "stockroom.bundle",
        "base_ref": "main",
        "cases": cases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "golden" / "planted")
    args = parser.parse_args()
    golden = build(args.out)
    write_golden(args.out / "planted.json", golden)
    labels = sum(len(c["labels"]) for c in golden["cases"])
    print(
        f"wrote {args.out / 'planted.json'} ({len(golden['cases'])} cases, {labels} labels) "
        f"and {args.out / 'stockroom.bundle'}"
    )
    print(json.dumps({c["id"]: c["head_sha"][:12] for c in golden["cases"]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
