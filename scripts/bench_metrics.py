"""`/metrics` scrape time against the size of the review history.

Builds a SQLite history of N reviews (two per PR: a published one and a draft; each with its
primary session, four findings — kept, dropped by a person, withdrawn, refuted — two model
runs and the PR's ledger, one number fixed by a push), starts `cockpit serve` on it, waits
until the review gauges count every review, then times scrapes of each server in turn (a
noisy moment on the machine hits every size alike). Before each scrape a person drops a
finding somewhere (through the database, as `drop` does), so every scrape also has its usual
bit of news to count. Prints the median, p90 and max per size and the ratio of the largest
size's median to the smallest's, all in one run.

    python scripts/bench_metrics.py [--sizes 2000,50000] [--scrapes 50]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.records.sqlite import SqliteDatabase  # noqa: E402
from tests.serverproc import ServerProcess  # noqa: E402

TARGET_MS = 100.0  # at 50,000 reviews
MODELS = (("claude", "claude-x"), ("codex", "gpt-y"))
FINDINGS = (  # (state, checked_by, verify_status) of each review's F1..F4
    ("kept", None, None),
    ("dropped", "human", None),
    ("withdrawn", "claude", None),
    ("kept", None, "refuted"),
)


async def make_schema(path: Path) -> None:
    db = await SqliteDatabase.open(path)
    await db.close()


def fill(path: Path, reviews: int) -> None:
    """`reviews` reviews of `reviews // 2` PRs, written straight into the database."""
    now = time.time()
    conn = sqlite3.connect(path)
    with conn:
        for n in range(reviews // 2):
            provider, model = MODELS[n % len(MODELS)]
            pull_id = conn.execute(
                "INSERT INTO pulls (installation_id, repo, number, state, updated_at)"
                " VALUES (1, ?, ?, 'open', ?)",
                (f"octo/repo{n % 50}", n + 1, now),
            ).lastrowid
            for k, state in enumerate(("posted", "draft")):
                created = now - 365 * 86400 * (1 - n / reviews) + k
                review_id = conn.execute(
                    "INSERT INTO reviews (pull_id, head_sha, state, provider, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (pull_id, f"{k}" * 40, state, provider, created, created),
                ).lastrowid
                session_id = conn.execute(
                    "INSERT INTO sessions (pull_id, review_id, provider, model, created_at,"
                    " updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (pull_id, review_id, provider, model, created, created),
                ).lastrowid
                for ordinal, (f_state, checked_by, verify) in enumerate(FINDINGS, 1 + 4 * k):
                    path_ = f"app/m{ordinal}.py"
                    conn.execute(
                        "INSERT INTO findings (review_id, ordinal, path, line, severity, title,"
                        " state, checked_by, verify_status)"
                        " VALUES (?, ?, ?, ?, 'major', 'a problem', ?, ?, ?)",
                        (review_id, ordinal, path_, ordinal, f_state, checked_by, verify),
                    )
                    fixed_in = "b" * 40 if ordinal == 1 else None  # a push fixed F1
                    conn.execute(
                        "INSERT INTO ledger (pull_id, ordinal, fingerprint, path, code_key,"
                        " title_key, first_review_id, fixed_in, updated_at)"
                        " VALUES (?, ?, ?, ?, '', 't', ?, ?, ?)",
                        (pull_id, ordinal, f"fp{ordinal}", path_, review_id, fixed_in, created),
                    )
                for cost in (0.05, 0.01):
                    conn.execute(
                        "INSERT INTO runs (kind, session_id, review_id, provider, model, status,"
                        " cost_usd, started_at, finished_at)"
                        " VALUES ('review', ?, ?, ?, ?, 'ok', ?, ?, ?)",
                        (session_id, review_id, provider, model, cost, created, created),
                    )
    conn.close()


def reviews_counted(text: str) -> int:
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("cockpit_reviews{")
    )


def stale_marks(path: Path) -> int:
    """Changes the review figures have still to count (the start-up job counts the history
    in chunks; a scrape timed meanwhile would wait for a chunk)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        return conn.execute("SELECT COUNT(*) FROM figures_stale").fetchone()[0]
    except sqlite3.OperationalError:  # a release before the figures were kept
        return 0
    finally:
        conn.close()


def drop_a_finding(path: Path, reviews: int, rng: random.Random) -> None:
    """A person drops F1 of some PR's draft (the database write `drop F1` makes)."""
    review_id = 2 * rng.randrange(reviews // 2) + 2
    conn = sqlite3.connect(path, timeout=30)
    with conn:
        conn.execute(
            "UPDATE findings SET state = 'dropped', checked_by = 'human', why = 'bench'"
            " WHERE review_id = ? AND ordinal = 5",
            (review_id,),
        )
    conn.close()


async def start(size: int, tmp: Path, key: str) -> dict:
    """A server on a history of `size` reviews, once its gauges count every one of them."""
    data_dir = tmp / f"n{size}"
    path = data_dir / "cockpit.sqlite3"
    await make_schema(path)
    began = time.monotonic()
    fill(path, size)
    filled = time.monotonic() - began
    env = {
        "GITHUB_APP_ID": "1",
        "GITHUB_PRIVATE_KEY": key,
        "GITHUB_WEBHOOK_SECRET": "bench-secret",
        "GITHUB_API_URL": "http://127.0.0.1:9",  # never reached
        "GITHUB_APP_SLUG": "bench",
        "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789",  # the reviewer's (never called)
    }
    server = ServerProcess(env, data_dir, tmp / f"n{size}.log")
    await server.start()
    began = time.monotonic()
    counted = 0
    async with aiohttp.ClientSession() as session:
        while time.monotonic() - began < 600:  # the start-up job counts the history
            async with session.get(f"{server.url}/metrics") as response:
                counted = reviews_counted(await response.text())
            if counted == size and not stale_marks(path):
                break
            await asyncio.sleep(0.5)
    ready = time.monotonic() - began
    return {
        "size": size,
        "path": path,
        "server": server,
        "filled_s": filled,
        "ready_s": ready,
        "times": [],
        "rng": random.Random(size),
        "counted": counted,
    }


async def scrape(session: aiohttp.ClientSession, run: dict) -> None:
    """A person drops a finding, then one timed scrape."""
    drop_a_finding(run["path"], run["size"], run["rng"])
    began = time.perf_counter()
    async with session.get(f"{run['server'].url}/metrics") as response:
        text = await response.text()
    run["times"].append((time.perf_counter() - began) * 1000)
    run["counted"] = reviews_counted(text)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,50000", help="review counts, comma-separated")
    parser.add_argument("--scrapes", type=int, default=50, help="per size")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    key = _throwaway_key()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as name:
        try:
            for size in sizes:
                runs.append(await start(size, Path(name), key))
            async with aiohttp.ClientSession() as session:
                for _ in range(args.scrapes):  # interleaved: a noisy moment hits every size
                    for run in runs:
                        await scrape(session, run)
        finally:
            for run in runs:
                run["server"].terminate()
    for run in runs:
        times = sorted(run["times"])
        run["p50_ms"] = statistics.median(times)
        print(
            f"{run['size']:>7,} reviews: scrape p50 {run['p50_ms']:6.1f} ms,"
            f" p90 {times[int(0.9 * (len(times) - 1))]:6.1f} ms, max {times[-1]:6.1f} ms"
            f" ({args.scrapes} scrapes, each after a dropped finding; history written in"
            f" {run['filled_s']:.1f} s and counted {run['ready_s']:.1f} s after the start;"
            f" the gauges count {run['counted']:,} reviews)",
            flush=True,
        )
    small, large = runs[0], runs[-1]
    ratio = large["p50_ms"] / small["p50_ms"]
    print(f"ratio {large['size']:,}/{small['size']:,} (medians): {ratio:.2f}")
    met = large["p50_ms"] <= TARGET_MS and all(r["counted"] == r["size"] for r in runs)
    print(f"target p50 <= {TARGET_MS:.0f} ms at {large['size']:,}: {'met' if met else 'NOT met'}")
    return 0 if met else 1


def _throwaway_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
