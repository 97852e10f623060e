"""One agent turn, for any provider: model calls, tool calls, budgets, one repair turn; every
message stored as it happens, every run a `runs` row (its cost known even when it fails)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import anthropic
import openai

from bot.agents.answers import SUBMIT_REVIEW, FinalAnswer, InvalidAnswer, ReviewDraft
from bot.agents.base import (
    MAX_RETRIES,
    AgentError,
    Budget,
    BudgetExceeded,
    ModelReply,
    Provider,
    ProviderRequest,
    ToolCall,
    Usage,
    arguments_object,
    arguments_problem,
    budget_tokens,
    close_dangling,
    cost_usd,
    quoted,
    server_said,
)
from bot.agents.budget import admission, day_start
from bot.agents.toolbox import Toolbox
from bot.agents.transcript import answer_text
from bot.metrics import Metrics
from bot.records.database import Database
from bot.records.messages import append_messages, load_messages
from bot.records.runs import NewRun, finish_run, start_run
from bot.records.types import Session
from bot.records.vocab import RunStatus
from bot.redaction import redact
from bot.skills import prompt_text
from bot.texts import MODEL, PEOPLE, render, say

# Near the end of a budget the request offers only the finishing tool and tells the model to
# submit what it has. The last 3 tool calls are kept for that: a submission, the one repair
# turn an invalid one gets, and one more for a model that answered with several calls at once
# (each call it makes meanwhile is refused and counts). Likewise the last tenth of the tokens,
# seconds and dollars: a tenth of 1.5 M tokens is a few more requests of a long conversation
# mostly read from the cache, a tenth of 600 s a minute for the answer to be written.
FINISH_CALLS = 3
FINISH_SHARE = 0.1

Origin = tuple[int | None, str | None]  # the PR comment a message came from: id and source
CUT_OFF_RETRIES = 2  # answers cut off at the output limit that are asked again, shorter


class Answer(Enum):
    REQUIRED = "required"  # the turn ends with its answer (a review, a verify pass)
    OFFERED = "offered"  # listed, so the prompt cache holds, but a call is told "not now"
    NONE = "none"  # not listed (a critic's turns)


@dataclass
class TurnResult:
    run_id: int
    text: str
    answer: Any  # what `final.parse` returned; None for a turn that expects no final tool
    tool_calls: int
    usage: dict[str, Usage] = field(default_factory=dict)
    cost_usd: float | None = None
    # The budget, as people are told, that made the turn finish early (its answer says so)
    # or end with `final.short`'s answer: None for a turn within its budgets.
    cut_short: str | None = None

    @property
    def draft(self) -> ReviewDraft | None:
        return self.answer if isinstance(self.answer, ReviewDraft) else None


@dataclass
class AgentRun:
    db: Database
    provider: Provider
    session: Session
    toolbox: Toolbox
    system: str
    kind: str  # review | verify | session
    budget: Budget
    skill_version_id: int | None = None
    review_id: int | None = None
    answer: Answer = Answer.REQUIRED
    final: FinalAnswer = SUBMIT_REVIEW
    subkind: str | None = None
    metrics: Metrics | None = None
    # A spent budget ends the turn with `final.short`'s answer (a review: a draft of what was
    # submitted, if anything, saying what was covered) instead of failing it.
    answer_when_spent: bool = False

    async def turn(
        self, user_text: str | None, *, comment_id: int | None = None, source: str | None = None
    ) -> TurnResult:
        """`user_text` None continues the stored conversation."""
        run_id = await self._start()
        usage: dict[str, Usage] = {}
        started = time.monotonic()
        try:
            result = await self._loop(run_id, user_text, (comment_id, source), usage, started)
        except asyncio.CancelledError:
            await self._finish(run_id, usage, RunStatus.CANCELLED, "cancelled", 0)
            raise
        except BudgetExceeded as exc:
            short = self.final.short
            if not (self.answer_when_spent and short is not None):
                await self._finish(run_id, usage, RunStatus.FAILED, str(exc), self.toolbox.calls)
                raise
            answer = short(None, str(exc), self.toolbox.coverage())
            result = TurnResult(run_id, "", answer, self.toolbox.calls, cut_short=str(exc))
            # done, with the budget it spent said where the operator reads a run's end
            status, error = RunStatus.DONE, str(exc)
            result.cost_usd = await self._finish(run_id, usage, status, error, result.tool_calls)
            result.usage = usage
            return result
        except AgentError as exc:
            await self._finish(run_id, usage, RunStatus.FAILED, str(exc), self.toolbox.calls)
            raise
        except Exception as exc:
            error = redact(f"{exc.__class__.__name__}: {exc}")
            await self._finish(run_id, usage, RunStatus.FAILED, error, self.toolbox.calls)
            raise AgentError(say(PEOPLE, "run_failed", error_class=exc.__class__.__name__)) from exc
        result.cost_usd = await self._finish(run_id, usage, RunStatus.DONE, None, result.tool_calls)
        result.usage = usage
        return result

    async def _start(self) -> int:
        """Every model run passes here, whatever started it: the daily budget is checked."""
        now = time.time()
        run = NewRun(
            kind=self.kind if self.kind != "verify" else "review",
            subkind=self.subkind or (self.kind if self.kind == "verify" else None),
            session_id=self.session.id,
            review_id=self.review_id,
            provider=self.provider.name,
            model=self.provider.model,
            skill_version_id=self.skill_version_id,
            started_at=now,
        )
        return await start_run(self.db, run, since=day_start(now), admit=admission(self.budget))

    async def _loop(
        self,
        run_id: int,
        user_text: str | None,
        origin: Origin,
        usage: dict[str, Usage],
        started: float,
    ) -> TurnResult:
        final = self.final
        required = self.answer is Answer.REQUIRED
        repaired = False
        tool_calls = 0  # made by the model: run, or refused once the budget is nearly spent
        nearly = self._nearly(tool_calls, usage, started)
        last = next(reversed(await self._conversation(settle=True)), None)
        if user_text is not None:
            if required:  # the model plans its turn knowing what it may spend
                user_text += "\n\n" + self._left(tool_calls, usage, started, nearly)
            await self._store(self.provider.user_message(user_text), origin)
        elif last is not None and last.get("role") == "assistant":
            # Resumed after the model's answer was stored and before the next step was (the
            # process died): take that step now; a request never ends with the model's text.
            if not required:
                return TurnResult(run_id, answer_text(last), None, 0)
            await self._store(self.provider.user_message(fragment(final.nudge)))
            repaired = True
        offered = [final.tool] if self.answer is not Answer.NONE else []
        tools = [*self.toolbox.definitions, *offered]
        cut_offs = 0  # replies whose last call was cut off at the output limit
        broken = False  # the last reply had a call whose arguments were not a JSON object
        short: str | None = None  # the budget that made the turn finish early (for people)
        while True:
            finishing = nearly is not None
            short = nearly or short
            request = ProviderRequest(
                system=self.system,
                # near the end of a budget only the finishing tool is offered
                tools=[final.tool] if finishing and required else tools,
                messages=await self._conversation(),
                cache_key=f"pr-cockpit-session-{self.session.id}",
            )
            reply = await self._send(request, started)
            self._count(reply, usage)
            if reply.items:
                await self._store(reply.items)
            over = self._over(usage)  # a final answer in this reply still counts
            short = over or short
            if not reply.tool_calls:
                if over is not None:
                    raise BudgetExceeded(over)
                if not required:
                    return TurnResult(run_id, reply.text, None, tool_calls)
                if repaired:
                    raise AgentError(say(PEOPLE, "no_final_answer", tool=final.name))
                repaired = True
                await self._store(self.provider.user_message(fragment(final.nudge)))
                continue
            results: list[tuple[ToolCall, str, bool]] = []
            answer = None
            spent = over  # a budget this reply found spent (for people)
            finish = final.name if required else None
            # The last call of a reply cut off at the output limit may be incomplete: it is
            # neither run nor taken as the answer; the model is asked for a shorter one.
            cut = reply.tool_calls[-1] if reply.cut_off else None
            if cut is not None:
                cut_offs += 1
                if cut_offs > CUT_OFF_RETRIES:
                    raise AgentError(say(PEOPLE, "answer_cut_off", tool=cut.name, times=cut_offs))
            problems = [
                arguments_problem(c.arguments) if c is not cut else None for c in reply.tool_calls
            ]
            if broken and any(problems):
                raise AgentError(say(PEOPLE, "arguments_again"))
            broken = any(problems)
            try:
                for call, problem in zip(reply.tool_calls, problems, strict=True):
                    if call is cut:
                        note = say(MODEL, "cut_off", tool=call.name, final=call.name == final.name)
                        results.append((call, note, True))
                        continue
                    if problem:  # one corrective turn: the next reply's arguments must be valid
                        why = render(
                            "prompts/tool_arguments_invalid.md.j2", tool=call.name, problem=problem
                        )
                        results.append((call, why.strip(), True))
                        continue
                    if call.name == final.name and not required:
                        results.append((call, fragment("not_now"), True))
                        continue
                    if call.name == final.name:
                        try:
                            answer = final.parse(arguments_object(call.arguments))
                            results.append((call, fragment(final.acknowledgement), False))
                        except InvalidAnswer as exc:
                            if repaired:
                                raise AgentError(
                                    say(PEOPLE, "invalid_output", tool=final.name, problem=exc)
                                ) from None
                            repaired = True
                            why = render("prompts/invalid_answer.md.j2", tool=final.name, error=exc)
                            results.append((call, why.strip(), True))
                        continue
                    if over is not None or tool_calls >= self.budget.max_tool_calls:
                        limit = self.budget.max_tool_calls
                        spent = spent or say(PEOPLE, "budget_tool_calls", limit=limit)
                        refused = say(MODEL, "budget", why="spent", tool=finish)
                        results.append((call, refused, True))
                        continue
                    tool_calls += 1
                    if finishing:  # it counts: a model that keeps exploring runs out
                        refused = say(MODEL, "budget", why="finish", tool=finish)
                        results.append((call, refused, True))
                        continue
                    output = await self.toolbox.call(call.name, arguments_object(call.arguments))
                    results.append((call, output, False))
            except BaseException:  # stopped or failed mid-call: every call still gets a result
                done = {call.id for call, _, _ in results}
                rest = [(c, interrupted(), True) for c in reply.tool_calls if c.id not in done]
                await asyncio.shield(self._store(self.provider.tool_results([*results, *rest])))
                raise
            if answer is not None:
                await self._store(self.provider.tool_results(results))
                if short is not None and final.short is not None:
                    answer = final.short(answer, short, self.toolbox.coverage())
                return TurnResult(run_id, reply.text, answer, tool_calls, cut_short=short)
            nearly = self._nearly(tool_calls, usage, started)
            call, output, is_error = results[-1]  # each turn tells the model what is left
            note = self._left(tool_calls, usage, started, nearly)
            results[-1] = (call, f"{output}\n\n{note}", is_error)
            await self._store(self.provider.tool_results(results))
            if spent is not None and (finishing or over is not None):
                raise BudgetExceeded(spent)

    async def _store(self, items: list[dict[str, Any]], origin: Origin = (None, None)) -> None:
        comment_id, source = origin
        await append_messages(
            self.db, self.session.id, items, github_comment_id=comment_id, source=source
        )

    async def _conversation(self, settle: bool = False) -> list[dict[str, Any]]:
        """A call without its result is answered "interrupted"; `settle` also stores those
        answers when they come last (before a turn adds to it)."""
        stored = await load_messages(self.db, self.session.id)
        closed = close_dangling(stored, self.provider.tool_results, interrupted())
        if settle and len(closed) > len(stored) and closed[: len(stored)] == stored:
            await self._store(closed[len(stored) :])
        return closed

    async def _send(self, request: ProviderRequest, started: float) -> ModelReply:
        remaining = self.budget.max_seconds - (time.monotonic() - started)
        if remaining <= 0:
            raise BudgetExceeded(self._out_of_time())
        try:
            async with asyncio.timeout(remaining):  # the SDK's retries included
                return await self.provider.send(request)
        except TimeoutError:
            raise BudgetExceeded(self._out_of_time()) from None
        except AgentError:  # the provider said what went wrong and what to do
            raise
        except Exception as exc:
            raise AgentError(_describe(self.provider.name, exc)) from exc

    def _count(self, reply: ModelReply, usage: dict[str, Usage]) -> None:
        """Adds the reply to `usage` and the metrics."""
        rate = self.provider.fallback_rate
        model = reply.model
        usage.setdefault(model, Usage()).add(reply.usage)
        if self.metrics:
            labels = {"provider": self.provider.name, "model": model}
            for kind, count in reply.usage.counts().items():
                self.metrics.model_tokens.labels(**labels, kind=kind).inc(count)
            cost = cost_usd(model, reply.usage, rate)
            if cost:
                self.metrics.model_cost.labels(**labels).inc(cost)

    def _tokens(self, usage: dict[str, Usage]) -> float:
        rate = self.provider.fallback_rate
        return sum(budget_tokens(model, u, rate) for model, u in usage.items())

    def _usd(self, usage: dict[str, Usage]) -> float:
        rate = self.provider.fallback_rate
        return sum(cost_usd(model, u, rate) or 0.0 for model, u in usage.items())

    def _over(self, usage: dict[str, Usage]) -> str | None:
        """The token or dollar budget the run has spent, as people are told; None if neither."""
        budget = self.budget
        tokens = self._tokens(usage)
        if tokens > budget.max_tokens:
            return say(PEOPLE, "budget_tokens", tokens=round(tokens), limit=budget.max_tokens)
        spent = self._usd(usage)
        if budget.max_usd is not None and spent > budget.max_usd:
            return say(PEOPLE, "budget_usd", spent=spent, limit=budget.max_usd)
        return None

    def _nearly(self, tool_calls: int, usage: dict[str, Usage], started: float) -> str | None:
        """The budget nearly spent, as people are told (None: none is): from then on the turn
        only finishes."""
        budget, left = self.budget, 1 - FINISH_SHARE

        def said(why: str, used: float, limit: float) -> str:
            return say(PEOPLE, "budget_nearly", why=why, used=used, limit=limit)

        if budget.max_tool_calls - tool_calls <= FINISH_CALLS:
            return said("tool_calls", tool_calls, budget.max_tool_calls)
        tokens = self._tokens(usage)
        if tokens >= budget.max_tokens * left:
            return said("tokens", round(tokens), budget.max_tokens)
        elapsed = time.monotonic() - started
        if elapsed >= budget.max_seconds * left:
            return said("wall_clock", elapsed, budget.max_seconds)
        spent = self._usd(usage)
        if budget.max_usd is not None and spent >= budget.max_usd * left:
            return said("usd", spent, budget.max_usd)
        return None

    def _left(
        self, tool_calls: int, usage: dict[str, Usage], started: float, nearly: str | None
    ) -> str:
        """The model's line on what it may still spend."""
        budget = self.budget
        return say(
            MODEL,
            "budget",
            why="left",
            calls=max(budget.max_tool_calls - tool_calls, 0),
            max_calls=budget.max_tool_calls,
            tokens=max(budget.max_tokens - round(self._tokens(usage)), 0),
            max_tokens=budget.max_tokens,
            seconds=max(budget.max_seconds - (time.monotonic() - started), 0),
            max_seconds=budget.max_seconds,
            usd=max((budget.max_usd or 0) - self._usd(usage), 0),
            max_usd=budget.max_usd,
            finishing=nearly is not None,
            tool=self.final.name if self.answer is Answer.REQUIRED else None,
        )

    def _out_of_time(self) -> str:
        return say(PEOPLE, "budget_wall_clock", seconds=self.budget.max_seconds)

    async def _finish(
        self, run_id: int, usage: dict[str, Usage], status: str, error: str | None, tool_calls: int
    ) -> float | None:
        rate = self.provider.fallback_rate
        costs = {model: cost_usd(model, u, rate) for model, u in usage.items()}
        total = None if any(c is None for c in costs.values()) else sum(costs.values())
        await finish_run(
            self.db,
            run_id,
            usage,
            costs,
            status=status,
            error=error,
            tool_calls=tool_calls,
            cost_usd=total,
        )
        return total


def fragment(name: str) -> str:
    return prompt_text(name).strip()


def interrupted() -> str:
    return fragment("tool_interrupted")


def _describe(provider: str, exc: Exception) -> str:
    """What the server said is never quoted after 401 or 403 (it may hold part of the key);
    "unavailable" when the SDK gave up retrying (each request carries its retry count)."""
    status = getattr(exc, "status_code", None)
    said = quoted(server_said(getattr(exc, "body", None))) if status not in (401, 403) else ""
    what = {"provider": provider, "status": status, "error_class": exc.__class__.__name__}
    error = say(PEOPLE, "provider_error", said=said, **what)
    sdk_error = isinstance(exc, anthropic.APIError | openai.APIError)
    if not sdk_error or exc.request.headers.get("x-stainless-retry-count") != str(MAX_RETRIES):
        return error
    return say(
        PEOPLE, "provider_unavailable", provider=provider, attempts=MAX_RETRIES + 1, reason=error
    )
