"""Start compose.yaml with podman-compose on this machine and check what it promises.

    python scripts/compose_check.py

Run as root on Debian, like scripts/container_check.py, whose image it uses (built by
scripts/container_image.py). Missing tools come from apt-get: podman, runc, podman-compose and
Debian's CNI `dnsname` plugin (so services find each other by name). Postgres is the image
deploy/postgres builds from Debian packages on the same base as the project's image (this
machine cannot pull docker.io/library/postgres); compose.yaml names it through
COCKPIT_POSTGRES_IMAGE. Containers run with runc and cgroupfs (a `podman` wrapper given to
podman-compose) and the ulimits runc may set here.

compose.yaml is used as it ships, copied into a scratch folder beside a `cockpit.env` written by
`cockpit register`'s own code (its GITHUB_PRIVATE_KEY_PATH is a host path, as for a user) and
the key passed in GITHUB_PRIVATE_KEY; the GitHub and model stand-ins and a git server for the
PR's repository run in this process, reached from the containers through host.containers.internal.

One PASS/FAIL line per check; exit status 0 when every check passes.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from container_image import IMAGE, Done, base_image, build, ensure_base, sh

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.demo import BASE, HEAD  # noqa: E402
from bot.register import key_path_for, write_credentials  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.repo import git, make_pr  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from tests import deliveries  # noqa: E402

POSTGRES_IMAGE = "localhost/cockpit-postgres:check"
TOOLS = {  # command or file -> Debian package
    "podman": "podman",
    "runc": "runc",
    "podman-compose": "podman-compose",
    "/usr/lib/cni/dnsname": "golang-github-containernetworking-plugin-dnsname",
}
RUN_ARGS = "--ulimit nofile=4096:4096 --ulimit nproc=4096:4096"
HOST = "host.containers.internal"
OWNER, NAME, NUMBER, INSTALLATION, MAINTAINER = "octo", "widgets", 1, 7, "maintainer"
KILLED_DELIVERIES = 4
DEADLINE = 900.0


class Report:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def result(self, ok: bool, what: str, detail: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'}  {what}" + (f": {detail}" if detail else ""), flush=True)
        if not ok:
            self.failed.append(what)
        return ok


async def wait_until(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float, interval: float = 0.25
) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ensure_tools() -> None:
    missing = [
        pkg for tool, pkg in TOOLS.items() if not (shutil.which(tool) or Path(tool).exists())
    ]
    if not missing:
        return
    print(f"info  installing with apt-get: {' '.join(missing)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
    ):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode:
            sys.exit(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")


# -- what the containers talk to --------------------------------------------------------------


async def forward(port: int) -> tuple[asyncio.Server, int]:
    """Listen on every interface and pass each connection to 127.0.0.1:`port` (the stand-ins
    listen on loopback only; containers reach this host through their network's gateway)."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(handle, "0.0.0.0", 0)
    return server, server.sockets[0].getsockname()[1]


async def git_http(origin: Path) -> tuple[web.AppRunner, int]:
    """The PR's repository over git's "dumb" HTTP protocol (what a clone URL serves)."""
    git(origin, "update-server-info")
    folder = (origin / ".git").resolve()

    async def serve(request: web.Request) -> web.StreamResponse:
        target = (folder / request.match_info["path"]).resolve()
        if not target.is_relative_to(folder) or not target.is_file():
            return web.Response(status=404)
        return web.FileResponse(target)

    app = web.Application()
    app.router.add_get("/widgets.git/{path:.+}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


# -- the stack ----------------------------------------------------------------------------------


class Stack:
    """compose.yaml, as shipped, in a scratch folder with its cockpit.env, run by podman-compose."""

    def __init__(self, work: Path, key: str) -> None:
        self.work = work
        self.project = f"cockpit-check-{secrets.token_hex(3)}"
        self.web_port = free_port()
        self.url = f"http://127.0.0.1:{self.web_port}"
        wrapper = work / "podman"
        wrapper.write_text('#!/bin/sh\nexec podman --runtime runc --cgroup-manager cgroupfs "$@"\n')
        wrapper.chmod(0o755)
        self.env = {
            **os.environ,
            "GITHUB_PRIVATE_KEY": key,  # as README says: from the key file, in the environment
            "POSTGRES_PASSWORD": secrets.token_hex(12),
            "COCKPIT_IMAGE": IMAGE,
            "COCKPIT_POSTGRES_IMAGE": POSTGRES_IMAGE,
            "COCKPIT_WEB_PORT": str(self.web_port),
        }

    async def compose(self, *args: str, timeout: float = 300) -> Done:
        return await sh(
            "podman-compose", "-p", self.project, "-f", self.work / "compose.yaml",
            "--podman-path", self.work / "podman", "--podman-run-args", RUN_ARGS,
            *args, timeout=timeout, env=self.env,
        )  # fmt: skip

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    async def state(self, service: str) -> tuple[str, int]:
        done = await sh(
            "podman", "inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}",
            self.container(service),
        )  # fmt: skip
        status, _, code = done.out.strip().partition(" ")
        return status, int(code or -1)

    async def health(self, service: str) -> Done:
        """The service's own healthcheck command from compose.yaml, run in its container."""
        raw = await sh(
            "podman", "inspect", "--format", "{{json .Config.Healthcheck}}", self.container(service)
        )
        config = json.loads(raw.out or "null") or {}
        test = config.get("Test") or []
        if not test:
            return Done(1, "", "no healthcheck configured")
        command = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
        return await sh("podman", "exec", self.container(service), *command, timeout=20)

    async def logs(self, service: str, lines: int = 20) -> str:
        return (await sh("podman", "logs", self.container(service))).tail(lines)

    async def down(self) -> None:
        """Containers with their anonymous volumes (the image's /data), then the rest."""
        for service in ("worker-1", "worker-2", "web", "migrate", "db"):
            await sh("podman", "rm", "-f", "-v", "-t", "5", self.container(service), timeout=60)
        await self.compose("down", "-v", timeout=180)
        for volume in ("pgdata", "worker-1-data", "worker-2-data"):
            await sh("podman", "volume", "rm", "-f", f"{self.project}_{volume}")
        await sh("podman", "network", "rm", "-f", f"{self.project}_default")


def pull_request_opened(clone_url: str, head_sha: str, base_sha: str) -> dict:
    data = deliveries.payload("pull_request.opened")
    deliveries.retarget(
        data, owner=OWNER, name=NAME, clone_url=clone_url, installation_id=INSTALLATION
    )
    pr = data["pull_request"]
    data["number"] = pr["number"] = NUMBER
    pr["head"]["sha"] = head_sha
    pr["base"]["ref"] = "main"
    pr["base"]["sha"] = base_sha
    pr["draft"] = False
    pr["state"] = "open"
    data["sender"] = {"login": "contributor", "id": 3, "type": "User"}
    return data


def status_command(clone_url: str, comment_id: int) -> dict:
    data = deliveries.payload("issue_comment.created")
    deliveries.retarget(
        data, owner=OWNER, name=NAME, clone_url=clone_url, installation_id=INSTALLATION
    )
    deliveries.as_pr_comment(data, NUMBER)
    data["comment"]["id"] = comment_id
    data["comment"]["body"] = "/cockpit status"
    data["comment"]["user"] = data["sender"] = {"login": MAINTAINER, "id": 2, "type": "User"}
    return data


async def deliver(url: str, event: str, data: dict, secret: str, delivery_id: str) -> int:
    body = json.dumps(data).encode()
    headers = deliveries.headers(event, body, secret, delivery_id)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.post(f"{url}/webhooks/github", data=body, headers=headers) as response,
        ):
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def http_status(url: str) -> int:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
            http.get(url) as response,
        ):
            return response.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


# -- the checks -----------------------------------------------------------------------------------


async def check_stack(report: Report) -> None:
    github = GitHubStandin()
    model = AnthropicStandin(scripted_reviewer)
    await github.start()
    await model.start()
    work = Path(tempfile.mkdtemp(prefix="cockpit-compose-"))
    servers: list[asyncio.Server] = []
    repo_server: web.AppRunner | None = None
    stack: Stack | None = None
    try:
        pr = await asyncio.to_thread(make_pr, work / "origin", base=BASE, head=HEAD, number=NUMBER)
        repo_server, repo_port = await git_http(work / "origin")
        ports = {}
        for name, url in (("github", github.url), ("model", model.url), ("git", "")):
            upstream = repo_port if name == "git" else int(url.rsplit(":", 1)[1])
            server, ports[name] = await forward(upstream)
            servers.append(server)
        clone_url = f"http://{HOST}:{ports['git']}/widgets.git"
        github.add_generated_pr(
            OWNER, NAME, pr, installation_id=INSTALLATION,
            permissions={MAINTAINER: "maintain"}, title="Look users up by name",
        )  # fmt: skip
        github.repos[f"{OWNER}/{NAME}"].clone_url = clone_url
        secret = secrets.token_hex(20)
        shutil.copy2(ROOT / "compose.yaml", work / "compose.yaml")
        env_file = work / "cockpit.env"
        app = {"id": github.app_id, "slug": github.slug, "name": "PR Cockpit"}
        app |= {"pem": github.private_key_pem, "webhook_secret": secret}
        write_credentials(app | {"html_url": f"{github.url}/apps/{github.slug}"}, env_file,
                          f"http://{HOST}:{ports['github']}")  # fmt: skip
        with env_file.open("a") as extra:  # README step 2: the model key (here: the stand-in)
            extra.write(
                f"ANTHROPIC_BASE_URL=http://{HOST}:{ports['model']}\n"
                f"ANTHROPIC_API_KEY=offline-check\nCOCKPIT_CLAUDE_MODEL={MODEL}\n"
                "COCKPIT_WORKER_TIMEOUT=5\n"
            )
        stack = Stack(work, key_path_for(env_file).read_text())
        if await start(report, stack):
            await review(report, github, stack, pr, clone_url, secret)
            await kill_a_worker(report, github, stack, clone_url, secret)
    finally:
        if stack is not None:
            await stack.down()
        for server in servers:
            server.close()
        if repo_server is not None:
            await repo_server.cleanup()
        github.gate.set()
        await github.stop()
        await model.stop()
        shutil.rmtree(work, ignore_errors=True)


async def start(report: Report, stack: Stack) -> bool:
    up = await stack.compose("up", "-d", "--no-build")
    detail = "" if up.code == 0 else up.tail(10)
    if not report.result(up.code == 0, "`podman-compose up -d` starts compose.yaml", detail):
        return False

    async def migrated() -> bool:
        return (await stack.state("migrate")) == ("exited", 0)

    ok = await wait_until(migrated, 180)
    said = [line for line in (await stack.logs("migrate", 50)).splitlines() if "schema" in line]
    report.result(
        ok,
        "the migrate service applies the schema and exits 0",
        f"`cockpit migrate` said: {said[-1].strip() if said else '(nothing)'}",
    )
    ready = await wait_until(lambda: _ready(stack), 180)
    report.result(ready, "the web service is ready (GET /healthz/ready on its published port)")
    for service in ("web", "worker-1", "worker-2"):

        async def healthy(service: str = service) -> bool:
            return (await stack.health(service)).code == 0

        ok = await wait_until(healthy, 120, 1.0)
        report.result(ok, f"{service}'s healthcheck from compose.yaml passes",
                      "" if ok else await stack.logs(service))  # fmt: skip
    mounts = {}
    for service in ("worker-1", "worker-2"):
        raw = await sh(
            "podman", "inspect", "--format", "{{json .Mounts}}", stack.container(service)
        )
        mounts[service] = {
            m.get("Name") for m in json.loads(raw.out or "[]") if m["Destination"] == "/data"
        }
    distinct = mounts["worker-1"].isdisjoint(mounts["worker-2"]) and all(mounts.values())
    report.result(distinct, "each worker has its own /data volume",
                  ", ".join(f"{s}: {', '.join(sorted(v))}" for s, v in mounts.items()))  # fmt: skip
    return ready


async def _ready(stack: Stack) -> bool:
    return await http_status(f"{stack.url}/healthz/ready") == 200


async def review(
    report: Report, github: GitHubStandin, stack: Stack, pr, clone_url: str, secret: str
) -> None:
    begun = time.monotonic()
    code = await deliver(
        stack.url, "pull_request", pull_request_opened(clone_url, pr.head_sha, pr.base_sha),
        secret, "compose-opened",
    )  # fmt: skip

    def drafted() -> bool:
        pending = [r for r in github.reviews.values() if r["state"] == "PENDING"]
        comments = github.status_comments(f"{OWNER}/{NAME}", NUMBER)
        return bool(pending) and bool(comments) and "F1" in comments[0]["body"]

    ok = code == 202 and await wait_until(drafted, 180)
    detail = (
        f"HTTP {code}, draft in {time.monotonic() - begun:.1f}s"
        if ok
        else (f"HTTP {code}\n{await stack.logs('worker-1')}\n{await stack.logs('worker-2')}")
    )
    report.result(ok, "a signed pull_request delivery to web becomes a draft", detail)


async def kill_a_worker(
    report: Report, github: GitHubStandin, stack: Stack, clone_url: str, secret: str
) -> None:
    """Deliveries acknowledged while GitHub hangs; the worker running them is SIGKILLed: its
    restart policy brings it back, and every delivery is processed."""
    what = "a worker SIGKILLed mid-job loses nothing (restart policy, jobs run again)"
    parked = github.gate
    parked.clear()
    try:
        seen = len(github.requests)
        acknowledged = []
        for n in range(KILLED_DELIVERIES):
            comment_id = 7001 + n
            code = await deliver(stack.url, "issue_comment", status_command(clone_url, comment_id),
                                 secret, f"compose-kill-{n}")  # fmt: skip
            if code == 202:
                acknowledged.append(comment_id)
        mid_job = await wait_until(lambda: len(github.requests) > seen, 60)
        killed = []
        for service in ("worker-1", "worker-2"):  # whichever holds the job: both, at once
            # SIGKILL from outside, as the kernel's OOM killer would: `podman kill` counts as
            # stopped by the user, and a restart policy leaves those alone.
            pid = await sh(
                "podman", "inspect", "--format", "{{.State.Pid}}", stack.container(service)
            )
            try:
                os.kill(int(pid.out.strip()), signal.SIGKILL)
                killed.append(True)
            except (ValueError, ProcessLookupError):
                killed.append(False)
        github.gate = asyncio.Event()
        github.gate.set()
        if len(acknowledged) != KILLED_DELIVERIES or not mid_job or not all(killed):
            report.result(False, what, f"{len(acknowledged)} acknowledged, mid-job {mid_job}")
            return

        async def back() -> bool:
            states = [await stack.state(s) for s in ("worker-1", "worker-2")]
            return all(status == "running" for status, _ in states)

        restarted = await wait_until(back, 60)
        report.result(restarted, "killed workers are started again by `restart: unless-stopped`")

        def rocket(comment_id: int) -> bool:
            return any(
                r["comment_id"] == comment_id and r["content"] == "rocket" for r in github.reactions
            )

        ok = await wait_until(lambda: all(rocket(c) for c in acknowledged), 180)
        processed = sum(rocket(c) for c in acknowledged)
        detail = f"{processed}/{len(acknowledged)} acknowledged deliveries processed"
        report.result(ok, what, detail if ok else detail + "\n" + await stack.logs("worker-1"))
    finally:
        parked.set()


async def build_images(report: Report) -> bool:
    await ensure_base(base_image())
    done, seconds = await build()
    if not report.result(done.code == 0, "the project's image builds", f"{seconds:.0f}s"):
        print(done.tail(30))
        return False
    started = time.monotonic()
    done = await sh(
        "podman", "build", "--format", "docker", "--isolation", "chroot", "--pull=never",
        "--network", "host", "-t", POSTGRES_IMAGE, ROOT / "deploy/postgres",
        timeout=600,
    )  # fmt: skip
    seconds = time.monotonic() - started
    ok = report.result(done.code == 0, "Postgres from Debian packages builds (deploy/postgres)",
                       f"{seconds:.0f}s")  # fmt: skip
    if not ok:
        print(done.tail(30))
    return ok


async def check_all() -> int:
    report = Report()
    started = time.monotonic()
    if await build_images(report):
        await check_stack(report)
    elapsed = time.monotonic() - started
    if report.failed:
        print(f"compose check: {len(report.failed)} failed ({elapsed:.0f}s)")
        return 1
    print(f"compose check: all passed ({elapsed:.0f}s)")
    return 0


async def bounded() -> int:
    try:
        return await asyncio.wait_for(check_all(), DEADLINE)
    except TimeoutError:
        print(f"FAIL  compose check: not finished within {DEADLINE / 60:g} minutes")
        return 1


def main() -> int:
    if os.geteuid() != 0:
        print("compose check: run it as root (podman here runs rootful; tools come from apt-get)")
        return 2
    ensure_tools()
    return asyncio.run(bounded())


if __name__ == "__main__":
    sys.exit(main())
