"""The LLM judge through the model stand-ins and the real SDKs: one question per pair, the
answers cached by (finding, label, judge model), so scoring again costs nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.agents.base import AgentError
from bot.agents.providers import ModelClients
from bot.config import ChatSettings, Settings
from bot.evals.golden import Label
from bot.evals.judges import EvalFinding, LLMJudge, make_judge, parse_answer
from bot.evals.report import results_json
from bot.evals.results import EvalOptions, ProgressSink
from bot.evals.runner import run_eval
from bot.records.sqlite import SqliteDatabase
from bot.standin.models import Action, fail, say
from bot.standin.scripted import MODEL, scripted_reviewer

PLANTED = Path(__file__).resolve().parent.parent / "eval" / "golden" / "planted" / "planted.json"
FINDINGS = [
    EvalFinding(1, "app/items.py", "critical", "SQL injection in search", "Use parameters.", 30),
    EvalFinding(2, "app/settings.py", "nit", "Compare with None using is", "Style.", 9),
]
LABELS = [
    Label(problem="The search text is interpolated into SQL (injection)."),
    Label(problem="The rate cache is written without the lock."),
]


def same_issue(conversation):
    """A judge that matches when the candidate and the golden issue share the word 'SQL'."""
    text = conversation.last_user_text
    golden = text.split("<golden>")[1].split("</golden>")[0]
    candidate = text.split("<candidate>")[1].split("</candidate>")[0]
    match = "SQL" in golden and "SQL" in candidate
    answer = {"reasoning": "both are about SQL" if match else "different", "match": match}
    return Action(text=json.dumps({**answer, "confidence": 0.9}), usage=(200, 30))


@pytest.fixture
async def db(tmp_path):
    database = await SqliteDatabase.open(tmp_path / "judge.sqlite3")
    yield database
    await database.close()


@pytest.fixture
def models(tmp_path):
    return ModelClients(Settings(data_dir=tmp_path, claude_model="judge-model"))


@pytest.mark.parametrize("provider", ["claude", "codex"])
async def test_the_llm_judge_asks_once_per_pair_and_caches(
    provider, db, models, anthropic_standin, openai_standin
):
    standin = anthropic_standin if provider == "claude" else openai_standin
    standin.policy = same_issue
    judge = LLMJudge(db, models, provider)
    matrix = await judge.scores(FINDINGS, LABELS)
    assert matrix == [[0.9, 0.0], [0.0, 0.0]]
    assert len(standin.requests) == 4 and judge.asked == 4
    first = standin.normalise(standin.requests[0])
    assert first.tools == [] and "judge of a code review benchmark" in first.system
    assert "app/items.py:30" in first.last_user_text
    assert sum(u.output_tokens for u in judge.usage.values()) == 4 * 30 and judge.tokens > 120

    again = LLMJudge(db, models, provider)  # a later re-scoring: every answer is cached
    assert await again.scores(FINDINGS, LABELS) == matrix
    assert len(standin.requests) == 4 and (again.asked, again.cached) == (0, 4)
    await models.close()


async def test_a_local_model_on_a_chat_server_judges_too(db, tmp_path, chat_standin):
    chat_standin.policy = same_issue
    chat_standin.models = ("local-judge",)
    chat = ChatSettings(f"{chat_standin.url}/v1", "local-judge", rates=(0.1, 0.2))
    models = ModelClients(Settings(data_dir=tmp_path, chat=chat))
    judge = make_judge("chat", db, models)
    assert await judge.scores(FINDINGS, LABELS) == [[0.9, 0.0], [0.0, 0.0]]
    assert "tools" not in chat_standin.requests[0]  # an empty tool list is a 400
    assert judge.model == "local-judge"
    assert judge.cost_usd == pytest.approx(4 * (200 * 0.1 + 30 * 0.2) / 1e6)  # its rates
    await models.close()


async def test_a_different_judge_model_asks_again(db, tmp_path, anthropic_standin):
    anthropic_standin.policy = same_issue
    first = ModelClients(Settings(data_dir=tmp_path, claude_model="judge-a"))
    await LLMJudge(db, first, "claude").scores(FINDINGS[:1], LABELS[:1])
    second = ModelClients(Settings(data_dir=tmp_path, claude_model="judge-b"))
    await LLMJudge(db, second, "claude").scores(FINDINGS[:1], LABELS[:1])
    assert len(anthropic_standin.requests) == 2
    await first.close()
    await second.close()


async def test_unreadable_answers_are_no_match_and_are_asked_again(db, models, anthropic_standin):
    anthropic_standin.policy = lambda conversation: say("I think they are similar.")
    judge = LLMJudge(db, models, "claude")
    assert await judge.scores(FINDINGS[:1], LABELS[:1]) == [[0.0]]
    assert judge.unreadable == 1
    await LLMJudge(db, models, "claude").scores(FINDINGS[:1], LABELS[:1])
    assert len(anthropic_standin.requests) == 2  # nothing was cached
    await models.close()


async def test_transient_errors_are_retried_and_hard_errors_fail_clearly(
    db, models, anthropic_standin
):
    answers = [fail(529), say('{"match": true, "confidence": 1}')]
    anthropic_standin.policy = lambda conversation: answers.pop(0)
    judge = LLMJudge(db, models, "claude")
    assert await judge.scores(FINDINGS[:1], LABELS[:1]) == [[1.0]]
    assert len(anthropic_standin.requests) == 2  # the 529 was retried (by the SDK)
    anthropic_standin.policy = lambda conversation: fail(400, "invalid_request_error")
    with pytest.raises(AgentError, match="claude judge failed"):
        await LLMJudge(db, models, "claude").scores(FINDINGS[1:], LABELS[1:])
    await models.close()


async def test_a_judge_without_a_key_is_refused(db, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(AgentError, match="needs an API key"):
        LLMJudge(db, ModelClients(Settings(data_dir=tmp_path)), "claude")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"match": true, "confidence": 0.7, "reasoning": "same"}', (True, 0.7)),
        ('```json\n{"reasoning": "no", "match": false}\n```', (False, 1.0)),
        ('{"match": true, "confidence": 7}', (True, 1.0)),
        ('{"match": "yes"}', None),
        ("no JSON here", None),
        ("{not json}", None),
        ('Comparing {candidate} with {golden}:\n{"match": true, "confidence": 0.4}', (True, 0.4)),
        ('{"note": "first"} and then {"match": false}', (False, 1.0)),
        ('{"outer": {"match": true}}', None),  # a verdict is a top-level object
        ('{"match": true', None),
        ("}{", None),
    ],
)
def test_judge_answers(text, expected):
    answer = parse_answer(text)
    assert (None if answer is None else (answer.match, answer.confidence)) == expected


@given(st.text(alphabet=st.sampled_from('{}[]":,tfrue0.9 match\\n'), max_size=200))
def test_any_judge_text_is_an_answer_or_none_never_an_error(text):
    answer = parse_answer(text)
    assert answer is None or 0.0 <= answer.confidence <= 1.0


def reviewer_or_judge(conversation):
    """The scripted reviewer for review turns; for judge turns (no tools), a judge that
    matches when both texts point at the same path:line."""
    if conversation.tools:
        return scripted_reviewer(conversation)
    text = conversation.last_user_text
    golden = text.split("<golden>")[1].split("</golden>")[0]
    candidate = text.split("<candidate>")[1].split("</candidate>")[0]
    place = re.search(r"\(([^,()]+:\d+)", candidate)
    match = bool(place) and f"({place.group(1)})" in golden
    return say(json.dumps({"reasoning": "same place", "match": match, "confidence": 0.8}))


async def test_an_eval_run_with_an_llm_judge_is_rescored_from_its_cache(
    tmp_path, anthropic_standin
):
    anthropic_standin.policy = reviewer_or_judge
    settings = Settings(data_dir=tmp_path / "data", claude_model=MODEL)
    options = EvalOptions(
        goldens=(str(PLANTED),),
        provider="claude",
        models=(MODEL,),
        judge="claude",
        judge_model="judge-model-x",
    )
    result = await run_eval(settings, options, ProgressSink())
    [entry] = results_json(result)["runs"]
    assert (entry["strict"]["tp"], entry["strict"]["fp"], entry["strict"]["fn"]) == (5, 3, 6)
    assert entry["benchmark"]["precision"] == 5 / 8  # the second leak is not at the label's line
    assert (entry["judge"], entry["judge_model"]) == ("claude", "judge-model-x")
    judged = [r for r in anthropic_standin.requests if not r.get("tools")]
    assert len(judged) == 15 and {r["model"] for r in judged} == {"judge-model-x"}

    before = len(anthropic_standin.requests)
    again = await run_eval(settings, None, ProgressSink(), resume=result.batch)
    assert len(anthropic_standin.requests) == before  # nothing reviewed or judged again
    assert results_json(again)["runs"][0]["strict"] == entry["strict"]
