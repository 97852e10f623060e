"""The verify pass: one small read-only session per finding of a draft decides its verdict."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from bot.agents.answers import Verdict, submit_verification
from bot.agents.base import AgentError, Allowance, Provider
from bot.agents.loop import TurnResult
from bot.agents.providers import other_provider
from bot.agents.toolbox import Toolbox
from bot.records.sessions import create_session, end_session
from bot.records.types import DraftFinding
from bot.records.vocab import SessionRole, VerifyStatus
from bot.review.default_branch import read_default_branch
from bot.review.instructions import FILE_CHARS, TOTAL_CHARS, Instructions, assemble
from bot.review.pipeline import Draft, Reviewer, ReviewRequest
from bot.texts import PEOPLE, render, say
from bot.worktrees import GitError, Worktree

log = logging.getLogger(__name__)

# A verify session checks one finding: a few reads of the lines, their callers and guards.
# Past a dozen calls it is exploring, not checking; its finding then stays unverified.
CALLS_PER_FINDING = 12
PARALLEL = 3  # sessions at a time: the provider's rate limits, and the machine's git


@dataclass(frozen=True)
class Verification:
    provider: str
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    error: str | None = None  # why some findings (or all) have no verdict


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
    """Each verdict on its finding: its status, its note (the evidence, the reproduction, what
    the verifier said besides) and a severity it lowered."""
    result = []
    for ordinal, finding in enumerate(findings, start=1):
        verdict = verification.verdicts.get(ordinal)
        if verdict is not None:
            note = say(PEOPLE, "verify_note", verdict=verdict, was=finding.severity).strip()
            finding = replace(
                finding,
                verify_status=verdict.status,
                verify_note=note,
                severity=verdict.severity or finding.severity,
            )
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
    """Run the verify pass over `draft`: one small session per finding (PARALLEL at a time,
    CALLS_PER_FINDING tool calls each, all within one run's budget). Never raises for a
    failed session (except when cancelled): its finding stays unverified, the others keep
    their verdicts, and the result carries the reason."""
    findings = list(draft.findings)
    if not findings:
        return Verification(provider)
    try:
        chosen = reviewer.models.provider(provider, model)
        rules = await _team_rules(tree, request, findings)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return Verification(provider, error=_reason(exc))
    budget = reviewer.budget
    allowance = Allowance(
        budget.max_tokens, budget.max_usd, time.monotonic() + budget.max_seconds, len(findings)
    )
    gate = asyncio.Semaphore(PARALLEL)

    async def one(ordinal: int, finding: DraftFinding) -> Verdict | str:
        async with gate:
            share = allowance.take(budget, CALLS_PER_FINDING)
            if share is None:
                return say(PEOPLE, "budget_wall_clock", seconds=budget.max_seconds)
            try:
                result = await _check(
                    replace(reviewer, budget=share),
                    chosen,
                    tree,
                    request,
                    draft,
                    (ordinal, finding, rules[finding.path]),
                    on_tool_call,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                allowance.give_back(share, share.max_tokens, share.max_usd)
                return _reason(exc)
            tokens = sum(u.total for u in result.usage.values())
            allowance.give_back(share, tokens, result.cost_usd)
            return result.answer

    outcomes = await asyncio.gather(*(one(n, f) for n, f in enumerate(findings, start=1)))
    verdicts = {v.finding: v for v in outcomes if isinstance(v, Verdict)}
    errors = [e for e in outcomes if isinstance(e, str)]
    error = None
    if errors and not verdicts:
        error = errors[0]
    elif errors:
        error = say(
            PEOPLE, "verify_unchecked", count=len(errors), total=len(findings), reason=errors[0]
        )
    return Verification(chosen.name, verdicts, error=error)


async def _team_rules(
    tree: Worktree, request: ReviewRequest, findings: Sequence[DraftFinding]
) -> dict[str, Instructions]:
    """Path → the team's rules that apply to a finding on it, read from the default branch
    (as the review read them)."""
    paths = sorted({f.path for f in findings})
    base = await read_default_branch(tree, request.rules_commit or tree.base_sha, paths)
    return {path: assemble(request.config, base.texts, [path]) for path in paths}


async def _check(
    reviewer: Reviewer,
    chosen: Provider,
    tree: Worktree,
    request: ReviewRequest,
    draft: Draft,
    item: tuple[int, DraftFinding, Instructions],
    on_tool_call: Callable[[str], Awaitable[None]] | None,
) -> TurnResult:
    """One finding's session: its one turn ends with the verdict."""
    ordinal, finding, instructions = item
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
        final=submit_verification(ordinal, finding.severity),
    )
    prompt = render(
        "prompts/verify_request.md.j2",
        request=request,
        tree=tree,
        f=finding,
        instructions=instructions,
        rules_commit=request.rules_commit or tree.base_sha,
        file_chars=FILE_CHARS,
        total_chars=TOTAL_CHARS,
        calls=reviewer.budget.max_tool_calls,
    )
    try:
        return await run.turn(prompt)
    finally:
        await end_session(reviewer.db, session.id)


def _reason(exc: Exception) -> str:
    """What a failed session (or pass) is said to have met, safe to show on the PR."""
    if isinstance(exc, AgentError | GitError):
        return str(exc)
    if isinstance(exc, OSError):
        return say(PEOPLE, "local_error", error_class=type(exc).__name__)
    log.error("verify session crashed", exc_info=exc)
    return say(PEOPLE, "internal_error")


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


async def settle_passes(
    reviewer: Reviewer,
    tree: Worktree,
    request: ReviewRequest,
    draft: Draft,
    *,
    provider: str,
    on_tool_call: Callable[[str], Awaitable[None]] | None = None,
) -> tuple[Draft, str | None]:
    """A review in several passes (`passes`): a finding one pass only raised is verified and
    stays when it is confirmed (those two passes raised stay as they are); the summary says
    how many went. And the verify pass's error (None: it ran, or had nothing to do)."""
    once = draft.once
    todo = [n for n, f in enumerate(draft.findings) if f in once]
    if not todo:
        return replace(draft, raised={}), None
    findings, error = await verify_unverified(
        reviewer, tree, request, draft, provider=provider, todo=todo, on_tool_call=on_tool_call
    )
    # one the verifier gave no verdict on (its session failed, the budget ran out) stays,
    # unverified (the status comment says the verify pass did not run): an outage of the
    # verifier never empties a draft
    kept = [
        f
        for n, f in enumerate(findings)
        if n not in todo or f.verify_status in (VerifyStatus.CONFIRMED, None)
    ]
    summary, gone = draft.summary, len(findings) - len(kept)
    if gone:
        summary += "\n\n" + say(PEOPLE, "passes_dropped", count=gone)
    return replace(draft, findings=kept, summary=summary, raised={}), error
