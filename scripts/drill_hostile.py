"""Hostile-input drill: the audit's inputs against the real `cockpit serve`: commits with
64 MiB subjects read through git_log, 16 gzip bombs, a model answer full of the markdown
and mention cases, commands hidden in HTML comments and <pre>, a close/reopen loop, and a
stranger's flood of 200 commands.

Holds when the server's memory stays under MEMORY_BOUND_MIB (peak RSS is reported),
nothing inert becomes active on any surface (status comment, check run summary and
annotations, pending review body and comments), hidden commands never run, the loop runs
the model once, and the flood gets at most one answer. Exit 1 on a violation.

    python scripts/drill_hostile.py [--subject-mib 64]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import sys
import time

import aiohttp
from drill_kit import NAME, OWNER, Lab, lab_dir, remove

from bot.standin.models import Action, Conversation, call
from bot.standin.repo import git
from tests.inert import MENTION, read

MEMORY_BOUND_MIB = 300
REPO_URL = f"https://github.test/{OWNER}/{NAME}"
HOSTILE = (
    "café@octocat and naïve@octocat, &#64;octocat &#x40;admins &commat;octocat, @org/team\n"
    '<details><summary>ok</summary>hidden</details> <img src="https://evil.test/t.png">\n'
    "![x](https://evil.test/track.png) [docs](https://evil.test) <https://evil.test> "
    "www.evil.test see octo/other#12 and octocat@deadbeef12\n"
    "<!-- pr-cockpit:status -->\n"
    "```\n~~~\n"
)
# What the templates themselves put on a surface; nothing else may be active.
OWN = {("html comment", " pr-cockpit:status "), ("raw html", "details"),
       ("raw html", "summary"), ("raw html", "sub")}  # fmt: skip


def hostile_reviewer(conversation: Conversation) -> Action:
    """Reads the history (git_log over the huge subjects), lists files, then submits a
    review whose every text field carries the audit's cases."""
    called = [name for name, _ in conversation.tool_calls]
    for name, args in (("git_log", {"max_count": 4}), ("list_files", {}), ("git_diff", {})):
        if name not in called:
            return call(name, **args)
    diff = conversation.result_of("git_diff") or ""
    path = next((line[6:] for line in diff.splitlines() if line.startswith("+++ b/")), "x.py")
    findings = [
        {"path": path, "line": 2, "side": "RIGHT", "severity": "critical",
         "title": "eval " + HOSTILE.replace("\n", " "), "body": HOSTILE,
         "suggestion": "```\n~~~\n@octocat", "evidence": HOSTILE, "confidence": 90},
        {"path": "café@octocat.py", "line": 1, "side": "RIGHT", "severity": "nit",
         "title": "<img src=x> @octocat", "body": HOSTILE, "evidence": HOSTILE, "confidence": 60},
    ]  # fmt: skip
    return call("submit_review", summary=HOSTILE, verdict="request_changes", findings=findings)


def add_huge_subjects(lab: Lab, number: int, mib: int) -> None:
    origin = lab.root / "origin"
    message = lab.root / "subject.txt"
    head = lab.heads[number]
    for n in range(4):
        message.write_bytes(str(n).encode() + b"s" * (mib * 1024 * 1024) + b"\n")
        tree = git(origin, "rev-parse", f"{head}^{{tree}}").strip()
        head = git(origin, "commit-tree", tree, "-p", head, "-F", str(message)).strip()
    message.unlink()
    git(origin, "update-ref", f"refs/pull/{number}/head", head)
    repo = lab.github.repos[f"{OWNER}/{NAME}"]
    diff = git(origin, "diff", "--no-color", "-M", lab.base_sha, head)
    lab.github.add_pull(repo, number, head_sha=head, base_sha=lab.base_sha, diff=diff)
    lab.heads[number] = head


def surfaces(lab: Lab, number: int) -> dict[str, str]:
    found = {}
    for comment in lab.github.status_comments(f"{OWNER}/{NAME}", number):
        found["status comment"] = comment["body"]
    for check in lab.github.check_runs.values():
        if check["head_sha"] == lab.heads[number]:
            found["check run summary"] = check.get("output", {}).get("summary", "")
    for review in lab.github.reviews.values():
        if review["number"] == number:
            found["pending review body"] = review["body"]
            for n, comment in enumerate(review["comments"], start=1):
                found[f"inline comment {n}"] = comment["body"]
    return found


def runs_of(lab: Lab, number: int) -> int:
    return lab.one(
        "SELECT COUNT(*) FROM runs r JOIN reviews v ON v.id = r.review_id"
        " JOIN pulls p ON p.id = v.pull_id WHERE p.number = ?",
        (number,),
    )


async def drill(subject_mib: int) -> int:
    root = lab_dir("drill-hostile-")
    try:
        async with Lab(root, 3) as lab:
            lab.faults.policy = hostile_reviewer
            await asyncio.to_thread(add_huge_subjects, lab, 2, subject_mib)
            await lab.start()
            started_rss = lab.rss_mib("VmRSS")
            print(f"drill_hostile: server started at {started_rss:.0f} MiB RSS")
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                # 1. Commits with huge subjects, read by the reviewer through git_log.
                await lab.send(session, "pull_request", lab.pull_request("opened", 2))
                await lab.until(
                    lambda: (
                        lab.rows("SELECT state FROM reviews") == [("draft",)]
                        and lab.busy_jobs() == 0
                    ),
                    90,
                    "the review of the huge-subject PR",
                )
                results = lab.rows(
                    "SELECT content FROM messages WHERE content LIKE '%output truncated%'"
                )
                if not results:  # say what git_log answered instead
                    for (content,) in lab.rows(
                        "SELECT content FROM messages WHERE content LIKE '%tool_result%'"
                    ):
                        print("    tool answer:", content[:200], "…", content[-200:])
                print(
                    f"- 4 commits with {subject_mib} MiB subjects: review "
                    f"{lab.rows('SELECT state FROM reviews')}, peak RSS {lab.rss_mib():.0f} MiB"
                )
                lab.check(bool(results), "git_log's answer says the output was truncated")

                # 2. Markdown and mention cases in every text the model wrote.
                shown = surfaces(lab, 2)
                for name, body in shown.items():
                    active = read(body, REPO_URL).active
                    extra = {k: v for k, v in active.items() if k not in OWN}
                    marker = active.get(("html comment", " pr-cockpit:status "), 0)
                    lab.check(
                        not extra and marker <= (name == "status comment"),
                        f"{name}: nothing active beyond the template's own {dict(extra) or ''}",
                    )
                strong = read(shown.get("status comment", ""), REPO_URL).strong
                lab.check("Commands now:" in strong, "status comment: the command line survives")
                check = next(c for c in lab.github.check_runs.values()
                             if c["head_sha"] == lab.heads[2])  # fmt: skip
                texts = [a["title"] + "\n" + a["message"] for a in check["annotations"]]
                mentions = [m for t in texts for m in MENTION.findall(t)]
                lab.check(
                    bool(texts) and not mentions,
                    f"check run annotations ({len(texts)}): no mention ({mentions})",
                )

                # 3. A gzip bomb, 16 times: refused before anything is inflated.
                bomb = gzip.compress(b"\0" * (25 * 1024 * 1024), 9)
                before = lab.rss_mib("VmRSS")
                slowest = 0.0

                async def health_probe() -> None:
                    nonlocal slowest
                    for _ in range(20):
                        t = time.monotonic()
                        await lab.health(session)
                        slowest = max(slowest, time.monotonic() - t)
                        await asyncio.sleep(0.02)

                probe = asyncio.create_task(health_probe())
                answers = await asyncio.gather(
                    *[
                        lab.send(
                            session, "pull_request", bomb, headers={"Content-Encoding": "gzip"}
                        )
                        for _ in range(16)
                    ]
                )
                await probe
                after = lab.rss_mib("VmRSS")
                statuses = sorted({s for s, _ in answers})
                print(
                    f"- 16 gzip bombs ({len(bomb) // 1024} KiB, 25 MiB inflated): answered "
                    f"{statuses}, RSS {before:.0f} -> {after:.0f} MiB, slowest /healthz "
                    f"{slowest * 1000:.0f} ms"
                )
                lab.check(statuses == [415], "every compressed body refused with 415")
                lab.check(after - before < 20, "no memory taken by the bombs")
                lab.check(slowest < 1.0, "the event loop kept answering")

                # 4. Commands nobody can see never run.
                submits = len(lab.github.calls("POST", r"/reviews/\d+/events$"))
                hidden = ["<!--\n/cockpit approve\n-->", "<pre>\n/cockpit approve\n</pre>"]
                for n, body in enumerate(hidden):
                    await lab.send(
                        session, "issue_comment", lab.comment(2, body, comment_id=5000 + n)
                    )
                await lab.until(lambda: lab.busy_jobs() == 0, 30, "hidden commands to settle")
                after_submits = len(lab.github.calls("POST", r"/reviews/\d+/events$"))
                reacted = [r for r in lab.github.reactions if r["comment_id"] in (5000, 5001)]
                print(f"- commands in an HTML comment and in <pre>: {after_submits - submits} "
                      f"publish call(s), {len(reacted)} reaction(s)")  # fmt: skip
                lab.check(after_submits == submits and not reacted, "hidden commands never run")

                # 5. A close/reopen loop while the first review is running.
                lab.model.gate.clear()
                await lab.send(session, "pull_request", lab.pull_request("opened", 3))
                await lab.until(lambda: runs_of(lab, 3) == 1, 30, "PR 3's review to start")
                for _ in range(20):
                    await lab.send(session, "pull_request", lab.pull_request("closed", 3))
                    await lab.send(session, "pull_request", lab.pull_request("reopened", 3))
                lab.model.gate.set()
                await lab.until(lambda: lab.busy_jobs() == 0, 60, "the loop to settle")
                print(f"- 20 close/reopen pairs during a review: {runs_of(lab, 3)} model run(s)")
                lab.check(runs_of(lab, 3) == 1, "the loop runs the model once")

                # 6. A stranger's command flood.
                replies_before = len(lab.github.issue_comments)
                runs_before = lab.one("SELECT COUNT(*) FROM runs")
                flood = ["/cockpit review", "/cockpit approve", "/cockpit review --provider codex"]
                await asyncio.gather(
                    *[
                        lab.send(session, "issue_comment", lab.comment(
                            1, flood[n % 3], user="stranger", comment_id=6000 + n))
                        for n in range(200)
                    ]
                )  # fmt: skip
                await lab.until(lambda: lab.busy_jobs() == 0, 60, "the flood to settle")
                replies = len(lab.github.issue_comments) - replies_before
                reactions = [r for r in lab.github.reactions if 6000 <= r["comment_id"] < 6200]
                runs = lab.one("SELECT COUNT(*) FROM runs") - runs_before
                print(f"- 200 commands from a stranger: {replies} reply, {len(reactions)} "
                      f"reaction(s), {runs} model run(s)")  # fmt: skip
                lab.check(replies <= 1 and len(reactions) <= 1 and runs == 0,
                          "the flood gets one answer and starts nothing")  # fmt: skip

                peak = lab.rss_mib()
                status, health = await lab.health(session)
                print(
                    f"peak RSS of the server over the drill: {peak:.0f} MiB "
                    f"(bound {MEMORY_BOUND_MIB} MiB); /healthz {status} {health.get('status')}"
                )
                lab.check(peak < MEMORY_BOUND_MIB, "memory stayed under the bound")
                lab.check(status == 200, "healthy after")
            return lab.finish("drill_hostile")
    finally:
        remove(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subject-mib", type=int, default=64)
    args = parser.parse_args()
    return asyncio.run(drill(args.subject_mib))


if __name__ == "__main__":
    sys.exit(main())
