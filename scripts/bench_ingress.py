"""Webhook ingress benchmark: `cockpit serve` against a bare aiohttp 202 endpoint.

Sends signed ~14 KB `pull_request` deliveries at concurrency C to each server (both run as
subprocesses, driven by the same client), and prints deliveries/s and p50/p99 acknowledgement
latency for both, their ratio, and whether every acknowledged delivery is in the inbox.

Two clients, each against both servers: the Python (aiohttp) client sends exactly N
deliveries; wrk (Debian package `wrk`, used when installed) loads for a fixed time with far less
CPU of its own, so it shows more of the servers' cost on this 2-core machine. The machine is
noisy (the same run can vary by 30%), so bare and cockpit rounds alternate and medians count.

    python scripts/bench_ingress.py [-n 4000] [-c 64] [--rounds 3] [--client python|wrk|both]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
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
# A guard, not a target: GitHub sends a review bot tens of deliveries a second and waits 10 s,
# so what matters is that acks stay in the same order of magnitude as a bare endpoint's and
# that nothing acknowledged is lost.
GUARD_RATIO = 0.40
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


WRK_SCRIPT = """
local n, tid = 0, 0
function setup(thread) thread:set("tid", tid); tid = tid + 1 end
function init(args)
  local f = io.open(args[1], "rb"); body = f:read("*a"); f:close()
  signature, prefix = args[2], args[3]
end
function request()
  n = n + 1
  return wrk.format("POST", "/webhooks/github", {
    ["Content-Type"] = "application/json", ["X-GitHub-Event"] = "pull_request",
    ["X-GitHub-Delivery"] = prefix .. "-" .. tid .. "-" .. n,
    ["X-Hub-Signature-256"] = signature}, body)
end
"""


async def wrk(url: str, body_file: Path, script: Path, args, prefix: str, seconds: int) -> dict:
    """The same load from wrk (C, a second process): 64 connections, one thread."""
    signature = deliveries.sign(body_file.read_bytes(), SECRET)
    proc = await asyncio.create_subprocess_exec(
        "wrk", "-t1", f"-c{args.c}", f"-d{seconds}s", "--latency", "-s", str(script),
        f"{url}/webhooks/github", "--", str(body_file), signature, prefix,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out = (await proc.communicate())[0].decode()
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"wrk saw errors:\n{out}")

    def ms(label: str) -> float:
        value, unit = re.search(rf"{label}\s+([\d.]+)(us|ms|s)\b", out).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return {"rate": rate, "p50_ms": ms("50%"), "p99_ms": ms("99%"), "acked": requests}


async def run_load(client: str, url: str, body: bytes, args, prefix: str, tmp: Path) -> dict:
    if client == "python":
        await blast(url, body, 200, args.c, f"{prefix}-warm")
        result = await blast(url, body, args.n, args.c, prefix)
        return {**result, "acked": result["statuses"].get(202, 0)}
    body_file, script = tmp / "body.json", tmp / "wrk.lua"
    body_file.write_bytes(body)
    script.write_text(WRK_SCRIPT)
    await wrk(url, body_file, script, args, f"{prefix}-warm", 1)
    return await wrk(url, body_file, script, args, prefix, args.seconds)


async def bare_round(client: str, body: bytes, args, prefix: str, tmp: Path) -> dict:
    port = free_port()
    bare = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])  # noqa: ASYNC220
    try:
        await wait_healthy(f"http://127.0.0.1:{port}")
        return await run_load(client, f"http://127.0.0.1:{port}", body, args, prefix, tmp)
    finally:
        bare.terminate()
        bare.wait()


async def cockpit_round(client: str, body: bytes, args, prefix: str, tmp: Path, key: str) -> dict:
    data_dir = tmp / prefix
    env = {
        "GITHUB_APP_ID": "1",
        "GITHUB_PRIVATE_KEY": key,
        "GITHUB_WEBHOOK_SECRET": SECRET,
        "GITHUB_API_URL": "http://127.0.0.1:9",  # never reached: no handler matches
        "GITHUB_APP_SLUG": "bench",
        "ANTHROPIC_API_KEY": "sk-ant-bench-0123456789",  # serve needs the reviewer's key
    }
    server = ServerProcess(env, data_dir, tmp / f"{prefix}.log")
    await server.start()
    try:
        result = await run_load(client, server.url, body, args, prefix, tmp)
    finally:
        server.terminate()
    with sqlite3.connect(data_dir / "cockpit.sqlite3") as conn:
        stored = conn.execute(
            "SELECT COUNT(*) FROM deliveries WHERE id LIKE ? AND id NOT LIKE ?",
            (f"{prefix}-%", f"{prefix}-warm%"),
        ).fetchone()[0]
    return {**result, "stored": stored}


def summary(rounds: list[dict]) -> dict:
    return {
        "rate": statistics.median(r["rate"] for r in rounds),
        "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
        "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
        "rates": [round(r["rate"]) for r in rounds],
    }


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=4000, help="deliveries per round (python client)")
    parser.add_argument("-c", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=4, help="seconds per round (wrk)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--client",
        choices=["python", "wrk", "both"],
        default="both" if shutil.which("wrk") else "python",
    )
    args = parser.parse_args()
    body = delivery_body()
    clients = ["python", "wrk"] if args.client == "both" else [args.client]
    print(
        f"payload {len(body)} bytes, C={args.c}, {args.rounds} interleaved rounds per client "
        f"(python: N={args.n} per round; wrk: {args.seconds} s per round)"
    )
    met_all = True
    key = _throwaway_key()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for client in clients:
            bare_runs, cockpit_runs = [], []
            for k in range(args.rounds):  # interleaved: a noisy minute hits both alike
                bare_runs.append(await bare_round(client, body, args, f"{client}-bare{k}", tmp))
                cockpit_runs.append(
                    await cockpit_round(client, body, args, f"{client}-cockpit{k}", tmp, key)
                )
            bare, cockpit = summary(bare_runs), summary(cockpit_runs)
            lost = sum(max(0, r["acked"] - r["stored"]) for r in cockpit_runs)
            exact = all(r["stored"] == r["acked"] for r in cockpit_runs)
            print(f"\nclient: {client}")
            for name, result in (("bare aiohttp 202", bare), ("cockpit serve", cockpit)):
                print(
                    f"  {name:18s} {result['rate']:6.0f} deliveries/s   p50 {result['p50_ms']:6.2f}"
                    f" ms   p99 {result['p99_ms']:6.2f} ms   (rounds: {result['rates']})"
                )
            ratio = cockpit["rate"] / bare["rate"]
            acked = sum(r["acked"] for r in cockpit_runs)
            stored = sum(r["stored"] for r in cockpit_runs)
            print(f"  throughput ratio cockpit/bare (medians): {ratio:.2f}")
            print(
                f"  acknowledged {acked}, inbox rows {stored}, lost {lost}"
                + ("" if exact else " (wrk stops mid-request: rows above acks were in flight)")
            )
            # The guard's ratio is judged with the Python client (as the foundation issue set
            # it); wrk's is shown for comparison. Nothing acknowledged may be lost with either.
            judged = client == "python"
            met = (ratio >= GUARD_RATIO or not judged) and lost == 0
            met_all = met_all and met
            ratio_text = (
                f"ratio >= {GUARD_RATIO:.2f} {'yes' if ratio >= GUARD_RATIO else 'NO'}"
                if judged
                else "ratio shown for comparison"
            )
            print(f"  guard: {ratio_text}, 0 lost {'yes' if lost == 0 else 'NO'}")
    print("\nguard held" if met_all else "\nguard NOT held")
    return 0 if met_all else 1


def _throwaway_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
