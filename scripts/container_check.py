"""Build the container image with podman and check what the README promises about it.

    python scripts/container_check.py

Run as root on a Debian machine (it is part of `.ci/run`). The image comes from
`scripts/container_image.py` (tools from apt-get when missing; a debootstrap stand-in for
python:3.11-slim when that cannot be pulled; `podman build --isolation chroot`). Containers run
with runc and cgroupfs, which work with cgroups in hybrid mode, and `--no-healthcheck`
(podman's health timers want systemd), so the image's HEALTHCHECK command is run with
`podman exec` instead.

Checks, each printed as it is made: the image size; the server runs as a non-root user;
`cockpit demo` exits 0 inside the image; `cockpit serve` in a container, configured by an env
file written the way `cockpit register` writes it and talking to the GitHub and model
stand-ins on this host, turns a signed `pull_request` delivery into a draft; deliveries
acknowledged just before a SIGKILL are all processed once the container is started again on
the same /data volume; stopping it (SIGTERM) exits 0; the HEALTHCHECK command passes while
the server runs and fails when it is down. Exit status 1 when any check fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from container_image import IMAGE, Done, base_image, build, ensure_base, ensure_tools, sh

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.demo import BASE, HEAD  # noqa: E402
from bot.register import key_path_for, write_credentials  # noqa: E402
from bot.standin.github import GitHubStandin  # noqa: E402
from bot.standin.models import AnthropicStandin  # noqa: E402
from bot.standin.repo import make_pr  # noqa: E402
from bot.standin.scripted import MODEL, scripted_reviewer  # noqa: E402
from tests import deliveries  # noqa: E402

PODMAN_RUN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs", "run"]
RUN_FLAGS = [
    "--no-healthcheck",
    "--network",
    "host",
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
]
MAX_IMAGE_MB = 800
OWNER, NAME, NUMBER, INSTALLATION, MAINTAINER = "octo", "widgets", 1, 7, "maintainer"
CRASH_DELIVERIES = 4
DEADLINE = 900.0  # the whole check, base image included (about a minute when it is cached)


class Report:
    def __init__(self) -> None:
        self.failed: list[str] = []

    def result(self, ok: bool, what: str, detail: str = "") -> bool:
        print(f"{'PASS' if ok else 'FAIL'}  {what}" + (f": {detail}" if detail else ""), flush=True)
        if not ok:
            self.failed.append(what)
        return ok


async def wait_until(
    predicate: Callable[[], Awaitable[bool] | bool], timeout: float, interval: float = 0.1
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


# -- the image --------------------------------------------------------------------------------


async def inspect(image: str, template: str) -> str:
    return (await sh("podman", "image", "inspect", "--format", template, image)).out.strip()


async def check_size(report: Report, base: str) -> None:
    size = int(await inspect(IMAGE, "{{.Size}}")) / 1e6
    base_size = int(await inspect(base, "{{.Size}}")) / 1e6
    report.result(
        size <= MAX_IMAGE_MB,
        "image size",
        f"{size:.0f} MB (the base image is {base_size:.0f} MB; limit {MAX_IMAGE_MB} MB)",
    )


async def check_demo(report: Report) -> None:
    started = time.monotonic()
    done = await sh(*PODMAN_RUN, "--rm", *RUN_FLAGS, IMAGE, "cockpit", "demo", timeout=300)
    last = done.out.strip().splitlines()[-1] if done.out.strip() else ""
    ok = done.code == 0
    detail = f"exit {done.code} in {time.monotonic() - started:.0f}s; {last}"
    if not report.result(ok, "`cockpit demo` inside the image", detail):
        print(done.tail(40))


async def healthcheck_command() -> tuple[list[str], float]:
    config = json.loads(await inspect(IMAGE, "{{json .Config.Healthcheck}}"))
    test = config["Test"]
    command = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
    return command, config.get("Timeout", 30e9) / 1e9


async def run_healthcheck(container: str) -> Done:
    command, timeout = await healthcheck_command()
    return await sh("podman", "exec", container, *command, timeout=timeout + 5)


async def check_healthcheck_when_down(report: Report) -> None:
    """The same command in a container whose server never started must fail."""
    name = f"cockpit-check-down-{secrets.token_hex(3)}"
    port = str(free_port())
    started = await sh(
        *PODMAN_RUN, "-d", "--name", name, *RUN_FLAGS, "-e", f"COCKPIT_PORT={port}",
        IMAGE, "sleep", "120",
    )  # fmt: skip
    try:
        if started.code:
            report.result(False, "HEALTHCHECK fails when the server is down", started.tail(5))
            return
        done = await run_healthcheck(name)
        report.result(
            done.code not in (0, -1),
            "HEALTHCHECK fails when the server is down",
            f"exit {done.code} (nothing listens on :{port})",
        )
    finally:
        await sh("podman", "rm", "-f", "-v", "-t", "0", name)


# -- cockpit serve against the stand-ins ------------------------------------------------------


class Served:
    """`cockpit serve` in a container with an env file, state on a named volume."""

    def __init__(self, env_file: Path, key: str, origin: Path, port: int) -> None:
        self.env_file = env_file
        self.key = key
        self.origin = origin
        self.url = f"http://127.0.0.1:{port}"
        self.volume = f"cockpit-check-data-{secrets.token_hex(3)}"
        self.name = ""

    async def start(self) -> Done:
        self.name = f"cockpit-check-serve-{secrets.token_hex(3)}"
        # As the README runs it: --env-file, and the key passed from the environment.
        return await sh(
            *PODMAN_RUN, "-d", "--name", self.name, *RUN_FLAGS,
            "--env-file", self.env_file, "-e", "GITHUB_PRIVATE_KEY",
            "-v", f"{self.volume}:/data", "-v", f"{self.origin}:{self.origin}:ro",
            IMAGE,
            env={**os.environ, "GITHUB_PRIVATE_KEY": self.key},
        )  # fmt: skip

    async def healthy(self, timeout: float = 60) -> bool:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:

            async def answers() -> bool:
                try:
                    async with http.get(f"{self.url}/healthz") as response:
                        return response.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    return False

            return await wait_until(answers, timeout, 0.2)

    async def logs(self) -> str:
        return (await sh("podman", "logs", self.name)).tail(30)

    async def remove(self) -> None:
        if self.name:
            await sh("podman", "rm", "-f", "-v", "-t", "0", self.name)


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
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/webhooks/github",
            data=body,
            headers=deliveries.headers(event, body, secret, delivery_id),
        ) as response,
    ):
        return response.status


async def check_serve(report: Report) -> None:
    github = GitHubStandin()
    model = AnthropicStandin(scripted_reviewer)
    await github.start()
    await model.start()
    work = Path(tempfile.mkdtemp(prefix="cockpit-check-"))
    served: Served | None = None
    try:
        origin = work / "origin"
        pr = await asyncio.to_thread(make_pr, origin, base=BASE, head=HEAD, number=NUMBER)
        github.add_generated_pr(
            OWNER,
            NAME,
            pr,
            installation_id=INSTALLATION,
            permissions={MAINTAINER: "maintain"},
            title="Look users up by name",
        )
        # The container clones the repository from this host path (file://); git refuses a
        # repository another user owns, so it belongs to the image's user, as a clone would.
        uid = int((await sh(*PODMAN_RUN, "--rm", *RUN_FLAGS, IMAGE, "id", "-u")).out.strip())
        os.chmod(work, 0o755)
        for path in [origin, *origin.rglob("*")]:
            os.lchown(path, uid, uid)
        secret = secrets.token_hex(20)
        env_file = work / "cockpit.env"
        app = {"id": github.app_id, "slug": github.slug, "name": "PR Cockpit"}
        app |= {"pem": github.private_key_pem, "webhook_secret": secret}
        write_credentials(
            app | {"html_url": f"{github.url}/apps/{github.slug}"}, env_file, github.url
        )
        port = free_port()
        with env_file.open("a") as extra:  # README step 2: the model key (here: the stand-in)
            extra.write(
                f"ANTHROPIC_BASE_URL={model.url}\nANTHROPIC_API_KEY=offline-check\n"
                f"COCKPIT_CLAUDE_MODEL={MODEL}\nCOCKPIT_PORT={port}\n"
            )
        served = Served(env_file, key_path_for(env_file).read_text(), origin, port)
        if await serve_and_review(report, github, served, pr, secret):
            await crash_and_restart(report, github, served, pr, secret)
    finally:
        if served is not None:
            await served.remove()
            await sh("podman", "volume", "rm", "-f", served.volume)
        await github.stop()
        await model.stop()
        shutil.rmtree(work, ignore_errors=True)


async def serve_and_review(
    report: Report, github: GitHubStandin, served: Served, pr, secret: str
) -> bool:
    started = await served.start()
    if started.code or not await served.healthy():
        report.result(False, "`cockpit serve` starts in a container", await served.logs())
        return False
    status = (await sh("podman", "exec", served.name, "cat", "/proc/1/status")).out
    uid = re.search(r"^Uid:\s+(\d+)", status, re.M)
    user = await inspect(IMAGE, "{{.Config.User}}")
    report.result(
        bool(uid) and uid.group(1) != "0",  # type: ignore[union-attr]
        "the server runs as a non-root user",
        f"PID 1 (`cockpit serve`) has uid {uid.group(1) if uid else '?'}; image USER {user}",
    )
    begun = time.monotonic()
    code = await deliver(
        served.url,
        "pull_request",
        pull_request_opened(pr.clone_url, pr.head_sha, pr.base_sha),
        secret,
        "check-opened",
    )

    def drafted() -> bool:
        pending = [
            r
            for r in github.reviews.values()
            if r["state"] == "PENDING" and r["commit_id"] == pr.head_sha
        ]
        comments = github.status_comments(f"{OWNER}/{NAME}", NUMBER)
        return bool(pending) and bool(comments) and "F1" in comments[0]["body"]

    ok = code == 202 and await wait_until(drafted, 120)
    if ok:
        [review] = [r for r in github.reviews.values() if r["state"] == "PENDING"]
        body = github.status_comments(f"{OWNER}/{NAME}", NUMBER)[0]["body"]
        findings = sorted(set(re.findall(r"\bF(\d+)\b", body)), key=int)
        detail = (
            f"HTTP {code}, then in {time.monotonic() - begun:.1f}s a pending review with "
            f"{len(review['comments'])} inline comments and a status comment listing "
            f"F1 to F{findings[-1]}"
        )
    else:
        detail = f"HTTP {code}; no draft on the GitHub stand-in\n{await served.logs()}"
    drafted_ok = report.result(
        ok, "`cockpit serve` turns a signed pull_request delivery into a draft", detail
    )
    done = await run_healthcheck(served.name)
    report.result(done.code == 0, "HEALTHCHECK passes while the server runs", f"exit {done.code}")
    return drafted_ok


async def crash_and_restart(
    report: Report, github: GitHubStandin, served: Served, pr, secret: str
) -> None:
    """Deliveries acknowledged while GitHub hangs, then SIGKILL: a new container on the same
    volume must process every one. The killed process's calls stay parked on the old gate, so
    every reaction counted afterwards comes from the new container."""
    what = "SIGKILL, then a new container on the same /data: nothing acknowledged is lost"
    parked = github.gate
    parked.clear()
    try:
        seen = len(github.requests)
        acknowledged = []
        for n in range(CRASH_DELIVERIES):
            comment_id = 5001 + n
            data = status_command(pr.clone_url, comment_id)
            code = await deliver(served.url, "issue_comment", data, secret, f"check-crash-{n}")
            if code == 202:
                acknowledged.append(comment_id)
        mid_job = await wait_until(lambda: len(github.requests) > seen, 30)
        killed = await sh("podman", "kill", "--signal", "KILL", served.name)
        await sh("podman", "wait", served.name, timeout=30)
        await served.remove()
        github.gate = asyncio.Event()
        github.gate.set()
        if len(acknowledged) != CRASH_DELIVERIES or not mid_job or killed.code:
            detail = f"{len(acknowledged)}/{CRASH_DELIVERIES} acknowledged; kill: {killed.tail(3)}"
            report.result(False, what, detail)
            return
        restarted = await served.start()
        if restarted.code or not await served.healthy():
            report.result(False, what, f"no restart: {await served.logs()}")
            return

        def rocket(comment_id: int) -> bool:
            return any(
                r["comment_id"] == comment_id and r["content"] == "rocket" for r in github.reactions
            )

        ok = await wait_until(lambda: all(rocket(c) for c in acknowledged), 120)
        processed = sum(rocket(c) for c in acknowledged)
        detail = (
            f"{processed}/{len(acknowledged)} deliveries acknowledged (202) before the kill "
            "were processed after the restart"
        )
        if not ok:
            detail += f"\n{await served.logs()}"
        report.result(ok, what, detail)
        stopped = await sh("podman", "stop", "-t", "15", served.name, timeout=30)
        code = (await sh("podman", "inspect", "--format", "{{.State.ExitCode}}", served.name)).out
        report.result(
            stopped.code == 0 and code.strip() == "0",
            "`podman stop` (SIGTERM) ends the server cleanly",
            f"exit {code.strip() or '?'}",
        )
    finally:
        parked.set()  # let the dead process's parked requests finish so the stand-in can stop


# -- main -------------------------------------------------------------------------------------


async def check_all() -> int:
    report = Report()
    started = time.monotonic()
    base = base_image()
    await ensure_base(base)
    done, seconds = await build()
    if not report.result(done.code == 0, "image builds", f"{seconds:.0f}s"):
        print(done.tail(40))
    else:
        await check_size(report, base)
        await check_demo(report)
        await check_serve(report)
        await check_healthcheck_when_down(report)
    elapsed = time.monotonic() - started
    if report.failed:
        print(f"container check: {len(report.failed)} failed ({elapsed:.0f}s)")
        return 1
    print(f"container check: all passed ({elapsed:.0f}s)")
    return 0


async def bounded() -> int:
    try:
        return await asyncio.wait_for(check_all(), DEADLINE)
    except TimeoutError:
        print(f"FAIL  container check: not finished within {DEADLINE / 60:g} minutes")
        return 1


def main() -> int:
    if os.geteuid() != 0:
        print("container check: run it as root (podman here runs rootful; tools come from apt-get)")
        return 2
    ensure_tools()
    return asyncio.run(bounded())


if __name__ == "__main__":
    sys.exit(main())
