"""`vet`: the draft becomes the vetter's own pending review, and their submitted review is
read back.

The vetter's user token is used only here, and only to create their pending review on the
draft's head (`POST …/reviews` without `event`), to add threads to a pending review of theirs
(GraphQL `addPullRequestReviewThread`) and to read that pending review: it never submits,
approves, edits or deletes anything. Each finding's comment begins with its number
(`**F1 · major** · title`); findings outside the diff, the folded and the capped ones are
items of the review's body. A person's own pending comments are never touched. When the
vetter's review holds the findings the bot's own pending review is deleted.

On `pull_request_review` `submitted` by the person holding a draft, what they submitted is
read with the installation's token and reconciled by `F` number (`bot.review.reconcile`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gidgethub

from bot.github import describe_failure
from bot.records import review_state
from bot.records.pulls import find_pull, pull_by_id
from bot.records.reviews import get_review, held_by, latest_draft, load_findings, update_review
from bot.records.types import Finding, Job, Review
from bot.records.vocab import FindingState, ReviewState
from bot.review.approve import publishing_key
from bot.review.pending import drop_own_pending, inline_comment
from bot.review.reconcile import in_body, number_of, reconcile
from bot.review.status import show_status
from bot.review.target import Target
from bot.texts import PEOPLE, fit, render, say

if TYPE_CHECKING:
    from bot.context import Context

log = logging.getLogger(__name__)

THEIR_PENDING = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviews(first: 10, states: [PENDING]) {
        nodes { id databaseId viewerDidAuthor body comments(first: 100) { nodes { body } } }
      }
    }
  }
}
"""
ADD_THREAD = """
mutation($input: AddPullRequestReviewThreadInput!) {
  addPullRequestReviewThread(input: $input) { thread { id } }
}
"""
SUBMITTED = """
query($id: ID!, $after: String) {
  node(id: $id) {
    ... on PullRequestReview {
      body
      comments(first: 100, after: $after) {
        nodes { body }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}
"""
SUBMITTED_EVENTS = {
    "commented": "COMMENT",
    "changes_requested": "REQUEST_CHANGES",
    "approved": "APPROVE",
}


@dataclass(frozen=True)
class Vetted:
    added: tuple[int, ...]  # put in their pending review now
    held: tuple[int, ...]  # their pending review held them already
    left_out: tuple[int, ...]  # GitHub took no thread for them (outside the diff)
    review_id: int  # their pending review


def chosen(review: Review, findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(inline, in the body): the kept findings a plain `approve` could publish (the verify
    pass did not rule them out); inline those on the diff, neither folded nor over the cap."""
    rules = review.rules
    kept = [f for f in findings if f.state == FindingState.KEPT and rules.published(f)]
    capped = rules.over_cap(rules.approvable(findings))
    inline = [f for f in kept if f.in_diff and not rules.folds(f) and f.ordinal not in capped]
    return inline, [f for f in kept if f not in inline]


def _item(target: Target, f: Finding) -> str:
    where = f.path + (f":{f.line}" if f.line else "")
    reason = say(PEOPLE, "vet.item_reason", in_diff=f.in_diff)
    return fit(render("vet_item.md.j2", f=f, where=where, reason=reason, repo_url=target.repo_url))


def _body(target: Target, review: Review, items: list[str]) -> str:
    return fit(render("vet_body.md.j2", review=review, items=items, repo_url=target.repo_url))


class NotADraft(Exception):
    """The draft was published, revised or replaced before it could be vetted."""


async def vet(ctx: Context, target: Target, review: Review, login: str, token: str) -> Vetted:
    """Put the draft's findings in `login`'s pending review (their `token`) and hand the
    draft to them; then the bot's own pending review goes and the status comment says so.
    Holding the publishing lock: an approve (or another vet) of the draft waits, and one
    that got there first leaves nothing to vet (NotADraft)."""
    async with ctx.db.hold(publishing_key(review.id)):
        current = await get_review(ctx.db, review.id)
        if current is None or current.state != ReviewState.DRAFT:
            raise NotADraft(review.id)
        return await _vet(ctx, target, current, login, token)


async def _vet(ctx: Context, target: Target, review: Review, login: str, token: str) -> Vetted:
    user = ctx.github.user_api(token)
    inline, other = chosen(review, await load_findings(ctx.db, review.id))
    comments = {f.ordinal: inline_comment(target, f) for f in inline}
    items = {f.ordinal: _item(target, f) for f in other}
    url = "/repos/{owner}/{repo}/pulls/{number}/reviews"
    payload = {
        "commit_id": review.head_sha,
        "body": _body(target, review, list(items.values())),
        "comments": list(comments.values()),
    }
    held: dict[int, str] = {}
    left_out: list[int] = []
    try:
        created = await user.post(url, target.owner_repo, data=payload)
        placed = {n: c["body"] for n, c in comments.items()} | items
    except gidgethub.BadRequest as exc:
        if int(exc.status_code) != 422:
            raise
        theirs = await _their_pending(user, target)
        if theirs is None:  # GitHub refused a comment's line, not a second pending review
            log.warning("GitHub refused inline comments; moving them to the review body")
            every = [comments[n]["body"] for n in comments] + list(items.values())
            created = await user.post(
                url, target.owner_repo, data={**payload, "body": _body(target, review, every)}
            )
            placed = {n: c["body"] for n, c in comments.items()} | items
        else:  # one pending review per person: added to theirs, nothing of theirs touched
            paths = {f.ordinal: f.path for f in other}
            created, held, placed, left_out = await _add_to(user, theirs, comments, items, paths)
    vetter_review_id = int(created.get("databaseId") or created["id"])
    if not await review_state.hand_to_vetter(
        ctx.db, review.id, login, vetter_review_id, held | placed
    ):
        log.info("the draft changed while it was vetted", extra={"fields": {"id": review.id}})
    await drop_own_pending(target)
    await update_review(ctx.db, review.id, pending_review_id=None)
    await show_status(target, await get_review(ctx.db, review.id))
    return Vetted(tuple(sorted(placed)), tuple(sorted(held)), tuple(left_out), vetter_review_id)


async def _their_pending(user: Any, target: Target) -> dict | None:
    owner_repo = target.owner_repo
    data = await user.graphql(
        THEIR_PENDING, owner=owner_repo["owner"], name=owner_repo["repo"], number=target.pull.number
    )
    nodes = data["repository"]["pullRequest"]["reviews"]["nodes"]
    return next((r for r in nodes if r.get("viewerDidAuthor")), None)


async def _add_to(
    user: Any,
    theirs: dict,
    comments: dict[int, dict],
    items: dict[int, str],
    paths: dict[int, str],
) -> tuple[dict, dict[int, str], dict[int, str], list[int]]:
    """Threads for the findings their pending review does not hold yet (by `F` number)."""
    held: dict[int, str] = {}
    for comment in theirs["comments"]["nodes"]:
        n = number_of(comment["body"])
        if n is not None and (n in comments or n in items):
            held[n] = comment["body"]
    for n, text in items.items():
        if in_body(n, theirs.get("body") or ""):
            held[n] = text
    placed: dict[int, str] = {}
    left_out: list[int] = []
    for n in sorted({*comments, *items} - held.keys()):
        thread: dict[str, Any] = {"pullRequestReviewId": theirs["id"]}
        if n in comments:
            c = comments[n]
            thread.update(path=c["path"], line=c["line"], side=c["side"], body=c["body"])
            if "start_line" in c:
                thread.update(startLine=c["start_line"], startSide=c["start_side"])
        else:  # outside the diff: a comment on the file, when GitHub takes one
            thread.update(path=paths[n], subjectType="FILE", body=items[n])
        try:
            await user.graphql(ADD_THREAD, input=thread)
        except gidgethub.GraphQLException:
            log.info("GitHub took no thread for a finding", extra={"fields": {"ordinal": n}})
            left_out.append(n)
            continue
        placed[n] = thread["body"]
    return {"id": theirs["databaseId"]}, held, placed, left_out


# -- the vetter submits ---------------------------------------------------------------------


async def on_submitted(ctx: Context, gh: Any, data: dict[str, Any]) -> str:
    """`pull_request_review` `submitted`: when its author holds one of the PR's drafts, that
    draft is reconciled by `F` number (what is there was published by them, what they
    deleted was dropped by them). Anyone else's review is left alone."""
    submitted = data["review"]
    login = (submitted.get("user") or {}).get("login")
    pull = await find_pull(ctx.db, data["repository"], data["pull_request"]["number"])
    if pull is None or not login:
        return "not a PR of ours"
    review = await held_by(ctx.db, pull.id, login)
    if review is None or review.state != ReviewState.DRAFT:
        return "no draft held by its author"
    if review.vetter_review_id != submitted.get("id"):  # they cancelled it and wrote another
        return "another review of theirs"
    body, comments = await _submitted(gh, submitted["node_id"])
    findings = await load_findings(ctx.db, review.id)
    placed = {f.ordinal: f.vetted_text for f in findings if f.vetted_text is not None}
    inline = {f.ordinal for f in chosen(review, findings)[0]}  # as vet placed them
    target = Target(ctx, gh, pull)
    # The items follow the model's summary: a summary naming `**F2 · …` keeps nothing.
    summary = _body(target, review, []).strip()
    unix = body.replace("\r\n", "\n")  # as a browser may send it back
    items = unix[len(summary) :] if unix.startswith(summary) else body
    outcome = reconcile(placed, comments, items, inline)
    event = SUBMITTED_EVENTS.get(str(submitted.get("state")).lower(), "COMMENT")
    why = say(PEOPLE, "vet.removed_why")
    if not await review_state.published_by_person(
        ctx.db, review.id, login, event, outcome.published, outcome.removed, why
    ):
        return "the draft changed meanwhile"
    await show_status(target, await get_review(ctx.db, review.id))
    return "reconciled"


async def _submitted(gh: Any, node_id: str) -> tuple[str, list[str]]:
    """The submitted review's body and every inline comment (pages of 100)."""
    comments: list[str] = []
    after = None
    while True:
        data = await gh.graphql(SUBMITTED, id=node_id, after=after)
        node = data["node"] or {}
        page = node["comments"]
        comments.extend(c["body"] for c in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            return node.get("body") or "", comments
        after = page["pageInfo"]["endCursor"]


# -- after sign-in: the job the sign-in link's completion enqueues ----------------------------


def vet_args(pull_id: int, review_id: int, user_id: int, login: str, reply_id: int) -> dict:
    return {
        "pull_id": pull_id,
        "review_id": review_id,
        "user_id": user_id,
        "login": login,
        "reply_id": reply_id,
    }


async def vet_job(ctx: Context, job: Job) -> None:
    """The vet a sign-in link promised: the PR's current draft becomes the person's pending
    review, and the link's reply says it is done (or why not)."""
    args = job.payload
    pull = await pull_by_id(ctx.db, args["pull_id"])
    if pull is None:
        return
    target = Target.of(ctx, pull)
    prefix = ctx.settings.command_prefix

    async def answer(kind: str, **values: Any) -> None:
        body = render("reply.md.j2", kind=kind, prefix=prefix, repo_url=target.repo_url, **values)
        await target.edit_comment(args["reply_id"], body)

    token = await ctx.user_tokens.token_for(args["user_id"]) if ctx.user_tokens else None
    if token is None:
        await answer("vet_not_done", reason=say(PEOPLE, "vet.needs_token", prefix=prefix))
        return
    review = await latest_draft(ctx.db, pull.id)
    if review is None or review.state != ReviewState.DRAFT or review.stale:
        if review is None:
            reason = say(PEOPLE, "no_draft_yet", prefix=prefix)
        elif review.stale:
            reason = say(PEOPLE, "stale_draft", prefix=prefix)
        else:
            reason = say(PEOPLE, "revising" if review.state == "revising" else "already_published")
        await answer("vet_not_done", reason=reason)
        return
    try:
        vetted = await vet(ctx, target, review, args["login"], token)
    except NotADraft:
        await answer("vet_not_done", reason=say(PEOPLE, "already_published"))
        return
    except gidgethub.HTTPException as exc:  # GitHub refused the person's request
        await answer("vet_not_done", reason=describe_failure(exc))
        return
    await answer(
        "vetted",
        added=[f"F{n}" for n in vetted.added],
        held=[f"F{n}" for n in vetted.held],
        left_out=[f"F{n}" for n in vetted.left_out],
    )
