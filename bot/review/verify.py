"""The verify pass: a second read-only run that tries to refute each finding of a draft."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from bot.agents.answers import Verdict, submit_verification
from bot.agents.base import AgentError
from bot.agents.providers import other_provider
from bot.agents.toolbox import Toolbox
from bot.records.sessions import create_session, end_session
from bot.records.types import DraftFinding
from bot.records.vocab import SessionRole
from bot.review.pipeline import Draft, Reviewer, ReviewRequest
from bot.texts import PEOPLE, render, say
from bot.worktrees import GitError, Worktree

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verification:
    provider: str
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    run_id: int | None = None
    error: str | None = None


def choose_provider(
    reviewer: str, configured_choice: str | None, available: Collection[str]
) -> str:
    """The repository's `verify_provider` if set; else the other provider configured here (a
    cross-vendor check; `other_provider`); else the reviewer's own provider."""
    if configured_choice:
        return configured_choice
    return other_provider(reviewer, available)


def apply_verification(
    findings: Sequence[DraftFinding], verification: Verification
) -> list[DraftFinding]:
    result = []
    for ordinal, finding in enumerate(findings, start=1):
        verdict = verification.verdicts.get(ordinal)
        if verdict is not None:
            finding = replace(finding, verify_status=verdict.status, verify_note=verdict.evidence)
        result.append(finding)
    return result


async def verify_draft(
    reviewer: Reviewer,
    tree: Worktree,
    request: ReviewRequest,
    draft: Draft,
    *,
    provider: str,
    model: str | None = None,
    on_tool_call: Callable[[str], Awaitable[None]] | None = None,
) -> Verification:
    """Run the verify pass over `draft`. Never raises for a failed pass (except when
    cancelled): the result then carries the reason, and the draft stands unverified."""
    if not draft.findings:
        return Verification(provider)
    try:
        chosen = reviewer.models.provider(provider, model)
        session = await create_session(
            reviewer.db,
            provider=chosen.name,
            model=chosen.model,
            pull_id=request.pull_id,
            review_id=request.review_id,
            role=SessionRole.VERIFY,
            parent_session_id=draft.session_id,
        )
        run = await reviewer.agent(
            session,
            Toolbox(tree, on_call=on_tool_call, left_out=draft.left_out),
            "verify",
            kind="verify",
            final=submit_verification(len(draft.findings)),
        )
        prompt = render(
            "prompts/verify_request.md.j2",
            number=request.number,
            repo=request.repo,
            head_sha=tree.head_sha,
            merge_base=tree.merge_base,
            findings=list(enumerate(draft.findings, start=1)),
        )
        try:
            result = await run.turn(prompt)
        finally:
            await end_session(reviewer.db, session.id)
        return Verification(chosen.name, result.answer, result.run_id)
    except asyncio.CancelledError:
        raise
    except (AgentError, GitError) as exc:
        return Verification(provider, error=str(exc))
    except OSError as exc:
        return Verification(
            provider, error=say(PEOPLE, "local_error", error_class=type(exc).__name__)
        )
    except Exception:
        log.exception("verify pass crashed")
        return Verification(provider, error=say(PEOPLE, "internal_error"))


async def verify_unverified(
    reviewer: Reviewer,
    tree: Worktree,
    request: ReviewRequest,
    draft: Draft,
    *,
    provider: str,
    todo: Sequence[int] | None = None,
    on_tool_call: Callable[[str], Awaitable[None]] | None = None,
) -> tuple[list[DraftFinding], str | None]:
    """The draft's findings, those at the `todo` indexes (default: those without a verdict)
    run through the verify pass; and the pass's error (None: it ran, or had nothing to do)."""
    findings = list(draft.findings)
    if todo is None:
        todo = [n for n, f in enumerate(findings) if f.verify_status is None]
    if not todo:
        return findings, None
    subset = [findings[n] for n in todo]
    verification = await verify_draft(
        reviewer,
        tree,
        request,
        replace(draft, findings=subset),
        provider=provider,
        on_tool_call=on_tool_call,
    )
    for n, finding in zip(todo, apply_verification(subset, verification), strict=True):
        findings[n] = finding
    return findings, verification.error
