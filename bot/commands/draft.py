"""`drop` and `approve`: a person's decisions on the draft."""

from __future__ import annotations

import gidgethub

from bot.auth import SignInUnavailable, missing_settings, sign_in_link
from bot.auth.tokens import TokenUnavailable
from bot.commands import gate
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.commands.reply import post, text
from bot.github import describe_failure
from bot.records import review_state
from bot.records.reviews import get_review, latest_draft, load_findings
from bot.records.types import Finding, Review
from bot.records.vocab import FindingState, ReviewState, Verdict
from bot.review.approve import PublishFailed, approve, publishing_key
from bot.review.lifecycle import queue_status_refresh
from bot.review.pending import redraft
from bot.review.status import show_status
from bot.review.vet import NotADraft, vet, vet_args
from bot.texts import PEOPLE, say


async def current_draft(pr: PullRequest) -> Review:
    pull = await pr.known()
    review = await latest_draft(pr.ctx.db, pull.id)
    if review is None:
        raise CommandFailed(say(PEOPLE, "no_draft_yet", prefix=pr.prefix))
    return review


def _check_refs(cmd: Command, findings: list[Finding]) -> None:
    known = {f.ordinal for f in findings}
    missing = [f"F{n}" for n in cmd.findings if n not in known]
    if missing:
        raise CommandFailed(say(PEOPLE, "unknown_findings", missing=missing, count=len(known)))


def _not_a_draft(review: Review) -> CommandFailed:
    return CommandFailed(
        say(PEOPLE, "revising" if review.state == ReviewState.REVISING else "already_published")
    )


async def cmd_drop(pr: PullRequest, cmd: Command) -> str | None:
    review = await current_draft(pr)
    if review.state != ReviewState.DRAFT:
        raise _not_a_draft(review)
    if not cmd.findings:
        raise CommandFailed(say(PEOPLE, "which_to_drop"))
    await gate.may_decide(pr, "drop")  # a dropped finding is never published on this PR
    db, review_id = pr.ctx.db, review.id
    _check_refs(cmd, await load_findings(db, review_id))
    target = pr.target()
    async with db.hold(publishing_key(review_id)):  # a revision or an approve may be writing
        why = " ".join(cmd.words)[:500] or None  # `drop F2 it is a fixture`: the reason
        if not await review_state.drop_findings(db, review_id, cmd.findings, why, by=pr.actor):
            raise _not_a_draft(await get_review(db, review_id))
        await redraft(target, review_id)  # without them
    await show_status(target, await get_review(db, review_id))
    return text(pr, "dropped", refs=", ".join(f"F{n}" for n in cmd.findings))


def _event(cmd: Command, verdict: str | None) -> str:
    if cmd.flag("request-changes"):
        return "REQUEST_CHANGES"
    if cmd.flag("comment"):
        return "COMMENT"
    return "REQUEST_CHANGES" if verdict == Verdict.REQUEST_CHANGES else "COMMENT"


async def _still_fresh(pr: PullRequest, review: Review) -> Review:
    """The draft, after checking the PR's head as GitHub has it now (not as the last delivery
    said): a draft of an older head is marked stale (the status comment says so) and refused."""
    live = await pr.refresh()
    if live.head_sha != review.head_sha and await review_state.mark_stale(
        pr.ctx.db, live.id, live.head_sha
    ):
        await queue_status_refresh(pr.ctx, live.id)
        review = await get_review(pr.ctx.db, review.id)
    if review.stale:
        raise CommandFailed(say(PEOPLE, "stale_draft", prefix=pr.prefix))
    return review


async def cmd_approve(pr: PullRequest, cmd: Command) -> str | None:
    review = await current_draft(pr)
    if review.state in (ReviewState.POSTING, ReviewState.POSTED):
        return text(pr, "already_posted", state=review.state)
    if review.state == ReviewState.REVISING:
        raise CommandFailed(say(PEOPLE, "revising"))
    review = await _still_fresh(pr, review)
    await gate.may_decide(pr, "approve")
    findings = await load_findings(pr.ctx.db, review.id)
    _check_refs(cmd, findings)
    gone = [
        f"F{f.ordinal}"
        for f in findings
        if f.ordinal in cmd.findings and f.state in (FindingState.DROPPED, FindingState.WITHDRAWN)
    ]
    if gone:
        raise CommandFailed(say(PEOPLE, "findings_gone", gone=gone))
    # the listed findings, or what a plain approve publishes
    chosen = sorted(cmd.findings) or [f.ordinal for f in review.rules.approvable(findings)]
    event = _event(cmd, review.verdict)
    try:
        published = await approve(pr.ctx, pr.target(), review.id, pr.actor, event, chosen)
    except PublishFailed as exc:
        raise CommandFailed(str(exc)) from exc
    if not published:  # someone else's approve (or a revision) got there first
        current = await get_review(pr.ctx.db, review.id)
        if current.state == ReviewState.REVISING:
            raise CommandFailed(say(PEOPLE, "revising"))
        return text(pr, "already_posted", state=current.state)
    return text(pr, "approved", event=event, count=len(chosen))


async def cmd_vet(pr: PullRequest, cmd: Command) -> str | None:
    """The draft becomes the commenter's own pending review (their GitHub user token); with
    no token, a sign-in link whose completion goes on with the vet by itself."""
    review = await current_draft(pr)
    if review.state != ReviewState.DRAFT:
        raise _not_a_draft(review)
    review = await _still_fresh(pr, review)
    await gate.may_decide(pr, "vet")  # vetting decides what is published
    tokens = pr.ctx.user_tokens
    if tokens is None or pr.actor_id is None:
        raise CommandFailed(say(PEOPLE, "internal_error"))
    try:
        token = await tokens.token_for(pr.actor_id)
    except TokenUnavailable as exc:
        raise CommandFailed(
            say(PEOPLE, "vet.github_unreachable", reason=str(exc), prefix=pr.prefix)
        ) from exc
    if token is None:
        await _sign_in_first(pr, review)
        return None
    try:
        vetted = await vet(pr.ctx, pr.target(), review, pr.actor, token)
    except gidgethub.HTTPException as exc:  # GitHub refused the person's request
        raise CommandFailed(describe_failure(exc)) from exc
    except NotADraft as exc:
        raise _not_a_draft(await get_review(pr.ctx.db, review.id)) from exc
    return text(
        pr,
        "vetted",
        added=[f"F{n}" for n in vetted.added],
        held=[f"F{n}" for n in vetted.held],
        left_out=[f"F{n}" for n in vetted.left_out],
    )


async def _sign_in_first(pr: PullRequest, review: Review) -> None:
    """A reply with a sign-in link bound to the commenter and this draft; the `vet` job its
    completion enqueues edits the reply when it is done."""
    if missing := missing_settings(pr.ctx.settings):
        raise CommandFailed(str(SignInUnavailable(missing)))
    assert pr.pull is not None and pr.actor_id is not None
    reply_id = await post(pr, text(pr, "sign_in_first", link=None))
    args = vet_args(pr.pull.id, review.id, pr.actor_id, pr.actor, reply_id)
    then = {"job": "vet", "args": args, "key": f"vet:{pr.pull.id}:{pr.actor_id}"}
    link = sign_in_link(pr.ctx.settings, pr.actor_id, then)
    await pr.target().edit_comment(reply_id, text(pr, "sign_in_first", link=link))
