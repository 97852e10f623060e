"""Webhook ingress benchmark: `cockpit serve` against a bare aiohttp 202 endpoint.

Sends N signed ~10 KB `pull_request` deliveries at concurrency C to each server (both run as
subprocesses, driven by the same client), prints deliveries/s and p50/p99 acknowledgement
latency for both and their ratio, then checks the inbox holds exactly N rows.

    python scripts/bench_ingress.py [-n 4000] [-c 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import deliveries  # noqa: E402
from tests.serverproc import ServerProcess, free_port  # noqa: E402

SECRET = "bench-secret"
BARE_SERVER = textwrap.dedent("""
    import sys
    from aiohttp import web
    async def hook(request):
        await request.read()
        return web.json_response({"message": "accepted"}, status=202)
    async def health(request):
        return web.Response(text="ok")
    app = web.Application(client_max_size=25 * 1024 * 1024)
    app.router.add_post("/webhooks/github", hook)
    app.router.add_get("/healthz", health)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
""")


def delivery_body() -> bytes:
    """A ~10 KB `pull_request` delivery: the published example without the two embedded
    copies of the repository under head/base, which GitHub sends for cross-repo PRs."""
    data = deliveries.payload("pull_request.synchronize")
    data["action"] = "labeled"  # accepted and stored, then processed as "no handler"
    for side in ("head", "base"):
        data["pull_request"][side]["repo"] = {
            k: data["pull_request"][side]["repo"][k] for k in ("id", "name", "full_name")
        }
    return json.dumps(data).encode()


async def wait_healthy(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(400):
            try:
                async with session.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError(url)


async def blast(url: str, body: bytes, n: int, concurrency: int, prefix: str) -> dict:
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                headers = deliveries.headers("pull_request", body, SECRET, f"{prefix}-{i}")
                start = time.perf_counter()
                async with session.post(
                    f"{url}/webhooks/github", data=body, headers=headers
                ) as response:
                    await response.read()
                latencies.append(time.perf_counter() - start)
                statuses[response.status] = statuses.get(response.status, 0) + 1

        # warm-up connections outside the timed window
        started = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rate": n / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "statuses": statuses,
    }


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=4000)
    parser.add_argument("-c", type=int, default=64)
    args = parser.parse_args()
    body = delivery_body()
    print(f"payload {len(body)} bytes, N={args.n}, C={args.c}")

    port = free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])  # noqa: ASYNC220
    try:
        await wait_healthy(f"http://127.0.0.1:{port}")
        await blast(f"http://127.0.0.1:{port}", body, 200, args.c, "warm")
        baseline = await blast(f"http://127.0.0.1:{port}", body, args.n, args.c, "bare")
    finally:
        bare.terminate()
        bare.wait()

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        env = {
            "GITHUB_APP_ID": "1",
            "GITHUB_PRIVATE_KEY": _throwaway_key(),
            "GITHUB_WEBHOOK_SECRET": SECRET,
            "GITHUB_API_URL": "http://127.0.0.1:9",  # never reached: no handler matches
            "GITHUB_APP_SLUG": "bench",
        }
        server = ServerProcess(env, data_dir, Path(tmp) / "server.log")
        await server.start()
        try:
            await blast(server.url, body, 200, args.c, "warm")
            cockpit = await blast(server.url, body, args.n, args.c, "cockpit")
        finally:
            server.terminate()
        with sqlite3.connect(data_dir / "cockpit.sqlite3") as conn:
            stored = conn.execute(
                "SELECT COUNT(*) FROM deliveries WHERE id LIKE 'cockpit-%'"
            ).fetchone()[0]

    for name, result in (("bare aiohttp 202", baseline), ("cockpit serve", cockpit)):
        print(
            f"{name:18s} {result['rate']:8.0f} deliveries/s   p50 {result['p50_ms']:6.2f} ms"
            f"   p99 {result['p99_ms']:6.2f} ms   statuses {result['statuses']}"
        )
    ratio = cockpit["rate"] / baseline["rate"]
    lost = args.n - stored
    print(f"throughput ratio cockpit/bare: {ratio:.2f}")
    print(f"inbox rows: {stored} of {args.n} (lost {lost})")
    ok = (
        ratio >= 0.5
        and cockpit["p99_ms"] <= 25
        and lost == 0
        and cockpit["statuses"] == {202: args.n}
    )
    print("targets (ratio >= 0.50, p99 <= 25 ms, 0 lost):", "met" if ok else "NOT met")
    return 0 if ok else 1


def _throwaway_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
