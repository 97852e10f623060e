"""Judges: does a finding describe the same issue as a label? (`lexical`, or a model)"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from bot.agents.base import AgentError, ProviderRequest, Usage, cost_usd
from bot.agents.providers import ModelClients
from bot.evals.golden import Label
from bot.records import evals
from bot.records.database import Database
from bot.review.identity import likeness, words
from bot.skills import prompt_text
from bot.texts import OPERATOR, render, say

LINE_WINDOW = 10  # a finding this many lines from a label's line can still be about it
LOCATED_MIN = 0.10  # word overlap needed when path (and line) agree
TEXT_MIN = 0.30  # word overlap needed when the label has no path (free-text labels)
JUDGES = ("lexical", "claude", "codex", "chat")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class EvalFinding:
    ordinal: int
    path: str
    severity: str
    title: str
    body: str = ""
    line: int | None = None
    end_line: int | None = None
    verify_status: str | None = None
    verify_note: str | None = None
    confidence: int | None = None

    @classmethod
    def of(cls, ordinal: int, finding: Any) -> EvalFinding:
        return cls(ordinal, *(getattr(finding, f.name) for f in fields(cls)[1:]))


def normal_path(path: str | None) -> str | None:
    if not path:
        return None
    path = path.strip().replace("\\", "/")
    for prefix in ("./", "a/", "b/", "/"):
        path = path.removeprefix(prefix)
    return path or None


def lexical_score(finding: EvalFinding, label: Label) -> float:
    """0 when they do not match, else higher for a closer match; a free-text label (no path)
    must share more words."""
    text = likeness(
        words(f"{finding.title} {finding.body}"), words(f"{label.title or ''} {label.problem}")
    )
    finding_path, label_path = normal_path(finding.path), normal_path(label.path)
    if label_path is None or finding_path is None:
        return text if text >= TEXT_MIN else 0.0
    if finding_path != label_path:
        return 0.0
    nearness = 0.25
    if label.line and finding.line is not None:
        start, end = sorted((finding.line, finding.end_line or finding.line))
        distance = max(start - label.line, label.line - end, 0)  # 0 inside the finding's lines
        if distance > LINE_WINDOW:
            return 0.0
        nearness = 1 - distance / (LINE_WINDOW + 1)
    return 1 + nearness + text if text >= LOCATED_MIN else 0.0


class LexicalJudge:
    name = "lexical"
    model = None
    tokens = 0
    cost_usd = 0.0
    unreadable = 0

    async def scores(
        self, findings: Sequence[EvalFinding], labels: Sequence[Label]
    ) -> list[list[float]]:
        return [[lexical_score(f, label) for label in labels] for f in findings]


def finding_text(finding: EvalFinding) -> str:
    where = finding.path + (f":{finding.line}" if finding.line else "")
    return f"{finding.title}\n({where}, {finding.severity})\n\n{finding.body}".strip()


def label_text(label: Label) -> str:
    parts = [label.title or ""]
    if label.path:
        parts.append(f"({label.path}{f':{label.line}' if label.line else ''})")
    parts.append(label.problem)
    return "\n".join(p for p in parts if p).strip()


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Answer:
    match: bool
    confidence: float
    reasoning: str


def parse_answer(text: str) -> Answer | None:
    """The first JSON object with a boolean `match`, prose, fences and stray braces skipped
    (None: none; the caller counts those)."""
    start = text.find("{")
    while start != -1:
        try:
            data, end = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(data, dict) and isinstance(data.get("match"), bool):
            confidence = data.get("confidence", 1.0)
            if isinstance(confidence, bool) or not isinstance(confidence, int | float):
                confidence = 1.0
            confidence = min(max(float(confidence), 0.0), 1.0)
            return Answer(data["match"], confidence, str(data.get("reasoning", "")))
        start = text.find("{", end)
    return None


@dataclass
class LLMJudge:
    """Asks a model whether each (finding, label) pair is the same issue; answers are kept in
    `eval_judgements`, so scoring again costs nothing."""

    db: Database
    models: ModelClients
    name: str
    model: str | None = None
    concurrency: int = 8
    usage: dict[str, Usage] = field(default_factory=dict)
    asked: int = 0
    cached: int = 0
    unreadable: int = 0  # answers with no verdict to read: scored "no match", asked again

    def __post_init__(self) -> None:
        self._provider = self.models.provider(self.name, self.model)
        if not self.models.configured(self.name):
            raise AgentError(say(OPERATOR, "eval.judge_needs_key", judge=self.name))
        self.model = self._provider.model
        self._system = prompt_text("judge")
        self._limit = asyncio.Semaphore(self.concurrency)
        # The whole question as the model reads it, without the two texts: when the prompt
        # changes (an upgrade, an edit), cached answers to the old question no longer count.
        question = render("prompts/judge_request.md.j2", finding="\0", label="\0")
        self._prompt_key = _key(f"{self._system}\0{question}")

    @property
    def cost_usd(self) -> float | None:
        rate = self._provider.fallback_rate
        costs = [cost_usd(model, usage, rate) for model, usage in self.usage.items()]
        return None if None in costs else sum(c for c in costs if c is not None)

    @property
    def tokens(self) -> int:
        return sum(u.total for u in self.usage.values())

    async def scores(
        self, findings: Sequence[EvalFinding], labels: Sequence[Label]
    ) -> list[list[float]]:
        pairs = [(i, j) for i in range(len(findings)) for j in range(len(labels))]
        answers = await asyncio.gather(
            *(self._judge(finding_text(findings[i]), label_text(labels[j])) for i, j in pairs)
        )
        matrix = [[0.0] * len(labels) for _ in findings]
        for (i, j), answer in zip(pairs, answers, strict=True):
            if answer is not None and answer.match:
                matrix[i][j] = max(answer.confidence, 0.01)
        return matrix

    async def _judge(self, finding: str, label: str) -> Answer | None:
        # The label's key covers the prompt too (one cache row per question actually asked).
        keys = (self.name, self.model, _key(finding), _key(f"{self._prompt_key}\0{label}"))
        known = await evals.judgement(self.db, keys)
        if known is not None:
            self.cached += 1
            return Answer(*known)
        provider = self._provider
        request = ProviderRequest(
            system=self._system,
            tools=[],
            messages=provider.user_message(
                render("prompts/judge_request.md.j2", finding=finding, label=label)
            ),
            cache_key="pr-cockpit-eval-judge",
        )
        try:
            async with self._limit:
                reply = await provider.send(request)  # the SDK retried what is transient
        except AgentError:  # the provider said what is wrong (a chat server's refusal)
            raise
        except Exception as exc:
            error_class = exc.__class__.__name__
            raise AgentError(
                say(OPERATOR, "eval.judge_failed", judge=self.name, error_class=error_class)
            ) from exc
        self.asked += 1
        self.usage.setdefault(reply.model or provider.model, Usage()).add(reply.usage)
        answer = parse_answer(reply.text or "")
        if answer is None:
            self.unreadable += 1
            return None
        await evals.store_judgement(
            self.db, keys, answer.match, answer.confidence, answer.reasoning
        )
        return answer


Judge = LexicalJudge | LLMJudge


def make_judge(name: str, db: Database, models: ModelClients, model: str | None = None) -> Judge:
    if name == "lexical":
        return LexicalJudge()
    if name in JUDGES[1:]:
        return LLMJudge(db, models, name, model)
    raise AgentError(say(OPERATOR, "eval.unknown_judge", judge=repr(name), choices=JUDGES))
