"""`cockpit demo`: the whole flow on this machine, offline unless `--live`, nothing left running."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bot.checks import git_check
from bot.config import DEFAULT_CLAUDE_MODEL, DEFAULT_CODEX_MODEL, ChatSettings
from bot.records.reviews import newest_state
from bot.records.vocab import ReviewState
from bot.repo_config import CONFIG_PATH
from bot.server import CONTEXT, make_app
from bot.standin import serve_local
from bot.standin.github import GitHubStandin
from bot.standin.models import AnthropicStandin, ChatStandin, OpenAIStandin
from bot.standin.repo import SAMPLE_BASE, SAMPLE_HEAD, make_pr
from bot.standin.scripted import MODEL as SCRIPTED_MODEL
from bot.standin.scripted import scripted_reviewer
from bot.texts import OPERATOR, say
from handlers import router

OWNER, NAME, NUMBER, INSTALLATION, MAINTAINER = "demo", "widgets", 1, 1, "maintainer"
PR_BODY = "Adds user lookup and a calculator parser."
REPO_CONFIG = "verify = true  # a second read-only run tries to refute each finding\n"
LIVE = (  # provider, SDK key, SDK base URL, its default
    ("claude", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    ("codex", "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
)
BASE = {**SAMPLE_BASE, CONFIG_PATH: REPO_CONFIG}
HEAD = SAMPLE_HEAD


def _section(title: str) -> None:
    print(f"\n{'─' * 8} {title} {'─' * max(4, 70 - len(title))}\n")


async def _until_idle(jobs: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while await jobs.pending():
        if time.monotonic() > deadline:
            raise TimeoutError(say(OPERATOR, "demo.timed_out", what=what))
        await asyncio.sleep(0.05)


async def demo(
    root: Path, *, live: bool = False, critic: str = "codex", started: float | None = None
) -> int:
    started = time.monotonic() if started is None else started
    reviewer = "codex" if critic == "claude" else "claude"
    verifier = "Claude" if reviewer == "codex" else "Codex"  # the other provider configured
    pr = await asyncio.to_thread(make_pr, root / "origin", base=BASE, head=HEAD, number=NUMBER)
    github = GitHubStandin(slug="pr-cockpit")
    await github.start()
    repo = github.add_generated_pr(
        OWNER,
        NAME,
        pr,
        installation_id=INSTALLATION,
        permissions={MAINTAINER: "maintain"},
        title="Look users up by name",
        files={CONFIG_PATH: REPO_CONFIG},
    )
    standins: list[AnthropicStandin | OpenAIStandin | ChatStandin] = []
    models = {
        "claude_model": os.environ.get("COCKPIT_CLAUDE_MODEL") or DEFAULT_CLAUDE_MODEL,
        "codex_model": os.environ.get("COCKPIT_CODEX_MODEL") or DEFAULT_CODEX_MODEL,
    }
    if not live:
        os.environ.pop("ANTHROPIC_AUTH_TOKEN", None)  # the SDK would send it to the stand-in
        for name, key, base, _ in LIVE:
            offline = (AnthropicStandin if name == "claude" else OpenAIStandin)(scripted_reviewer)
            url = await offline.start()
            os.environ[base] = url if name == "claude" else f"{url}/v1"
            os.environ[key] = "offline-demo"
            standins.append(offline)
            models[f"{name}_model"] = SCRIPTED_MODEL
    chat = None
    if critic == "chat":  # a local model's server, offline: the scripted model behind it
        standins.append(ChatStandin(scripted_reviewer))
        chat = ChatSettings(f"{await standins[-1].start()}/v1", SCRIPTED_MODEL)
    secret = secrets.token_hex(16)
    settings = github.settings(root / "data", secret, provider=reviewer, chat=chat, **models)
    app = make_app(settings, router)
    runner, url = await serve_local(app)
    print(
        say(
            OPERATOR,
            "demo.banner",
            pr=f"{OWNER}/{NAME}#{NUMBER}",
            reviewer=reviewer.title(),
            reviewer_model=settings.model(reviewer),
            critic=critic.title(),
            critic_model=settings.model(critic),
            verifier=verifier,
            live=live,
        )
    )
    pull = github.pulls[(repo.full_name, NUMBER)]
    try:
        async with aiohttp.ClientSession() as http:

            async def deliver(event: str, data: dict[str, Any], what: str) -> None:
                body, headers = github.delivery(event, data, secret)
                async with http.post(f"{url}/webhooks/github", data=body, headers=headers) as r:
                    print("\n" + say(OPERATOR, "demo.delivery", what=what, status=r.status))
                await _until_idle(app[CONTEXT].jobs, what)

            async def command(text: str) -> int:
                data = github.pull_request_comment(pull, text, by=MAINTAINER)
                await deliver(
                    "issue_comment", data, say(OPERATOR, "demo.comment", text=text, by=MAINTAINER)
                )
                return data["comment"]["id"]

            opened = github.pull_request_opened(pull, body=PR_BODY)
            await deliver("pull_request", opened, "pull_request.opened")
            _section(say(OPERATOR, "demo.section", part="status"))
            print(_status(github))
            if await newest_state(app[CONTEXT].db) != ReviewState.DRAFT:
                return 1
            print(say(OPERATOR, "demo.verify_column", verifier=verifier))

            await command(f"/cockpit codex-review --with {critic}")
            _section(say(OPERATOR, "demo.section", part="critique", critic=critic.title()))
            critique = [
                c for c in github.issue_comments.values() if "pr-cockpit:session" in c["body"]
            ]
            if not critique:
                print(_latest_reply(github))
                return 1
            print(critique[-1]["body"])

            await command("/cockpit send-back")
            _section(say(OPERATOR, "demo.section", part="revised"))
            print(_status(github))

            approve = await command("/cockpit approve")
            if await newest_state(app[CONTEXT].db) != ReviewState.POSTED:
                print(_latest_reply(github))
                return 1
        _section(say(OPERATOR, "demo.section", part="published"))
        [review] = [r for r in github.reviews.values() if r["state"] != "PENDING"]
        print(
            say(OPERATOR, "demo.published", state=review["state"], commit=review["commit_id"][:7])
            + "\n"
        )
        print(review["body"])
        for comment in review["comments"]:
            print("\n" + say(OPERATOR, "demo.inline", comment=comment))
            print("  " + comment["body"].replace("\n", "\n  "))
        reactions = [r["content"] for r in github.reactions if r["comment_id"] == approve]
        print("\n" + say(OPERATOR, "demo.reactions", reactions=reactions))
        print(
            say(
                OPERATOR,
                "demo.done",
                seconds=time.monotonic() - started,
                calls=len(github.requests),
                live=live,
            )
        )
        return 0
    finally:
        await runner.cleanup()
        await github.stop()
        for standin in standins:
            await standin.stop()


def _status(github: GitHubStandin) -> str:
    [status] = github.status_comments(f"{OWNER}/{NAME}", NUMBER)
    return status["body"]


def _latest_reply(github: GitHubStandin) -> str:
    replies = [c["body"] for c in github.issue_comments.values() if "pr-cockpit:" not in c["body"]]
    return replies[-1] if replies else say(OPERATOR, "demo.no_reply")


def run_demo(
    keep: bool = False, live: bool = False, critic: str = "codex", started: float | None = None
) -> int:
    logging.basicConfig(level=logging.ERROR)
    git = git_check()
    if git.problem:  # the repository, the mirror and the reviewer's tools all run git
        print(say(OPERATOR, "demo.no_git", line=git.line()), file=sys.stderr)
        return 2
    if live:
        if missing := [key for _, key, _, _ in LIVE if not os.environ.get(key)]:
            print(say(OPERATOR, "demo.live_needs", missing=missing), file=sys.stderr)
            return 2
        endpoints = [(name, os.environ.get(base) or default) for name, _, base, default in LIVE]
        print(say(OPERATOR, "demo.live", endpoints=endpoints))
    root = Path(tempfile.mkdtemp(prefix="cockpit-demo-"))
    try:
        return asyncio.run(demo(root, live=live, critic=critic, started=started))
    except TimeoutError as exc:
        print(say(OPERATOR, "demo.failed", error=exc), file=sys.stderr)
        return 1
    finally:
        if keep:
            print(say(OPERATOR, "demo.kept", root=root))
        else:
            shutil.rmtree(root, ignore_errors=True)
