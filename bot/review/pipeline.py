"""The review pipeline: a prepared worktree and a request in, a `Draft` out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from bot.agents.answers import SUBMIT_REVIEW, FinalAnswer, parse_submission
from bot.agents.base import AgentError, Allowance, Budget
from bot.agents.loop import AgentRun, Answer
from bot.agents.providers import ModelClients
from bot.agents.toolbox import Toolbox
from bot.diff import DiffModel, parse_diff
from bot.metrics import Metrics
from bot.records.database import Database
from bot.records.sessions import create_session
from bot.records.types import DraftFinding, DraftRules, Pull, Review, Session, UsedSource
from bot.records.vocab import SessionRole, Severity, Verdict
from bot.repo_config import RepoConfig
from bot.review.default_branch import read_default_branch
from bot.review.excerpt import DIFF_BUDGET_CHARS, diff_excerpt
from bot.review.identity import matched
from bot.review.instructions import FILE_CHARS, TOTAL_CHARS, Instructions, assemble
from bot.review.noise import noise_files
from bot.review.plan import FilePlan, grouped, in_order, placed, plan_files
from bot.skills import load_skill
from bot.texts import PEOPLE, render, say
from bot.worktrees import GitError, Worktree

if TYPE_CHECKING:
    from bot.context import Context

MAX_DIFF_BYTES = 50 * 1024 * 1024
PARALLEL_PARTS = 3  # a review's sessions at a time (groups, passes): rate limits, git


@dataclass(frozen=True)
class ReviewRequest:
    repo: str
    number: int
    title: str
    body: str
    base_ref: str
    provider: str
    config: RepoConfig
    pull_id: int | None = None
    review_id: int | None = None
    model: str | None = None  # None: the provider's configured model (eval replays choose)
    # The commit the team's instructions and `.gitattributes` are read from: the default
    # branch's (production); None reads them from the worktree's base (eval replays).
    rules_commit: str | None = None
    # A re-review after a push: the last reviewed head (still an ancestor of this one), so
    # only what changed since is reviewed; None reviews the whole PR.
    since: str | None = None
    ledger: tuple[dict[str, Any], ...] = ()  # the PR's earlier findings (bot.review.ledger)

    @classmethod
    def of(cls, pull: Pull, review: Review, config: RepoConfig, **more: Any) -> ReviewRequest:
        return cls(
            repo=pull.repo,
            number=pull.number,
            title=pull.title,
            body=pull.body,
            base_ref=pull.base_ref,
            provider=review.provider,
            config=config,
            pull_id=pull.id,
            review_id=review.id,
            **more,
        )


@dataclass(frozen=True)
class Draft:
    summary: str
    verdict: str
    findings: list[DraftFinding]  # inline ones carry the lines GitHub accepts
    skipped: tuple[tuple[str, str], ...]  # (path, why) of changed files not reviewed
    run_id: int | None = None
    skill_version_id: int | None = None
    session_id: int | None = None
    rules: DraftRules | None = None  # what it was made under (None: a revision's draft)
    resolved: tuple[int, ...] = ()  # earlier findings (F numbers) the reviewer says are fixed
    # `passes` > 1: the passes that raised each finding (one pass only: it stays when the
    # verify pass confirms it); empty for a review in one pass
    raised: Mapping[DraftFinding, tuple[int, ...]] = field(
        default_factory=dict, repr=False, compare=False
    )
    changed: frozenset[str] = frozenset()  # in a re-review: the paths the push changed
    diff: DiffModel | None = field(default=None, repr=False, compare=False)  # the PR's
    # path → why: the changed files the reviewer's diff left out (noise, `ignore` globs); a
    # later turn on the draft (the verify pass, a revision) leaves them out too
    left_out: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def once(self) -> frozenset[DraftFinding]:
        """Of a review in several passes, the findings one pass only raised."""
        return frozenset(f for f in self.findings if len(self.raised.get(f, (1, 1))) < 2)


@dataclass
class Reviewer:
    """The services a model run needs (no GitHub among them), and the one place an agent run
    is built (`agent`): reviews, verify passes, revisions and session turns alike."""

    db: Database
    models: ModelClients
    budget: Budget  # a server's: Budget.from_settings (the daily limits are in it)
    metrics: Metrics | None = None

    @classmethod
    def of(cls, ctx: Context) -> Reviewer:
        return cls(ctx.db, ctx.models, Budget.from_settings(ctx.settings), ctx.metrics)

    async def agent(
        self,
        session: Session,
        toolbox: Toolbox,
        skill: str = "review",
        *,
        kind: str,
        subkind: str | None = None,
        final: FinalAnswer = SUBMIT_REVIEW,
        answer: Answer = Answer.REQUIRED,
        answer_when_spent: bool = False,
    ) -> AgentRun:
        """A turn of `session` (on its provider and model) with the `skill` prompt as its
        system prompt, charged to the session's review, under this reviewer's budgets."""
        prompt = await load_skill(self.db, skill)
        return AgentRun(
            db=self.db,
            provider=self.models.provider(session.provider, session.model),
            session=session,
            toolbox=toolbox,
            system=prompt.text,
            kind=kind,
            subkind=subkind,
            budget=self.budget,
            skill_version_id=prompt.id,
            review_id=session.review_id,
            answer=answer,
            final=final,
            metrics=self.metrics,
            answer_when_spent=answer_when_spent,
        )


async def changes_since(tree: Worktree, since: str) -> list[tuple[str, list[str]]]:
    """What changed from `since` to the head, without reading the patches (after a merge of
    the base branch that may be most of the repository)."""
    out = await tree.git(
        "diff", "--name-status", "-z", "-M", since, tree.head_sha, timeout=300, limit=MAX_DIFF_BYTES
    )
    return name_status(out.decode("utf-8", errors="replace"))


def name_status(out: str) -> list[tuple[str, list[str]]]:
    """`git diff --name-status -z`: each change's status letter and its path (two for a
    rename or copy, `R100` / `C075`)."""
    fields, changes, n = out.split("\0"), [], 0
    while n < len(fields) and fields[n]:
        count = 2 if fields[n][:1] in ("R", "C") else 1
        changes.append((fields[n][:1], fields[n + 1 : n + 1 + count]))
        n += 1 + count
    return changes


async def pr_diff(tree: Worktree) -> DiffModel:
    """merge-base → head, as the PR's "Files changed" shows it. A diff may be tens of MB:
    it is decoded and parsed on a worker thread, never on the event loop."""
    out = await tree.git(
        "diff",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "-M",
        tree.merge_base,
        tree.head_sha,
        timeout=300,
        limit=MAX_DIFF_BYTES,
    )
    return await asyncio.to_thread(lambda: parse_diff(out.decode("utf-8", errors="replace")))


async def review_worktree(
    reviewer: Reviewer,
    tree: Worktree,
    request: ReviewRequest,
    *,
    on_tool_call: Callable[[str], Awaitable[None]] | None = None,
    on_plan: Callable[[tuple[tuple[str, str], ...]], Awaitable[None]] | None = None,
    on_session: Callable[[int], Awaitable[None]] | None = None,
) -> Draft:
    """Review the worktree; `on_session` hears the reviewer's (primary) session id as soon as
    it exists (an eval counts what a failed review spent from the runs of that session and
    of those started from it: its groups and passes, a verify pass)."""
    diff = await pr_diff(tree)
    paths = (path for f in diff.files.values() for path in (f.path, f.old_path))
    touched = sorted({path for path in paths if path is not None})
    commit = request.rules_commit or tree.base_sha
    base = await read_default_branch(tree, commit, touched)
    noise = noise_files(diff.files, base.attributes)
    plan = plan_files(diff, request.config, noise)
    changed: frozenset[str] = frozenset()
    if request.since is not None:  # a push: only the files it changed are reviewed again
        changes = await changes_since(tree, request.since)
        changed = frozenset(path for _status, paths in changes for path in paths)
        plan = replace(plan, reviewed=tuple(p for p in plan.reviewed if p in changed))
    if on_plan is not None:
        await on_plan(plan.skipped)
    instructions = assemble(request.config, base.texts, plan.reviewed, touched)

    rules = DraftRules(
        commit=commit,
        used=tuple(UsedSource(i.source, len(i.files), i.cut) for i in instructions.used),
        left_out=instructions.left_out,
        edited=instructions.edited,
        min_severity=request.config.min_severity,
        max_findings=request.config.max_findings,
        verify_publish=request.config.verify_publish,  # the review job's when verify ran
        min_confidence=request.config.min_confidence,
        noise=tuple(p for p, why in plan.skipped if noise.get(p) == why),
        ignored=plan.ignored,
    )
    if not plan.reviewed:
        draft = Draft(say(PEOPLE, "nothing_to_review"), Verdict.COMMENT, [], plan.skipped)
    else:
        draft = await _in_parts(
            reviewer,
            tree,
            request,
            diff,
            plan,
            changed,
            (instructions, commit),
            on_tool_call=on_tool_call,
            on_session=on_session,
        )
        draft, rules = without_left_out(draft, rules, plan.left_out)
    return replace(draft, rules=rules, changed=changed, diff=diff, left_out=plan.left_out)


@dataclass(frozen=True)
class Part:
    """One session of a review: a group of its files (all of them below the size budget) in
    one of its passes, the files in that pass's order."""

    number: int  # the pass, from 1
    group: int  # from 1
    groups: int
    files: tuple[str, ...]


def parts_of(reviewed: Sequence[str], sizes: Mapping[str, int], passes: int) -> list[Part]:
    """Each pass's sessions: the same groups of related files (`plan.grouped`), in the
    pass's own order, their files too (`plan.in_order`)."""
    groups = grouped(reviewed, sizes, DIFF_BUDGET_CHARS)
    return [
        Part(number, n, len(groups), in_order(groups[g], number, passes))
        for number in range(1, passes + 1)
        for n, g in enumerate(in_order(range(len(groups)), number, passes), start=1)
    ]


async def _in_parts(
    reviewer: Reviewer,
    tree: Worktree,
    request: ReviewRequest,
    diff: DiffModel,
    plan: FilePlan,
    changed: frozenset[str],
    rules: tuple[Instructions, str],
    *,
    on_tool_call: Callable[[str], Awaitable[None]] | None,
    on_session: Callable[[int], Awaitable[None]] | None,
) -> Draft:
    """The review's sessions (a group of files each, in each pass), PARALLEL_PARTS at a time
    within the one budget (`Allowance` shares when there are several), merged into one
    draft by the one finding identity. A group whose model run or git failed is said in the
    summary; when every one failed, the first failure is the review's."""
    instructions, commit = rules
    sizes = {path: diff.files[path].patch_bytes for path in plan.reviewed}
    parts = parts_of(plan.reviewed, sizes, request.config.passes)
    provider = reviewer.models.provider(request.provider, request.model)
    sessions = []
    # The first is the review's primary session (`ask`, a cross-review and a revision continue
    # it); the others are started from it: they end with it, and its spend counts theirs.
    for _ in parts:
        session = await create_session(
            reviewer.db,
            provider=provider.name,
            model=provider.model,
            pull_id=request.pull_id,
            review_id=request.review_id,
            role=SessionRole.PRIMARY if not sessions else SessionRole.PART,
            parent_session_id=sessions[0].id if sessions else None,
        )
        sessions.append(session)
    if on_session is not None:
        await on_session(sessions[0].id)
    budget = reviewer.budget
    allowance = None
    if len(parts) > 1:
        deadline = time.monotonic() + budget.max_seconds
        allowance = Allowance(budget.max_tokens, budget.max_usd, deadline, len(parts))
    start = request.since or tree.merge_base  # where the toolbox's `git_diff` starts
    gate = asyncio.Semaphore(PARALLEL_PARTS)
    passes = request.config.passes

    async def one(part: Part, session: Session) -> tuple[Draft, set[str]]:
        async with gate:
            share = budget if allowance is None else allowance.take(budget, budget.max_tool_calls)
            if share is None:
                raise AgentError(say(PEOPLE, "group_not_started"))
            excerpt = await diff_excerpt(tree, diff, part.files, start=start)
            prompt = render(
                "prompts/review_request.md.j2",
                request=request,
                tree=tree,
                reviewed=part.files,
                part=part,
                # a re-review names only what the push changed: the rest was told the first time
                skipped=[(p, why) for p, why in plan.skipped if not changed or p in changed],
                instructions=instructions,
                rules_commit=commit,
                file_chars=FILE_CHARS,
                total_chars=TOTAL_CHARS,
                since=request.since,
                ledger=request.ledger,
                excerpt=excerpt,
            )
            toolbox = Toolbox(
                tree,
                on_call=on_tool_call,
                left_out=plan.left_out,
                since=request.since,
                reviewed=part.files,
            )
            toolbox.seen.update(excerpt.shown)  # the model has their diff in its first request
            # a budget spent ends in a draft of what was submitted, saying what was covered
            draft = await _submitted(
                replace(reviewer, budget=share),
                toolbox,
                session,
                diff,
                prompt,
                skipped=plan.skipped,
                answer_when_spent=True,
                subkind=f"pass-{part.number}" if passes > 1 else None,
                allowance=allowance,
            )
            return draft, toolbox.seen & set(part.files)

    outcomes = await asyncio.gather(
        *(one(part, session) for part, session in zip(parts, sessions, strict=True)),
        return_exceptions=True,
    )
    for outcome in outcomes:  # a group's model or git failure is said in the draft; a crash,
        # a database error (retried by the job) or a cancellation is the review's, as before
        if isinstance(outcome, BaseException) and not isinstance(outcome, AgentError | GitError):
            raise outcome
    if all(isinstance(outcome, BaseException) for outcome in outcomes):
        raise next(o for o in outcomes if isinstance(o, BaseException))
    by_pass: list[Draft] = []
    for number in range(1, passes + 1):
        mine = [(p, o) for p, o in zip(parts, outcomes, strict=True) if p.number == number]
        by_pass.append(_pass_draft(mine, plan, sessions[0].id))
    first = by_pass[0]
    if passes == 1:
        return first
    kept = merged([d.findings for d in by_pass])
    # counted as drafted: those on a left-out file are dropped (`without_left_out`)
    said = [raised for f, raised in kept if f.path not in plan.left_out]
    once = sum(1 for raised in said if len(raised) < 2)
    note = say(PEOPLE, "passes_note", passes=passes, twice=len(said) - once, once=once)
    return replace(
        first,
        summary=f"{note}\n\n{first.summary}",
        verdict=_verdict(d.verdict for d in by_pass),
        findings=[f for f, _ in kept],
        resolved=tuple(sorted({n for d in by_pass for n in d.resolved})),
        raised=dict(kept),
    )


def _pass_draft(
    parts: list[tuple[Part, tuple[Draft, set[str]] | BaseException]],
    plan: FilePlan,
    session_id: int,
) -> Draft:
    """One pass's draft: its one session's, or its groups' merged, their summaries each under
    its group's heading after the coverage of them all. A pass whose every session failed
    (another pass did not) is a draft without findings saying why."""
    drafts = [o[0] for _p, o in parts if not isinstance(o, BaseException)]
    if len(parts) == 1 and drafts:
        return drafts[0]
    seen = {path for _p, o in parts if not isinstance(o, BaseException) for path in o[1]}
    lines = []
    if len(parts) > 1:  # a pass in one session that failed says only why
        lines.append(
            say(PEOPLE, "grouped", count=len(parts), seen=len(seen), of=len(plan.reviewed))
        )
    for part, outcome in parts:
        what = {"n": part.group, "count": part.groups, "files": len(part.files)}
        if isinstance(outcome, BaseException):
            lines.append(say(PEOPLE, "group_failed", reason=str(outcome), **what))
        else:
            lines.append(say(PEOPLE, "group_part", summary=outcome[0].summary, **what))
    found = merged([d.findings for d in drafts])
    head = (
        drafts[0]
        if drafts
        else Draft("", Verdict.COMMENT, [], plan.skipped, None, None, session_id)
    )
    return replace(
        head,
        session_id=session_id,  # the primary's, when its group failed: its spend counts all
        summary="\n\n".join(lines),
        verdict=_verdict(d.verdict for d in drafts),
        findings=[f for f, _ in found],
        resolved=tuple(sorted({n for d in drafts for n in d.resolved})),
    )


def _verdict(verdicts: Iterable[str]) -> str:
    said = set(verdicts)
    return Verdict.REQUEST_CHANGES if Verdict.REQUEST_CHANGES in said else Verdict.COMMENT


def merged(parts: Sequence[Sequence[DraftFinding]]) -> list[tuple[DraftFinding, tuple[int, ...]]]:
    """The findings of a review's parts as one list, each with the parts that raised it
    (numbered from 1): the same finding (`identity.matched`) is kept once, in its most
    severe wording."""
    kept: list[DraftFinding] = []
    raised: list[tuple[int, ...]] = []
    for number, findings in enumerate(parts, start=1):
        pairs = matched(kept, findings)
        for n, finding in enumerate(findings):
            o = pairs.get(n)
            if o is None:
                kept.append(finding)
                raised.append((number,))
                continue
            raised[o] += (number,)
            if Severity.rank(finding.severity) < Severity.rank(kept[o].severity):
                kept[o] = finding
    return list(zip(kept, raised, strict=True))


def without_left_out(
    draft: Draft, rules: DraftRules, left_out: Collection[str]
) -> tuple[Draft, DraftRules]:
    """Nothing on a file left out is drafted, annotated or stored: its findings are dropped
    and counted (ignored files apart from the noise; a file that is both counts as ignored,
    as the plan lists it)."""
    ignored = set(rules.ignored)
    kept = [f for f in draft.findings if f.path not in left_out]
    on_ignored = sum(1 for f in draft.findings if f.path in ignored)
    counted = replace(
        rules,
        noise_dropped=rules.noise_dropped + len(draft.findings) - len(kept) - on_ignored,
        ignored_dropped=rules.ignored_dropped + on_ignored,
    )
    return replace(draft, findings=kept), counted


async def revise_review(
    reviewer: Reviewer,
    tree: Worktree,
    session: Session,
    message: str | None,
    *,
    stored: dict[str, Any] | None = None,
    origin: tuple[int | None, str | None] = (None, None),
    left_out: Mapping[str, str] | None = None,
) -> Draft:
    """The reviewer's session continues with `message` (None resumes an interrupted turn) and
    submits its review again; a submission `stored` before a restart is taken as it is."""
    diff = await pr_diff(tree)
    toolbox = Toolbox(tree, left_out=left_out)
    draft = await _submitted(
        reviewer, toolbox, session, diff, message, stored=stored, origin=origin, subkind="revision"
    )
    return replace(draft, left_out=dict(left_out or {}))


async def _submitted(
    reviewer: Reviewer,
    toolbox: Toolbox,
    session: Session,
    diff: DiffModel,
    message: str | None,
    *,
    stored: dict[str, Any] | None = None,
    skipped: tuple[tuple[str, str], ...] = (),
    origin: tuple[int | None, str | None] = (None, None),
    subkind: str | None = None,
    answer_when_spent: bool = False,
    allowance: Allowance | None = None,
) -> Draft:
    """The reviewer's submission placed on the diff: the turn's, or one `stored` already; the
    turn gives back to the `allowance` what it did not spend of its share."""
    run_id = skill_id = None
    if stored is not None:
        submitted = parse_submission(stored)
    else:
        run = await reviewer.agent(
            session, toolbox, kind="review", subkind=subkind, answer_when_spent=answer_when_spent
        )
        try:
            result = await run.turn(message, comment_id=origin[0], source=origin[1])
        except BaseException:
            if allowance is not None:
                allowance.give_back(
                    reviewer.budget, reviewer.budget.max_tokens, reviewer.budget.max_usd
                )
            raise
        if allowance is not None:
            tokens = sum(u.total for u in result.usage.values())
            allowance.give_back(reviewer.budget, tokens, result.cost_usd)
        assert result.draft is not None
        submitted, run_id, skill_id = result.draft, result.run_id, run.skill_version_id
    return Draft(
        submitted.summary,
        submitted.verdict,
        [placed(f, diff) for f in submitted.findings],
        skipped,
        run_id,
        skill_id,
        session.id,
        resolved=submitted.resolved,
    )
