"""Cross-AI sessions through the real server, the GitHub stand-in and both model stand-ins
(driven by the real anthropic and openai SDKs): codex-review, ask, send-back, end."""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3

import aiohttp
import pytest

from bot.records.messages import append_messages
from bot.records.sessions import primary_of_review
from bot.server import make_app
from bot.standin.models import fail, say
from handlers import router
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.jobstates import job_states
from tests.serverproc import ServerProcess
from tests.test_crash_recovery import server_env
from tests.world import build_world, comment_payload

pytestmark = pytest.mark.backends

PEOPLE = {"octocat": "admin", "maint": "maintain", "reader": "read"}


async def start_world(github, settings, tmp_path, aiohttp_client, anthropic, openai, **kwargs):
    world = build_world(github, tmp_path, permissions=PEOPLE, **kwargs)
    world.client = await aiohttp_client(make_app(settings, router))
    world.anthropic, world.openai = anthropic, openai
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    return world


@pytest.fixture
async def world(github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    return await start_world(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
    )


COMMENT_IDS = iter(range(20_000, 30_000))


async def say_on_pr(world, body, *, user="octocat", wait=True) -> int:
    comment_id = next(COMMENT_IDS)
    await world.send(
        "issue_comment", comment_payload(world, body, user=user, comment_id=comment_id)
    )
    if wait:
        await world.wait_idle()
    return comment_id


def bodies(world) -> list[str]:
    return [c["body"] for c in world.github.issue_comments.values()]


def answers(world, provider: str) -> list[str]:
    """The answers a session posted, by the provider in their heading."""
    return [
        b
        for b in bodies(world)
        if b.startswith("<!-- pr-cockpit:session")
        and re.search(rf"^### \S+ {provider} \(", b, re.M)
    ]


def reactions(world, comment_id):
    return [r["content"] for r in world.github.reactions if r["comment_id"] == comment_id]


async def rows(world, sql, args=()):
    return await world.ctx.db.fetchall(sql, args)


async def test_critique_ask_send_back_and_approve_publish_the_revised_draft(world):
    status = world.status_body()
    assert "| F1 |" in status and "| F2 |" in status  # eval() (critical), == None (nit)

    started = await say_on_pr(world, "/cockpit codex-review")
    assert reactions(world, started) == ["eyes", "rocket"]
    [critique] = answers(world, "Codex")
    assert f"Codex (`{world.ctx.settings.codex_model}`)" in critique.splitlines()[1]
    assert "F1" in critique and "refute" in critique and "#issuecomment-" in critique
    [link] = await rows(world, "SELECT * FROM session_reviews")
    assert link["child_adapter"] == "codex" and link["ended_at"] is None
    assert link["anchor_comment_id"] == started
    assert link["review_prompt"] == "Critique this review: confirm, refute, and add what it missed."
    parent = await primary_of_review(world.ctx.db, (await world.review_rows())[0]["id"])
    anchor = await rows(
        world,
        "SELECT content FROM messages WHERE session_id = ? AND id = ?",
        (parent.id, link["anchor_message_id"]),
    )
    assert "submit_review" in anchor[0]["content"]  # the message that produced the draft
    first_request = world.openai.requests[0]
    assert first_request["model"] and "submit_review" not in str(first_request["tools"])

    asked = await say_on_pr(world, "/cockpit ask is F1 really reachable from user input?")
    assert len(answers(world, "Codex")) == 2
    assert "is F1 really reachable" in answers(world, "Codex")[-1]
    child_messages = await rows(
        world,
        "SELECT id, role, github_comment_id FROM messages WHERE session_id = ? ORDER BY seq",
        (link["child_session_id"],),
    )
    assert [m["id"] for m in child_messages] == [f"msg-{n}" for n in range(len(child_messages))]
    assert any(m["role"] == "user" and m["github_comment_id"] == asked for m in child_messages)
    posted_ids = {c["id"] for c in world.github.issue_comments.values()}
    linked = [m["github_comment_id"] for m in child_messages if m["role"] == "assistant"]
    assert {i for i in linked if i} <= posted_ids and len({i for i in linked if i}) == 2

    await say_on_pr(world, "/cockpit send-back keep it short")
    [review] = await world.review_rows()
    assert review["state"] == "draft" and review["revision"] == 2
    assert "kept F1 · new none · withdrawn F2" in world.status_body()
    feedback = [
        t
        for t in (
            await rows(world, "SELECT content FROM messages WHERE session_id = ?", (parent.id,))
        )
        if "Review feedback from codex" in t[0]
    ]
    assert len(feedback) == 1 and "keep it short" in feedback[0][0]
    status = world.status_body()
    assert "Revision 2" in status and "withdrawn by claude" in status
    assert any("revised the draft after Codex" in b for b in bodies(world))
    [pending] = world.pending_reviews()
    assert len(pending["comments"]) == 1 and "F1" in pending["comments"][0]["body"]
    check_runs = world.github.calls("POST", r"/check-runs$")
    assert len(check_runs) == 2  # the revision has its own check run and annotations

    await say_on_pr(world, "/cockpit approve")
    published = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert len(published) == 1 and len(published[0]["comments"]) == 1
    assert "F1" in published[0]["comments"][0]["body"]
    costs = world.status_body()
    assert "claude:" in costs and "codex:" in costs


async def test_the_critic_sees_the_draft_and_the_code_not_the_reviewers_conversation(world):
    """Was: the child saw the parent's last 50 messages (30 KB); a critic that reads how the
    draft was reached is anchored by it, so it now sees the draft and reads the code."""
    [review] = await world.review_rows()
    parent = await primary_of_review(world.ctx.db, review["id"])
    filler = [{"role": "user", "content": f"note {n}: the reviewer's reasoning"} for n in range(3)]
    await append_messages(world.ctx.db, parent.id, filler)
    await say_on_pr(world, "/cockpit codex-review")
    first = world.openai.requests[0]["input"][0]["content"]
    assert "note 2" not in first and "<conversation>" not in first
    findings = await rows(world, "SELECT ordinal, title FROM findings")
    assert findings and all(f"| F{f[0]} |" in first and f[1] in first for f in findings)
    assert "<pr_title>" in first and "check it against the code yourself" in first
    tools = [
        c["name"] for c in world.openai.requests[1]["input"] if c.get("type") == "function_call"
    ]
    assert "git_diff" in tools  # it reads the code itself


async def test_a_second_codex_review_says_one_is_active_and_restart_replaces_it(world):
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit codex-review look harder")
    assert any("already active" in b and "--restart" in b for b in bodies(world))
    assert len(await rows(world, "SELECT * FROM session_reviews")) == 1
    await say_on_pr(world, "/cockpit codex-review --restart look at error handling")
    links = await rows(world, "SELECT * FROM session_reviews ORDER BY id")
    assert len(links) == 2 and links[0]["ended_at"] is not None and links[1]["ended_at"] is None
    assert links[1]["review_prompt"] == "look at error handling"
    assert "look at error handling" in world.openai.requests[-1]["input"][0]["content"]


async def test_send_back_while_the_reviewer_is_busy_queues_and_runs_in_order(world):
    await say_on_pr(world, "/cockpit codex-review")
    world.anthropic.gate.clear()  # the reviewer's next turn hangs
    requests = len(world.anthropic.requests)
    await say_on_pr(world, "/cockpit send-back first", wait=False)
    await wait_for(lambda: len(world.anthropic.requests) > requests)
    await say_on_pr(world, "/cockpit send-back second", wait=False)
    await wait_for(lambda: any("it is busy" in b for b in bodies(world)))
    world.anthropic.gate.set()
    await world.wait_idle()
    [review] = await world.review_rows()
    assert review["revision"] == 3
    [parent] = await rows(world, "SELECT id FROM sessions WHERE role = 'primary'")
    feedback = [
        m["content"]
        for m in await rows(
            world, "SELECT content FROM messages WHERE session_id = ? ORDER BY seq", (parent["id"],)
        )
        if "Review feedback from" in m["content"]
    ]
    assert ["first" in feedback[0], "second" in feedback[1]] == [True, True]


async def test_stop_cancels_the_running_turn_and_drops_the_queue(world):
    await say_on_pr(world, "/cockpit codex-review")
    world.anthropic.gate.clear()
    requests = len(world.anthropic.requests)
    await say_on_pr(world, "/cockpit send-back first", wait=False)
    await wait_for(lambda: len(world.anthropic.requests) > requests)
    await say_on_pr(world, "/cockpit send-back second", wait=False)
    await wait_for(lambda: any("it is busy" in b for b in bodies(world)))
    await say_on_pr(world, "/cockpit stop", wait=False)
    await wait_for(
        lambda: any("Stopped the running review or session turn" in b for b in bodies(world))
    )
    world.anthropic.gate.set()
    await world.wait_idle()
    [review] = await world.review_rows()
    assert review["revision"] == 1  # nothing was revised
    turns = await job_states(
        world.ctx.jobs,
        "session_turn",
        f"session:{(await primary_of_review(world.ctx.db, review['id'])).id}",
    )
    assert sorted(turns) == ["cancelled", "cancelled"]
    assert not any("revised the draft" in b for b in bodies(world))


async def test_end_records_the_count_and_replies_with_a_summary(world):
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit end")
    [link] = await rows(world, "SELECT * FROM session_reviews")
    count = len(
        await rows(
            world, "SELECT 1 FROM messages WHERE session_id = ?", (link["child_session_id"],)
        )
    )
    assert link["ended_at"] is not None and link["message_count"] == count > 0
    assert any(f"Ended the Codex session: {count} message(s)" in b for b in bodies(world))
    [child] = await rows(world, "SELECT status FROM sessions WHERE role = 'child'")
    assert child["status"] == "ended"
    await say_on_pr(world, "/cockpit send-back")
    assert any("no cross-review is active" in b for b in bodies(world))


async def test_closing_the_pr_during_a_child_turn_ends_the_session(world):
    world.openai.gate.clear()
    await say_on_pr(world, "/cockpit codex-review", wait=False)
    await wait_for(lambda: len(world.openai.requests) > 0)
    await world.send("pull_request", world.pull_request_payload("closed"))
    await world.wait_idle()
    world.openai.gate.set()
    [link] = await rows(world, "SELECT * FROM session_reviews")
    assert link["ended_at"] is not None
    statuses = {r["status"] for r in await rows(world, "SELECT status FROM sessions")}
    assert statuses == {"ended"}
    assert answers(world, "Codex") == []


async def test_with_claude_on_a_codex_draft(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    settings = dataclasses.replace(settings, provider="codex")
    world = await start_world(
        github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
    )
    assert (await world.review_rows())[0]["provider"] == "codex"
    before = len(anthropic_standin.requests)
    await say_on_pr(world, "/cockpit codex-review --with claude")
    assert len(anthropic_standin.requests) > before
    [critique] = answers(world, "Claude")
    assert "confirmed" in critique
    await say_on_pr(world, "/cockpit send-back")
    assert (await world.review_rows())[0]["revision"] == 2
    assert any("Codex revised the draft after Claude" in b for b in bodies(world))


@pytest.mark.parametrize(
    "command",
    ["codex-review", "ask why?", "send-back", "end"],
)
async def test_a_reader_cannot_run_session_commands(world, command):
    comment_id = await say_on_pr(world, f"/cockpit {command}", user="reader")
    assert reactions(world, comment_id) == ["confused"]
    assert await rows(world, "SELECT * FROM sessions WHERE role = 'child'") == []
    assert len(world.openai.requests) == 0


async def test_no_draft_yet_says_how_to_start_one(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    world = build_world(github, tmp_path, permissions=PEOPLE)
    world.client = await aiohttp_client(make_app(settings, router))
    world.openai = openai_standin
    await say_on_pr(world, "/cockpit codex-review")
    assert any("no draft review on this PR yet" in b for b in bodies(world))


async def test_model_text_in_a_critique_stays_inert(world):
    world.openai.policy = lambda conversation: say(
        "@octocat and @octo/everyone: approve! <!-- pr-cockpit:status -->\n```\nnot closed"
    )
    await say_on_pr(world, "/cockpit codex-review")
    [critique] = answers(world, "Codex")
    assert not re.search(r"(?<![\w\u2060])@octo", critique.replace("@\u2060", ""))
    assert "@octocat" not in critique and "@octo/everyone" not in critique
    assert critique.count("<!-- pr-cockpit:status -->") == 0
    fences = re.findall(r"^ {0,3}```", critique, re.M)
    assert len(fences) == 2  # the fence it opened is closed before our footer


async def test_a_child_turn_killed_mid_way_resumes_once_after_restart(
    github, tmp_path, anthropic_standin, openai_standin
):
    world = build_world(github, tmp_path, permissions=PEOPLE)
    env = {
        **server_env(github),
        "ANTHROPIC_BASE_URL": anthropic_standin.url,
        "ANTHROPIC_API_KEY": "sk-ant-test-key-0123456789",
        "OPENAI_BASE_URL": f"{openai_standin.url}/v1",
        "OPENAI_API_KEY": "sk-test-openai-0123456789",
    }
    data_dir = tmp_path / "data"
    db_path = data_dir / "cockpit.sqlite3"

    def query(sql, args=()):
        with sqlite3.connect(db_path) as conn:
            return conn.execute(sql, args).fetchall()

    async def post(session, url, event, data, delivery_id):
        body = json.dumps(data).encode()
        headers = deliveries.headers(event, body, WEBHOOK_SECRET, delivery_id)
        async with session.post(f"{url}/webhooks/github", data=body, headers=headers) as response:
            assert response.status == 202

    server = ServerProcess(env, data_dir, tmp_path / "server.log")
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            await post(
                session, server.url, "pull_request", world.pull_request_payload("opened"), "k-1"
            )
            await wait_for(lambda: query("SELECT state FROM reviews") == [("draft",)], timeout=30)
            await wait_for(lambda: "Draft ready" in world.status_body(), timeout=30)
            openai_standin.gate.clear()  # Codex is thinking when the server dies
            data = comment_payload(world, "/cockpit codex-review", comment_id=31_000)
            await post(session, server.url, "issue_comment", data, "k-2")
            await wait_for(lambda: len(openai_standin.requests) == 1, timeout=30)
            server.kill()
    finally:
        server.kill()
    assert query("SELECT status FROM sessions WHERE role = 'child'") == [("busy",)]

    openai_standin.gate.set()
    restarted = ServerProcess(env, data_dir, tmp_path / "server.log")
    await restarted.start()
    try:
        await wait_for(lambda: len(answers(world, "Codex")) == 1, timeout=30)
        await wait_for(
            lambda: (
                query(
                    "SELECT COUNT(*) FROM jobs WHERE state IN ('queued', 'running', 'waiting')"
                    " AND run_after <= strftime('%s', 'now')"
                )
                == [(0,)]
            ),
            timeout=30,
        )
    finally:
        restarted.terminate()
    assert len(answers(world, "Codex")) == 1
    child_users = query(
        "SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_id"
        " WHERE s.role = 'child' AND m.role = 'user' AND m.github_comment_id = 31000"
    )
    assert child_users == [(1,)]  # the first message was not added twice
    assert query("SELECT status FROM sessions WHERE role = 'child'") == [("active",)]
    assert query("SELECT COUNT(*) FROM session_reviews WHERE ended_at IS NULL") == [(1,)]


async def test_ask_without_a_cross_review_asks_the_reviewer_about_its_draft(world):
    asked = await say_on_pr(world, "/cockpit ask why is F1 critical?")
    [answer] = answers(world, "Claude")
    assert "### 💬 Claude" in answer and "why is F1 critical?" in answer
    assert "calc.py:2" in answer  # grounded in what the reviewer found in the worktree
    assert reactions(world, asked) == ["eyes", "rocket"]
    [review] = await world.review_rows()
    assert review["revision"] == 1  # a question never revises the draft
    runs = await rows(world, "SELECT kind, subkind, provider FROM runs ORDER BY id")
    assert (runs[-1]["kind"], runs[-1]["subkind"], runs[-1]["provider"]) == (
        "session",
        "ask",
        "claude",
    )


async def test_a_provider_failure_ends_the_child_with_the_reason_on_the_pr(world):
    world.openai.policy = lambda conversation: fail(400, "invalid_request_error")
    await say_on_pr(world, "/cockpit codex-review")
    assert any(
        "Codex could not answer, so its session ended" in b
        and 'rejected the request (400: "stand-in error")' in b
        for b in bodies(world)
    )
    [child] = await rows(world, "SELECT status, error FROM sessions WHERE role = 'child'")
    assert child["status"] == "failed" and "400" in child["error"]
    [link] = await rows(world, "SELECT ended_at FROM session_reviews")
    assert link["ended_at"] is not None
    await say_on_pr(world, "/cockpit codex-review")  # a new one may start
    assert len(await rows(world, "SELECT * FROM session_reviews")) == 2


# Found by an independent review: each failed before its fix.


async def test_a_revision_of_an_old_draft_never_lands_after_a_new_review(world):
    await say_on_pr(world, "/cockpit codex-review")
    world.anthropic.gate.clear()
    requests = len(world.anthropic.requests)
    await say_on_pr(world, "/cockpit send-back", wait=False)
    await wait_for(lambda: len(world.anthropic.requests) > requests)
    await say_on_pr(world, "/cockpit review --provider codex", wait=False)
    await world.wait_review("draft", index=1)
    world.anthropic.gate.set()
    await world.wait_idle()
    old, new = await world.review_rows()
    assert old["revision"] == 1 and new["state"] == "draft"
    assert "Revision 2" not in world.status_body()
    [pending] = world.pending_reviews()
    assert pending["id"] == new["pending_review_id"]
    await say_on_pr(world, "/cockpit approve")
    [published] = [r for r in world.github.reviews.values() if r["state"] != "PENDING"]
    assert "(codex)" in published["body"]


async def test_ask_after_a_failed_rereview_still_reaches_the_old_draft(world):
    scripted = world.anthropic.policy
    world.anthropic.policy = lambda conversation: fail(400, "invalid_request_error")
    await say_on_pr(world, "/cockpit review")
    await world.wait_review("failed", index=1)
    world.anthropic.policy = scripted
    await say_on_pr(world, "/cockpit ask why is F1 critical?")
    assert [a for a in answers(world, "Claude") if "why is F1 critical?" in a]
    statuses = await rows(world, "SELECT review_id, status FROM sessions ORDER BY id")
    assert [tuple(r) for r in statuses] == [(1, "active"), (2, "ended")]


async def test_after_close_and_reopen_session_commands_say_why_they_cannot_run(world):
    await world.send("pull_request", world.pull_request_payload("closed"))
    await world.wait_idle()
    await world.send("pull_request", world.pull_request_payload("reopened"))
    await world.wait_idle()
    asked = await say_on_pr(world, "/cockpit ask why is F1 critical?")
    assert reactions(world, asked) == ["eyes", "confused"]
    assert any("conversation has ended" in b for b in bodies(world))


async def test_several_session_commands_in_one_comment_each_get_their_turn(world):
    await say_on_pr(world, "/cockpit ask what is F1 about?\n/cockpit ask and what about F2?")
    first, second = answers(world, "Claude")
    assert "what is F1 about?" in first and "(what is F1 about?)" in first
    assert "and what about F2?" in second and "(and what about F2?)" in second
    await say_on_pr(world, "/cockpit codex-review\n/cockpit ask is F1 reachable?")
    [link] = await rows(world, "SELECT * FROM session_reviews")
    child = await rows(
        world, "SELECT content FROM messages WHERE session_id = ?", (link["child_session_id"],)
    )
    assert any("is F1 reachable" in m["content"] for m in child)
    assert len(answers(world, "Codex")) == 2


async def rerun_last_turn(world):
    from bot.records.types import Job

    [row] = await rows(
        world, "SELECT * FROM jobs WHERE kind = 'session_turn' ORDER BY id DESC LIMIT 1"
    )
    await world.ctx.jobs.handlers["session_turn"](Job.from_row(row))


@pytest.mark.sqlite_only("replays a job row of the SQLite queue, as its start-up recovery does")
async def test_a_finished_turn_run_again_after_a_crash_does_nothing_twice(world):
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit ask is F1 reachable?")
    requests = len(world.openai.requests)
    await rerun_last_turn(world)  # as start-up recovery does for a job left running
    assert len(answers(world, "Codex")) == 2 and len(world.openai.requests) == requests
    await say_on_pr(world, "/cockpit send-back")
    await rerun_last_turn(world)
    assert (await world.review_rows())[0]["revision"] == 2
    assert sum("revised the draft" in b for b in bodies(world)) == 1


async def test_approve_waits_for_a_revision_being_written_to_github(world):
    import asyncio

    await say_on_pr(world, "/cockpit codex-review")
    gh = world.github
    original = gh._create_review
    held, release, hold = asyncio.Event(), asyncio.Event(), {"on": True}

    async def slow_create(request, body, **kwargs):
        if hold["on"] and body.get("event") is None:
            hold["on"] = False
            held.set()
            await release.wait()  # GitHub is slow to answer the revision's pending review
        return await original(request, body, **kwargs)

    gh._create_review = slow_create
    await say_on_pr(world, "/cockpit send-back", wait=False)
    await asyncio.wait_for(held.wait(), 20)
    approve = await say_on_pr(world, "/cockpit approve", wait=False)
    await wait_for(lambda: reactions(world, approve)[-1:] == ["confused"], timeout=20)
    assert any("revision of this draft is being applied" in b for b in bodies(world))
    release.set()
    await world.wait_idle()
    await say_on_pr(world, "/cockpit approve")
    assert world.pending_reviews() == []
    [published] = [r for r in gh.reviews.values() if r["state"] != "PENDING"]
    assert len(published["comments"]) == 1  # the revised draft, F2 withdrawn


async def test_approving_a_withdrawn_finding_is_refused(world):
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    await say_on_pr(world, "/cockpit approve F2")
    assert any("F2 was dropped or withdrawn" in b for b in bodies(world))
    assert [r for r in world.github.reviews.values() if r["state"] != "PENDING"] == []


async def test_a_github_error_posting_the_critique_is_retried_not_fatal(world):
    world.openai.gate.clear()
    await say_on_pr(world, "/cockpit codex-review", wait=False)
    await wait_for(lambda: len(world.openai.requests) > 0)
    await wait_for(lambda: any("is reviewing the draft" in b for b in bodies(world)))
    world.github.fail_next("POST", r"/issues/1/comments$", 502)
    world.openai.gate.set()
    await wait_for(lambda: len(answers(world, "Codex")) == 1, timeout=30)
    await world.wait_idle()  # the retried turn has ended, not only posted its answer
    [child] = await rows(world, "SELECT status FROM sessions WHERE role = 'child'")
    assert child["status"] == "active"
    assert len(world.openai.requests) == 2  # the paid answer was posted, not asked again


async def test_at_start_busy_sessions_of_open_prs_wait_and_those_of_closed_prs_end(db):
    """A child ends with its parent, and so does their cross-review (with its message count);
    the count is of sessions ended."""
    from bot.records import sessions

    pull_ids = {}
    for number, state in ((1, "open"), (2, "closed")):
        [pull_ids[state]] = await db.fetchone(
            "INSERT INTO pulls (repo, number, state) VALUES ('o/r', ?, ?) RETURNING id",
            (number, state),
        )
    kept = await sessions.create_session(db, provider="p", model="m", pull_id=pull_ids["open"])
    parent = await sessions.create_session(db, provider="p", model="m", pull_id=pull_ids["closed"])
    child = await sessions.start_cross_review(
        db,
        parent=parent,
        provider="p",
        model="m",
        anchor_message_id=None,
        anchor_comment_id=None,
        prompt="p",
        title="t",
    )
    await append_messages(db, child.id, [{"role": "user", "content": "hi"}])
    for session in (kept, child):
        assert await sessions.mark_busy(db, session.id)
    assert await sessions.settle_sessions_at_start(db) == 2
    statuses = [(await sessions.get_session(db, s.id)).status for s in (kept, parent, child)]
    assert statuses == ["active", "ended", "ended"]
    row = await db.fetchone("SELECT ended_at, message_count FROM session_reviews")
    assert row["ended_at"] is not None and row["message_count"] == 1
