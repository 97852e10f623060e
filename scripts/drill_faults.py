"""Fault drill: GitHub answering 500/502, a 403 secondary rate limit with retry-after and a
429; the model answering 529 overloaded, 500, hanging past the request timeout, and failing
for good; the data directory filling up (a size-limited tmpfs). Each fault hits one PR's
review against the real `cockpit serve`.

Holds when each ends in a retried success or a clear failure on the PR (check run
`failure` and a status comment that says why), and the process stays up and healthy
afterwards. Exit 1 on a violation.

    python scripts/drill_faults.py
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from drill_kit import NAME, OWNER, Lab, lab_dir, remove

from bot.standin.models import fail, hang

TMPFS_MB = 96
MIN_FREE_MB = 40
FINAL = ("draft", "failed", "held")


def latest(lab: Lab, number: int) -> tuple[str, str] | None:
    found = lab.rows(
        "SELECT r.state, COALESCE(r.error, r.progress, '') FROM reviews r"
        " JOIN pulls p ON p.id = r.pull_id WHERE p.number = ? ORDER BY r.id DESC LIMIT 1",
        (number,),
    )
    return found[0] if found else None


def status_comment(lab: Lab, number: int) -> str:
    found = lab.github.status_comments(f"{OWNER}/{NAME}", number)
    return found[0]["body"] if found else ""


async def outcome(lab: Lab, number: int, timeout: float = 60) -> tuple[str, str]:
    def done() -> bool:
        found = latest(lab, number)
        return found is not None and found[0] in FINAL and lab.busy_jobs() == 0

    await lab.until(done, timeout, f"PR {number}'s review to end")
    return latest(lab, number) or ("missing", "")


async def scenario(
    lab: Lab,
    session: aiohttp.ClientSession,
    number: int,
    name: str,
    arm: Callable[[], None],
    expect: str,
) -> None:
    arm()
    started = time.monotonic()
    status, _ = await lab.send(session, "pull_request", lab.pull_request("opened", number))
    state, why = await outcome(lab, number)
    seconds = time.monotonic() - started
    comment = status_comment(lab, number)
    checks = [c for c in lab.github.check_runs.values() if c["head_sha"] == lab.heads[number]]
    conclusion = checks[-1].get("conclusion") if checks else None
    print(f"- {name}: ack {status}, review {state} after {seconds:.1f}s; check run {conclusion}")
    if why and state != "draft":
        print(f"    reason shown: {why[:160]}")
    if expect == "draft":
        lab.check(state == "draft" and "Draft ready" in comment, f"{name}: retried to success")
    elif expect == "failed":
        lab.check(
            state == "failed" and conclusion == "failure" and "failed" in comment,
            f"{name}: a clear failure on the PR (check run failure, status comment says why)",
        )
    else:
        lab.check(state == expect and "not started" in comment, f"{name}: held, and says why")


def mount_tmpfs(path: Path) -> str | None:
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if result.returncode == 0 else (result.stderr.strip() or "mount failed")


def fill(path: Path, leave_mb: float) -> None:
    """Write ballast until `leave_mb` MiB are free on the file system of `path`."""
    import shutil

    free = shutil.disk_usage(path).free
    size = max(0, int(free - leave_mb * 1024 * 1024))
    with (path / "ballast").open("ab") as ballast:
        chunk = b"\0" * (1 << 20)
        while size > 0:
            try:
                ballast.write(chunk[: min(size, len(chunk))])
                ballast.flush()
            except OSError:
                break
            size -= len(chunk)


async def drill() -> int:
    root = lab_dir("drill-faults-")
    data = root / "data"
    refused = mount_tmpfs(data)
    lab = Lab(root, 12)
    lab.data_dir = data
    try:
        async with lab:
            print("drill_faults: each fault on its own PR's review")
            if refused:
                print(f"  (tmpfs refused: {refused}; the disk case uses the watermark only)")
            else:
                print(
                    f"  data directory on a {TMPFS_MB} MiB tmpfs, COCKPIT_MIN_FREE_MB={MIN_FREE_MB}"
                )
            await lab.start(
                COCKPIT_MODEL_TIMEOUT_SECONDS="3",
                COCKPIT_MIN_FREE_MB=str(MIN_FREE_MB),
                COCKPIT_MAX_CONCURRENT_REVIEWS="2",
            )
            gh, faults = lab.github, lab.faults
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
                cases = [
                    (
                        "GitHub 500 creating the check run",
                        lambda: gh.fail_next("POST", r"/check-runs$", 500),
                        "draft",
                    ),
                    (
                        "GitHub 502 twice reading the repo config",
                        lambda: gh.fail_next("GET", r"/contents/", 502, times=2),
                        "draft",
                    ),
                    (
                        "GitHub 403 secondary rate limit (retry-after 1)",
                        lambda: gh.fail_next(
                            "POST",
                            r"/pulls/\d+/reviews$",
                            403,
                            headers={"Retry-After": "1"},
                            body={"message": "You have exceeded a secondary rate limit."},
                        ),
                        "draft",
                    ),
                    (
                        "GitHub 429 (retry-after 1) on the status comment",
                        lambda: gh.fail_next(
                            "POST", r"/issues/\d+/comments$", 429, headers={"Retry-After": "1"}
                        ),
                        "draft",
                    ),
                    (
                        "GitHub 502 at both attempts to create the pending review",
                        lambda: gh.fail_next("POST", r"/pulls/\d+/reviews$", 502, times=2),
                        "failed",
                    ),
                    (
                        "model 529 overloaded twice",
                        lambda: faults.queued.extend([fail(529), fail(529)]),
                        "draft",
                    ),
                    (
                        "model 500 twice",
                        lambda: faults.queued.extend(
                            [fail(500, "api_error"), fail(500, "api_error")]
                        ),
                        "draft",
                    ),
                    (
                        "model hangs past the 3 s request timeout",
                        lambda: faults.queued.append(hang(8)),
                        "draft",
                    ),
                    (
                        "model 500 at every attempt",
                        lambda: faults.queued.extend([fail(500, "api_error")] * 5),
                        "failed",
                    ),
                ]
                for number, (name, arm, expect) in enumerate(cases, start=1):
                    await scenario(lab, session, number, name, arm, expect)
                    faults.queued.clear()
                    gh.failures.clear()
                faults.queued.clear()
                gh.failures.clear()

                number = len(cases) + 1
                print(f"- disk (PR {number}):")
                if refused:
                    print("    skipped filling a file system: tmpfs could not be mounted")
                else:
                    fill(data, leave_mb=MIN_FREE_MB / 2)
                    status, health = await lab.health(session)
                    print(
                        f"    below the watermark: /healthz {status} {health.get('status')}: "
                        f"{health.get('reasons')}"
                    )
                    lab.check(
                        status == 200 and health.get("status") == "degraded",
                        "healthz reports degraded with the reason",
                    )
                    await scenario(lab, session, number, "low disk", lambda: None, "held")
                    fill(data, leave_mb=0)
                    full_id = "disk-full-delivery"
                    comment = lab.comment(number, "/cockpit status")
                    full, _ = await lab.send(session, "issue_comment", comment, full_id)
                    print(f"    disk full: a delivery is answered {full}")
                    lab.check(full in (202, 503), "a full disk answers 202 or 503, never hangs")
                    (data / "ballast").unlink()
                    again, _ = await lab.send(session, "issue_comment", comment, full_id)
                    print(f"    space freed: the same delivery redelivered is answered {again}")
                    lab.check(again in (200, 202), "after freeing space the delivery is stored")
                    await lab.until(
                        lambda: (
                            lab.one("SELECT status FROM deliveries WHERE id = ?", (full_id,))
                            != "queued"
                        ),
                        30,
                        "the redelivered delivery to be processed",
                    )
                    review = lab.comment(number, "/cockpit review")
                    await lab.send(session, "issue_comment", review)
                    await lab.until(
                        lambda: (latest(lab, number) or ("",))[0] == "draft",
                        60,
                        "the review a maintainer asked for once space was back",
                    )
                    lab.check(
                        (latest(lab, number) or ("",))[0] == "draft",
                        "with space back, a maintainer's review runs to a draft",
                    )

                status, health = await lab.health(session)
                alive = lab.server is not None and lab.server.proc.poll() is None
                print(
                    f"after every fault: process alive={alive}, /healthz {status} "
                    f"{health.get('status')}, peak RSS {lab.rss_mib():.0f} MiB"
                )
                lab.check(
                    alive and status == 200 and health.get("status") == "ok",
                    "the process stays up and healthy",
                )
            return lab.finish("drill_faults")
    finally:
        if lab.server is not None:
            lab.server.kill()
        if not refused:
            await asyncio.to_thread(subprocess.run, ["umount", "-l", str(data)], check=False)
        remove(root)


if __name__ == "__main__":
    sys.exit(asyncio.run(drill()))
