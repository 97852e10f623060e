"""Every way a command answers on the PR: a comment rendered from `reply.md.j2`, a reaction."""

from __future__ import annotations

import logging
from typing import Any

import gidgethub

from bot.commands.pr import PullRequest
from bot.redaction import redact
from bot.texts import render, repo_url_of

log = logging.getLogger(__name__)


def text(pr: PullRequest, kind: str, **context: Any) -> str:
    repo_url = repo_url_of(pr.pull.html_url) if pr.pull else None
    return render("reply.md.j2", kind=kind, prefix=pr.prefix, repo_url=repo_url, **context)


async def post(pr: PullRequest, body: str) -> int:
    """A comment on the PR (its id); what it quotes (a failure's reason) never shows a
    secret."""
    created = await pr.gh.post(
        "/repos/{owner}/{repo}/issues/{number}/comments",
        pr.owner_repo,
        data={"body": redact(body)},
    )
    return int(created["id"])


async def reply(pr: PullRequest, kind: str, **context: Any) -> None:
    """Post a reply; a reply that cannot be posted is logged, never re-runs the commands."""
    try:
        await post(pr, text(pr, kind, **context))
    except gidgethub.GitHubException:
        log.warning("could not post a reply", exc_info=True)


async def react(pr: PullRequest, comment_id: int, kind: str, content: str) -> None:
    """An acknowledgement (`kind` is "issues" or "pulls", where the comment lives); failing
    to add one must never fail (and so re-run) the commands."""
    try:
        await pr.gh.post(
            "/repos/{owner}/{repo}/" + kind + "/comments/{id}/reactions",
            {"owner": pr.owner, "repo": pr.name, "id": comment_id},
            data={"content": content},
        )
    except gidgethub.GitHubException:
        log.warning("could not add a reaction", exc_info=True)
