"""The cockpit page's server time at 10,000 reviews and 100,000 runs.

Writes a SQLite history straight into the database (5,000 open PRs over 50 repositories, each
with a published review and a draft — 10,000 reviews, four findings each —, ten model runs per
review with their token counts: 100,000 runs), counts the review figures, starts the real app
(`make_app` on 127.0.0.1, its workers too) against the GitHub stand-in, signs two people in
(their tokens stored as the sign-in callback stores them, the page's session cookie): an
operator (COCKPIT_OPERATORS: every repository) and a member whose token reaches 25 of the 50
repositories. Then times, interleaved so a noisy moment hits every page alike, GET `/` and
GET `/stats` for each person and the baseline in the same run: GET `/healthz/live` (the
server's floor: routing, middleware, the HTTP round trip on loopback). Prints p50 / p90 / max
per page and whether every page's p50 is within the target.

    python scripts/bench_pages.py [--requests 40]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.auth.oauth import GitHubUser, TokenPair  # noqa: E402
from bot.auth.session import COOKIE, start_session  # noqa: E402
from bot.config import Secret  # noqa: E402
from bot.records.sqlite import SqliteDatabase  # noqa: E402
from bot.records.stats import recount_stale  # noqa: E402
from bot.server import CONTEXT, make_app  # noqa: E402
from bot.standin import serve_local  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from handlers import router  # noqa: E402

TARGET_MS = 150.0
REPOS = 50
PULLS = 5_000  # two reviews each
RUNS_PER_REVIEW = 10
MODELS = (("claude", "claude-x"), ("codex", "gpt-y"))
SEVERITIES = ("critical", "major", "minor", "nit")


def fill(path: Path, ids: dict[str, int]) -> tuple[int, int]:
    """The history, written in one transaction; (reviews, runs). `ids`: GitHub's (the
    stand-in's) id of each repository, which every PR row carries."""
    now = time.time()
    conn = sqlite3.connect(path)
    reviews = runs = 0
    with conn:
        for n in range(PULLS):
            provider, model = MODELS[n % len(MODELS)]
            repo = f"octo/repo{n % REPOS}"
            pull_id = conn.execute(
                "INSERT INTO pulls (installation_id, repo, repo_id, number, state, title,"
                " html_url, updated_at) VALUES (?, ?, ?, ?, 'open', ?, ?, ?)",
                (
                    1 + n % REPOS,
                    repo,
                    ids[repo],
                    n + 1,
                    f"Change number {n}",
                    f"https://github.test/{repo}/pull/{n + 1}",
                    now,
                ),
            ).lastrowid
            for k, state in enumerate(("posted", "draft")):
                created = now - 180 * 86400 * (1 - n / PULLS) + k
                review_id = conn.execute(
                    "INSERT INTO reviews (pull_id, head_sha, state, provider, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (pull_id, f"{k}" * 40, state, provider, created, created),
                ).lastrowid
                reviews += 1
                session_id = conn.execute(
                    "INSERT INTO sessions (pull_id, review_id, provider, model, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (pull_id, review_id, provider, model, created, created),
                ).lastrowid
                for ordinal, severity in enumerate(SEVERITIES, 1 + 4 * k):
                    conn.execute(
                        "INSERT INTO findings (review_id, ordinal, path, line, severity, title,"
                        " state, verify_status) VALUES (?, ?, ?, ?, ?, 'a problem', ?, ?)",
                        (
                            review_id,
                            ordinal,
                            f"app/m{ordinal}.py",
                            ordinal,
                            severity,
                            "dropped" if ordinal % 4 == 2 and state == "posted" else "kept",
                            "confirmed" if ordinal % 2 else None,
                        ),
                    )
                for r in range(RUNS_PER_REVIEW):
                    run_id = conn.execute(
                        "INSERT INTO runs (kind, session_id, review_id, provider, model, status,"
                        " tool_calls, cost_usd, started_at, finished_at, installation_id)"
                        " VALUES ('review', ?, ?, ?, ?, 'ok', 12, ?, ?, ?, ?)",
                        (
                            session_id,
                            review_id,
                            provider,
                            model,
                            0.01 * (r + 1),
                            created + r,
                            created + r + 30,
                            1 + n % REPOS,
                        ),
                    ).lastrowid
                    conn.execute(
                        "INSERT INTO run_usage (run_id, model, input_tokens, output_tokens,"
                        " cache_read_tokens, cost_usd) VALUES (?, ?, 20000, 800, 15000, ?)",
                        (run_id, model, 0.01 * (r + 1)),
                    )
                    runs += 1
    conn.close()
    return reviews, runs


async def prepare(path: Path, ids: dict[str, int]) -> float:
    """The schema, the history, its review figures counted; seconds it took."""
    began = time.monotonic()
    db = await SqliteDatabase.open(path)
    await db.close()
    fill(path, ids)
    db = await SqliteDatabase.open(path)
    try:
        await recount_stale(db)
    finally:
        await db.close()
    return time.monotonic() - began


def cookie_of(settings, user_id: int, login: str) -> str:
    response = web.Response()
    start_session(response, settings, user_id, login)
    return response.cookies[COOKIE].value


async def timed(http: aiohttp.ClientSession, url: str, cookie: str | None) -> float:
    cookies = {COOKIE: cookie} if cookie else {}
    began = time.perf_counter()
    async with http.get(url, cookies=cookies) as response:
        await response.read()
        assert response.status == 200, (url, response.status)
    return (time.perf_counter() - began) * 1000


async def shows_what_each_may_see(http: aiohttp.ClientSession, url: str, cookies: dict) -> None:
    """The pages timed are the real ones: the operator's inbox lists every repository's
    drafts, the member's only those of the repositories their token reaches."""
    shown = {}
    for who in ("operator", "member"):
        async with http.get(url + "/", cookies={COOKIE: cookies[who]}) as response:
            shown[who] = await response.text()
    newest = f"octo/repo{(PULLS - 1) % REPOS}#{PULLS}"  # an odd repository: the operator's
    assert newest in shown["operator"], "the operator's inbox lacks the newest draft"
    assert newest not in shown["member"] and "octo/repo0#" in shown["member"], (
        "the member's inbox does not show exactly their repositories"
    )


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40, help="per page and person")
    args = parser.parse_args()
    github = GitHubStandin()
    await github.start()
    for n in range(REPOS):
        github.add_repo(
            "octo", f"repo{n}", clone_url="https://example.test/x.git", installation_id=1 + n
        )
    github.user_access.grant("member", *(f"octo/repo{n}" for n in range(0, REPOS, 2)))
    runner = None
    with tempfile.TemporaryDirectory() as name:
        data = Path(name) / "data"
        ids = {name: repo.id for name, repo in github.repos.items()}
        prepared = await prepare(data / "cockpit.sqlite3", ids)
        settings = dataclasses.replace(
            github.settings(data, "bench-secret"),
            client_id=github.oauth.client_id,
            client_secret=Secret(github.oauth.client_secret),
            public_url="http://127.0.0.1:9",
            secret_key=Secret("b" * 40),
            operators=frozenset({"operator"}),
        )
        app = make_app(settings, router)
        try:
            runner, url = await serve_local(app)
            ctx = app[CONTEXT]
            cookies = {}
            for login in ("operator", "member"):
                user_id = github.oauth.user_id(login)
                token = github.user_token_for(login)
                pair = TokenPair(token, time.time() + 8 * 3600, None, None)
                await ctx.user_tokens.store(GitHubUser(user_id, login), pair)
                cookies[login] = cookie_of(settings, user_id, login)
            pages = [
                ("baseline /healthz/live", "/healthz/live", None),
                ("inbox, operator", "/", "operator"),
                ("inbox, member (25 repos)", "/", "member"),
                ("figures, operator", "/stats", "operator"),
                ("figures, member (25 repos)", "/stats", "member"),
            ]
            times: dict[str, list[float]] = {label: [] for label, _, _ in pages}
            async with aiohttp.ClientSession() as http:
                for _, path, who in pages:  # warm: the access cache, templates
                    await timed(http, url + path, cookies.get(who))
                await shows_what_each_may_see(http, url, cookies)
                for _ in range(args.requests):
                    for label, path, who in pages:
                        times[label].append(await timed(http, url + path, cookies.get(who)))
        finally:
            if runner is not None:
                await runner.cleanup()
            await github.stop()
    print(
        f"history: {2 * PULLS:,} reviews, {2 * PULLS * RUNS_PER_REVIEW:,} runs over {REPOS}"
        f" repositories (written and counted in {prepared:.1f} s); {args.requests} requests"
        " per page, interleaved; time from request to last byte on loopback"
    )
    met = True
    base = statistics.median(times[pages[0][0]])
    for label, _, _ in pages:
        found = sorted(times[label])
        p50 = statistics.median(found)
        p90 = found[int(0.9 * (len(found) - 1))]
        extra = "" if label.startswith("baseline") else f" ({p50 - base:+6.1f} ms over baseline)"
        print(f"{label:<28} p50 {p50:7.1f} ms  p90 {p90:7.1f} ms  max {found[-1]:7.1f} ms{extra}")
        if not label.startswith("baseline"):
            met = met and p50 <= TARGET_MS
    print(f"target p50 <= {TARGET_MS:.0f} ms for every page: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
