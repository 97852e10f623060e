"""The bot's review threads of published findings: people's replies read, fixed ones resolved."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.github import github_transient
from bot.redaction import redact
from bot.texts import PEOPLE, say

if TYPE_CHECKING:
    from bot.review.target import Target

log = logging.getLogger(__name__)

# A PR's review threads with their first comments (a page of 100 threads).
THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) {
        pageInfo { hasNextPage endCursor }
        nodes { id isResolved comments(first: 20) { nodes { body author { __typename login } } } }
      }
    }
  }
}"""
RESOLVE_MUTATION = """
mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } } }"""
THREAD_PAGES = 10
_INLINE_NUMBER = re.compile(r"\*\*F(\d+) ·")  # how templates/inline_comment.md.j2 begins


# None for a deleted account (`ghost`).
def _account(author: Any) -> tuple[str, str] | None:
    if not isinstance(author, dict) or not isinstance(author.get("login"), str):
        return None
    return str(author.get("__typename") or ""), author["login"]


async def _app_account(target: Target) -> tuple[str, str]:
    """The App's bot account as GraphQL names an author: (`__typename`, login). REST's
    `<slug>[bot]` is GraphQL's `Bot` of login `<slug>`; a person, or another App, whose
    login reads the same is another account."""
    return "Bot", (await target.ctx.github.bot_login()).removesuffix("[bot]")


async def _finding_threads(target: Target, wanted: set[int]) -> list[tuple[int, Thread]]:
    """The bot's review threads of these findings: only a thread the App's own account started
    (one a person started with the same words is not)."""
    app = await _app_account(target)
    owner, name = target.pull.repo.split("/", 1)
    found, after = [], None
    for _page in range(THREAD_PAGES):
        data = await target.gh.graphql(
            THREADS_QUERY, owner=owner, name=name, number=target.pull.number, after=after
        )
        threads, after = threads_page(data)
        for thread in threads:
            account, body = thread.comments[0] if thread.comments else (None, "")
            number = _INLINE_NUMBER.match(body)
            if account == app and number is not None and int(number.group(1)) in wanted:
                found.append((int(number.group(1)), thread))
        if after is None:
            break
    return found


async def thread_replies(target: Target, ordinals: list[int]) -> dict[int, list[str]]:
    """What people replied in the review threads of these (published) findings, oldest
    first, for the reviewer's ledger; nothing when GitHub does not tell (logged)."""
    if not ordinals:
        return {}
    app = await _app_account(target)
    try:
        threads = await _finding_threads(target, set(ordinals))
    except Exception as exc:
        if not _github_said_no(exc):
            raise
        log.warning("thread replies not read", extra={"fields": {"error": str(exc)}})
        return {}
    replies: dict[int, list[str]] = {}
    for number, thread in threads:
        for account, body in thread.comments[1:]:
            if account and account != app and body:
                replies.setdefault(number, []).append(f"{account[1]}: {body}")
    return replies


async def resolve_threads(target: Target, ordinals: list[int]) -> str | None:
    """Resolve the bot's review threads of these (fixed) findings; None when done, else
    why GitHub refused (the App lacks the permission, …), to show on the PR."""
    try:
        threads = await _finding_threads(target, set(ordinals))
        for _number, thread in threads:
            if not thread.resolved:
                await target.gh.graphql(RESOLVE_MUTATION, id=thread.id)
    except UnexpectedAnswer as exc:  # no refusal: no permission would change it
        log.warning("review threads not resolved", extra={"fields": {"missing": exc.missing}})
        return say(PEOPLE, "resolve_unanswered", missing=exc.missing)
    except Exception as exc:
        if not _github_said_no(exc):
            raise
        log.warning("review threads not resolved", extra={"fields": {"error": str(exc)}})
        said = redact(str(exc))[:200] or exc.__class__.__name__
        return say(PEOPLE, "resolve_refused", error=said)
    return None


class UnexpectedAnswer(Exception):
    """GitHub answered, but without what was asked for (a GraphQL answer whose pull request
    is null: the App no longer sees it); `missing` names the field."""

    def __init__(self, missing: str) -> None:
        super().__init__(missing)
        self.missing = missing


@dataclass(frozen=True)
class Thread:
    """A review thread as GitHub answered it: its first comments, (author, body) each; the
    author as (`__typename`, login), None for a deleted account."""

    id: str
    resolved: bool
    comments: list[tuple[tuple[str, str] | None, str]]


def threads_page(data: Any) -> tuple[list[Thread], str | None]:
    """A page of THREADS_QUERY's answer: its threads, and the cursor of the next page (None:
    the last). UnexpectedAnswer when the answer lacks what the query asked for."""
    threads = _field(data, "repository", "pullRequest", "reviewThreads")
    nodes, info = _field(threads, "nodes"), _field(threads, "pageInfo")
    if not isinstance(nodes, list):
        raise UnexpectedAnswer("reviewThreads.nodes")
    found = []
    for node in nodes:
        comments = _field(node, "comments", "nodes")
        if not isinstance(comments, list) or not all(isinstance(c, dict) for c in comments):
            raise UnexpectedAnswer("reviewThreads.nodes.comments.nodes")
        found.append(
            Thread(
                str(_field(node, "id")),
                bool(_field(node, "isResolved")),
                [(_account(c.get("author")), str(c.get("body") or "")) for c in comments],
            )
        )
    after = _field(info, "endCursor") if _field(info, "hasNextPage") else None
    return found, None if after is None else str(after)


def _field(data: Any, *path: str) -> Any:
    for n, name in enumerate(path, start=1):
        if not isinstance(data, dict) or name not in data:
            raise UnexpectedAnswer(".".join(path[:n]))
        data = data[name]
    return data


def _github_said_no(exc: BaseException) -> bool:
    """GitHub refused, did not answer, or answered without what was asked for: the draft
    stands, and the PR is told. Anything else is a bug of ours, and fails visibly."""
    return github_transient(exc) or isinstance(exc, gidgethub.GitHubException | UnexpectedAnswer)
