"""Revising a draft after `send-back`, through the real server, the GitHub stand-in and both
model stand-ins: stable finding numbers, a person's decisions kept, verdicts kept or renewed,
and what GitHub shows at the end. Rows are read back from the database (SQLite and Postgres)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import fields, replace

import pytest

from bot.records import review_state
from bot.records.reviews import load_findings
from bot.records.types import DraftFinding, Finding
from bot.records.vocab import ReviewState
from bot.review.approve import publishing_key
from bot.review.revise import renumber
from bot.server import make_app
from bot.standin.models import Conversation, call
from bot.standin.scripted import scan_diff, scripted_reviewer
from handlers import router
from tests.conftest import wait_for
from tests.test_sessions import bodies, reactions, rows, say_on_pr, start_world
from tests.test_verify import HEAD as VERIFY_HEAD
from tests.test_verify import VERIFY_CONFIG
from tests.world import HEAD, NOTHING_FOLDED, build_world, stored_review

pytestmark = pytest.mark.backends

EVAL = "eval() runs untrusted input"
IS_NONE = "Compare with None using `is`"
TOKEN = "Hard-coded credential"
BARE = "Bare except hides errors"


def revising(findings: Callable[[list[dict]], list[dict]]):
    """The scripted reviewer, except that a revision submits `findings(its first findings)`."""

    def policy(conversation: Conversation):
        revision = conversation.last_user_text.startswith("[Review feedback from")
        if "submit_review" in conversation.tools and revision and _after_user(conversation):
            diff = conversation.result_of("git_diff") or ""
            return call(
                "submit_review",
                summary="Revised after the critique.",
                verdict="request_changes",
                findings=findings(scan_diff(diff)),
            )
        return scripted_reviewer(conversation)

    return policy


def _after_user(conversation: Conversation) -> bool:
    return bool(conversation.events) and conversation.events[-1][0] == "user"


def finding(path: str, line: int | None, title: str, **extra) -> dict:
    found = {"path": path, "severity": "minor", "title": title, "body": title,
             "evidence": f"{path} shows it", "confidence": 80, **extra}  # fmt: skip
    return found | ({"line": line} if line is not None else {})


def titled(first: list[dict], title: str, line: int | None = None) -> dict:
    return next(f for f in first if f["title"] == title and line in (None, f["line"]))


async def findings_of(world, review_id: int = 1) -> dict[int, tuple]:
    found = await rows(
        world,
        "SELECT ordinal, line, title, state FROM findings WHERE review_id = ? ORDER BY ordinal",
        (review_id,),
    )
    return {f["ordinal"]: (f["line"], f["title"], f["state"]) for f in found}


async def verdicts_of(world, review_id: int = 1) -> dict[int, str | None]:
    found = await rows(
        world,
        "SELECT ordinal, verify_status FROM findings WHERE review_id = ? ORDER BY ordinal",
        (review_id,),
    )
    return {f["ordinal"]: f["verify_status"] for f in found}


def published(world) -> list[dict]:
    return [r for r in world.github.reviews.values() if r["state"] != "PENDING"]


def check_runs(world) -> list[dict]:
    return sorted(world.github.check_runs.values(), key=lambda c: c["id"])


def revision_requests(world) -> list[str]:
    """The feedback messages the reviewer (Claude) was sent, newest last."""
    seen = [world.anthropic.normalise(r).last_user_text for r in world.anthropic.requests]
    return list(dict.fromkeys(t for t in seen if t.startswith("[Review feedback from")))


@pytest.fixture
def open_world(github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin):
    async def start(**kwargs):
        kwargs.setdefault("files", NOTHING_FOLDED)  # revisions of every finding, nits too
        return await start_world(
            github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin, **kwargs
        )

    return start


@pytest.fixture
async def world(open_world):
    return await open_world()


# -- renumbering, a pure function tested by table ------------------------------------------


def old(ordinal, path, line, title, state="kept", body="", verdict=None) -> Finding:
    """A stored finding as load_findings returns it."""
    return Finding(
        id=ordinal,
        review_id=1,
        ordinal=ordinal,
        path=path,
        line=line,
        end_line=None,
        side="RIGHT",
        severity="minor",
        title=title,
        body=body or title,
        suggestion=None,
        in_diff=True,
        verify_status=verdict,
        verify_note=verdict and f"{path}:{line} says so",
        state=state,
        checked_by="human" if state == "dropped" else "auto",
    )


def new(path, line, title, body="") -> DraftFinding:
    return DraftFinding(path, "minor", title, body or title, line=line, in_diff=True)


NONE_BODY = "Use `is None` / `is not None`: `==` can be overridden."


@pytest.mark.parametrize(
    ("before", "after", "numbers", "kept", "added", "withdrawn", "dropped"),
    [
        ([], [new("a.py", 1, "X")], [1], [], [1], [], []),
        (
            [old(1, "a.py", 3, "eval() runs input")],
            [new("a.py", 3, "eval() runs input")],
            [1],
            [1],
            [],
            [],
            [],
        ),
        # reordered, reworded a little, line moved a little: the numbers stay
        (
            [
                old(1, "a.py", 10, "SQL built with f-string"),
                old(2, "b.py", 5, "Bare except hides errors"),
            ],
            [
                new("b.py", 6, "Bare except hides the errors"),
                new("a.py", 10, "SQL built with f-string"),
            ],
            [2, 1],
            [1, 2],
            [],
            [],
            [],
        ),
        # one withdrawn, one new: the new one takes the next free number, never a reused one
        (
            [old(1, "a.py", 1, "A problem"), old(2, "a.py", 50, "Another problem")],
            [new("a.py", 1, "A problem"), new("c.py", 2, "Something else")],
            [1, 3],
            [1],
            [3],
            [2],
            [],
        ),
        # a new finding next to an old one on the same file, the old one withdrawn
        (
            [old(1, "calc.py", 2, EVAL), old(2, "calc.py", 6, IS_NONE)],
            [new("calc.py", 2, EVAL), new("calc.py", 7, "total() hides a missing list")],
            [1, 3],
            [1],
            [3],
            [2],
            [],
        ),
        # same path and words, but far away: a different finding
        (
            [old(1, "a.py", 1, "Leaked file handle")],
            [new("a.py", 90, "Leaked file handle now")],
            [2],
            [],
            [2],
            [1],
            [],
        ),
        # the same title twice on one file: each keeps the number of the nearest
        (
            [old(1, "a.py", 10, IS_NONE), old(2, "a.py", 30, IS_NONE)],
            [new("a.py", 31, IS_NONE), new("a.py", 9, IS_NONE)],
            [2, 1],
            [1, 2],
            [],
            [],
            [],
        ),
        # a finding withdrawn earlier comes back under its old number
        (
            [old(1, "a.py", 1, "A"), old(2, "a.py", 9, "Off by one in loop", "withdrawn")],
            [new("a.py", 9, "Off by one in loop")],
            [2],
            [2],
            [],
            [1],
            [],
        ),
        # a person's dropped finding the reviewer leaves out is not "withdrawn" by it
        (
            [old(1, "a.py", 1, "A", "dropped"), old(2, "b.py", 1, "B")],
            [new("b.py", 1, "B")],
            [2],
            [2],
            [],
            [],
            [],
        ),
        # a person's dropped finding reported again stays dropped, as the person left it
        (
            [old(4, "a.py", 2, "Race on counter", "dropped")],
            [new("a.py", 2, "Race on counter")],
            [],
            [],
            [],
            [],
            [4],
        ),
        # F2 (line 6) dropped, F3 (line 40) kept, one title: a revision at line 40 is F3
        (
            [
                old(1, "calc.py", 2, EVAL),
                old(2, "calc.py", 6, IS_NONE, "dropped"),
                old(3, "calc.py", 40, IS_NONE),
            ],
            [new("calc.py", 2, EVAL), new("calc.py", 40, IS_NONE)],
            [1, 3],
            [1, 3],
            [],
            [],
            [],
        ),
        # ... and both reported again: the drop stays on line 6
        (
            [old(2, "calc.py", 6, IS_NONE, "dropped"), old(3, "calc.py", 40, IS_NONE)],
            [new("calc.py", 40, IS_NONE), new("calc.py", 6, IS_NONE)],
            [3],
            [3],
            [],
            [],
            [2],
        ),
        # a drop is never carried far: the same title elsewhere in the file is new
        (
            [old(2, "calc.py", 6, IS_NONE, "dropped")],
            [new("calc.py", 60, IS_NONE)],
            [3],
            [],
            [3],
            [],
            [],
        ),
        # a dropped finding said again in other words, on its line: still dropped
        (
            [old(2, "calc.py", 6, IS_NONE, "dropped", NONE_BODY)],
            [
                new(
                    "calc.py",
                    6,
                    "Use `is None` rather than == None",
                    "`==` can be overridden, so compare with `is None`.",
                )
            ],
            [],
            [],
            [],
            [],
            [2],
        ),
        # a dropped finding with its title reworded a line away and a body written anew: its title
        # says it is the same claim (found by the #29 review: title + body alone let it come back)
        (
            [
                old(
                    1,
                    "app/db.py",
                    42,
                    "SQL injection in query builder",
                    "dropped",
                    "The query string is built with an f-string from the request's `name` "
                    "parameter and passed to cursor.execute, so an attacker controls the SQL text.",
                )
            ],
            [
                new(
                    "app/db.py",
                    43,
                    "Possible SQL injection in the query builder",
                    "User input reaches execute() unescaped; parameterise it with placeholders "
                    "instead of formatting the statement yourself.",
                )
            ],
            [],
            [],
            [],
            [],
            [1],
        ),
        # ... but another problem next to it is new
        (
            [old(2, "calc.py", 6, IS_NONE, "dropped", NONE_BODY)],
            [new("calc.py", 7, "total() hides a missing list", "Returning 0 hides bugs.")],
            [3],
            [],
            [3],
            [],
            [],
        ),
        # ... and so is a rewording of a kept finding's words far from the dropped one
        (
            [old(2, "calc.py", 6, IS_NONE, "dropped", NONE_BODY)],
            [new("calc.py", 30, "Use `is None` rather than == None", NONE_BODY)],
            [3],
            [],
            [3],
            [],
            [],
        ),
    ],
)
def test_revised_findings_keep_their_numbers(
    before, after, numbers, kept, added, withdrawn, dropped
):
    change = renumber(before, after)
    assert [ordinal for ordinal, _ in change.assigned] == numbers
    assert (change.kept, change.added, change.withdrawn) == (kept, added, withdrawn)
    assert change.dropped == dropped


@pytest.mark.parametrize(
    ("before", "after", "verdicts", "unverified"),
    [
        # unchanged: the verdict stays, nothing to verify
        ([old(1, "a.py", 3, "X", verdict="refuted")], [new("a.py", 3, "X")], ["refuted"], []),
        # moved, reworded or with a new body: verified again
        ([old(1, "a.py", 3, "X", verdict="refuted")], [new("a.py", 4, "X")], [None], [0]),
        (
            [old(1, "a.py", 3, "Bare except hides errors", verdict="confirmed")],
            [new("a.py", 3, "Bare except hides the errors")],
            [None],
            [0],
        ),
        ([old(1, "a.py", 3, "X", verdict="confirmed")], [new("a.py", 3, "X", "new")], [None], [0]),
        # new, and never verified (the pass had failed): verified
        (
            [old(1, "a.py", 3, "X"), old(2, "b.py", 1, "Y", verdict="confirmed")],
            [new("c.py", 1, "Z"), new("a.py", 3, "X"), new("b.py", 1, "Y")],
            [None, None, "confirmed"],
            [0, 1],
        ),
        # a verdict the revision already carries (its own verify pass) wins
        (
            [old(1, "a.py", 3, "X", verdict="refuted")],
            [replace(new("a.py", 9, "X"), verify_status="confirmed")],
            ["confirmed"],
            [],
        ),
        # a restated drop is neither stored nor verified
        ([old(1, "a.py", 3, "X", "dropped")], [new("a.py", 3, "X")], [], []),
    ],
)
def test_a_verdict_survives_only_an_unchanged_claim(before, after, verdicts, unverified):
    change = renumber(before, after)
    assert [f.verify_status for _, f in change.assigned] == verdicts
    assert change.unverified == unverified


async def test_renumbering_reads_the_records_the_database_returns(db):
    review_id = await stored_review(db)
    await review_state.take_run(db, review_id, "job:1", config_error=None)
    await review_state.set_findings(
        db,
        review_id,
        list(
            enumerate(
                [
                    replace(
                        new("calc.py", 2, EVAL), verify_status="confirmed", verify_note="calc.py:2"
                    ),
                    replace(new("calc.py", 6, IS_NONE), verify_status="refuted", verify_note="no"),
                    DraftFinding("calc.py", "nit", "no line", "b"),
                    new("calc.py", 40, IS_NONE),
                ],
                start=1,
            )
        ),
    )
    await review_state.end_run(db, review_id, "job:1", ReviewState.DRAFT, progress="draft ready")
    assert await review_state.drop_findings(db, review_id, (2,), by="octocat")
    [row] = await db.fetchall(
        "SELECT * FROM findings WHERE review_id = ? AND ordinal = 1", (review_id,)
    )
    assert set(row.keys()) == {f.name for f in fields(Finding)}  # the record is the whole row

    stored = await load_findings(db, review_id)
    assert all(isinstance(f, Finding) for f in stored)
    assert stored[2].line is None and stored[0].in_diff is True
    change = renumber(
        stored,
        [
            new("calc.py", 2, EVAL),  # unchanged
            new("calc.py", 40, IS_NONE),
            new("calc.py", 7, "total() hides a missing list"),  # added next to old ones
        ],
    )
    assert (change.kept, change.added, change.withdrawn) == ([1, 4], [5], [3])
    assert await review_state.begin_revision(
        db, review_id, change.assigned, change.withdrawn, by="claude", texts={"summary": "s"}
    )
    after = {
        f.ordinal: (f.line, f.state, f.verify_status) for f in await load_findings(db, review_id)
    }
    assert after == {
        1: (2, "kept", "confirmed"),
        2: (6, "dropped", "refuted"),
        3: (None, "withdrawn", None),
        4: (40, "kept", None),
        5: (7, "kept", None),
    }
    # revising: not a draft now
    assert not await review_state.drop_findings(db, review_id, (1,), by="octocat")
    assert await review_state.end_revision(db, review_id)


# -- 3: a revision that adds a finding ------------------------------------------------------


async def test_a_dropped_finding_restated_with_a_new_body_stays_dropped_from_the_database(db):
    """The hand-built case of test_revised_findings_keep_their_numbers, on the records the
    database returns after a person's drop."""
    review_id = await stored_review(db)
    await review_state.take_run(db, review_id, "job:1", config_error=None)
    said = (
        "The query string is built with an f-string from the request's `name` parameter and"
        " passed to cursor.execute, so an attacker controls the SQL text."
    )
    finding = new("app/db.py", 42, "SQL injection in query builder", said)
    await review_state.set_findings(db, review_id, [(1, finding)])
    await review_state.end_run(db, review_id, "job:1", ReviewState.DRAFT, progress="draft ready")
    assert await review_state.drop_findings(db, review_id, (1,), by="octocat")
    restated = new(
        "app/db.py",
        43,
        "Possible SQL injection in the query builder",
        "User input reaches execute() unescaped; parameterise it with placeholders instead of"
        " formatting the statement yourself.",
    )
    change = renumber(await load_findings(db, review_id), [restated])
    assert (change.assigned, change.added, change.dropped) == ([], [], [1])


async def test_a_revision_that_adds_a_finding_next_to_an_old_one_revises_the_draft(world):
    assert await findings_of(world) == {1: (2, EVAL, "kept"), 2: (6, IS_NONE, "kept")}
    added = "total() hides a missing list"
    world.anthropic.policy = revising(
        lambda first: [titled(first, EVAL), finding("calc.py", 7, added)]
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")

    [review] = await world.review_rows()
    assert (review["state"], review["revision"]) == ("draft", 2)
    assert await findings_of(world) == {
        1: (2, EVAL, "kept"),
        2: (6, IS_NONE, "withdrawn"),
        3: (7, added, "kept"),
    }
    assert any("revised the draft after Codex" in b for b in bodies(world))
    status = world.status_body()
    assert "Revision 2" in status and "kept F1 · new F3 · withdrawn F2" in status
    assert "| F3 |" in status
    [pending] = world.pending_reviews()
    assert sorted(c["line"] for c in pending["comments"]) == [2, 7]
    checks = check_runs(world)
    assert len(checks) == 2 and checks[-1]["conclusion"] == "neutral"
    assert sorted(a["start_line"] for a in checks[-1]["annotations"]) == [2, 7]


# -- 6: verdicts survive a revision ------------------------------------------------------------


async def test_a_refuted_finding_stays_refuted_through_a_revision_and_is_not_published(
    open_world,
):
    world = await open_world(head=VERIFY_HEAD, files=VERIFY_CONFIG)
    assert await findings_of(world) == {
        1: (2, EVAL, "kept"),
        2: (1, TOKEN, "kept"),
    }
    assert await verdicts_of(world) == {1: "confirmed", 2: "refuted"}
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    assert (await world.review_rows())[0]["revision"] == 2
    assert await verdicts_of(world) == {1: "confirmed", 2: "refuted"}
    verify_runs = await rows(world, "SELECT id FROM runs WHERE subkind = 'verify'")
    # one verify session (and run) per finding of the first draft; nothing changed, so
    # nothing was verified again
    assert len(verify_runs) == 2
    assert "✗ refuted by codex" in world.status_body()

    await say_on_pr(world, "/cockpit approve")
    [review] = published(world)
    assert [c["path"] for c in review["comments"]] == ["calc.py"]


async def test_a_changed_or_new_finding_is_verified_again_after_a_revision(open_world):
    world = await open_world(head=VERIFY_HEAD, files=VERIFY_CONFIG)
    reworded = "eval() executes untrusted input"
    added = "parse() accepts any expression"
    world.anthropic.policy = revising(
        lambda first: [
            {**titled(first, EVAL), "title": reworded, "body": "eval runs what it is given."},
            titled(first, TOKEN),
            finding("calc.py", 2, added),
        ]
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")

    assert await findings_of(world) == {
        1: (2, reworded, "kept"),
        2: (1, TOKEN, "kept"),
        3: (2, added, "kept"),
    }
    assert await verdicts_of(world) == {1: "confirmed", 2: "refuted", 3: "confirmed"}
    verify_runs = await rows(world, "SELECT review_id FROM runs WHERE subkind = 'verify'")
    # one session per finding: the first draft's two, then the revision's new and changed
    assert [r["review_id"] for r in verify_runs] == [1, 1, 1, 1]
    asked = {
        world.openai.normalise(r).user_texts[0]
        for r in world.openai.requests
        if "submit_verification" in str(r.get("tools"))
    }
    assert len(asked) == 4 and sum(TOKEN in text for text in asked) == 1  # not again
    assert any(reworded in text for text in asked) and any(added in text for text in asked)
    [review] = await world.review_rows()
    assert review["verify_error"] is None
    await say_on_pr(world, "/cockpit approve")
    [review] = published(world)
    assert sorted(c["path"] for c in review["comments"]) == ["calc.py", "calc.py"]


# -- 7: a person's drop stays on the finding they dropped -----------------------------------

LONG_HEAD = {
    "calc.py": HEAD["calc.py"]
    + "".join(f"# note {n}\n" for n in range(9, 39))
    + "def clamp(value, limit):\n    if limit == None:\n        return value\n"
    "    return min(value, limit)\n"
}


async def test_a_drop_is_never_moved_onto_a_kept_finding_with_the_same_title(open_world):
    world = await open_world(head=LONG_HEAD)
    assert await findings_of(world) == {
        1: (2, EVAL, "kept"),
        2: (6, IS_NONE, "kept"),
        3: (40, IS_NONE, "kept"),
    }
    await say_on_pr(world, "/cockpit drop F2")
    world.anthropic.policy = revising(lambda first: [f for f in first if f["line"] != 6])
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")

    assert await findings_of(world) == {
        1: (2, EVAL, "kept"),
        2: (6, IS_NONE, "dropped"),
        3: (40, IS_NONE, "kept"),
    }
    await say_on_pr(world, "/cockpit approve")
    [review] = published(world)
    assert sorted(c["line"] for c in review["comments"]) == [2, 40]


# -- 8: a dropped finding reworded by the reviewer stays dropped ----------------------------


async def test_a_reworded_dropped_finding_stays_dropped_and_the_reviser_is_told(world):
    reworded = finding(
        "calc.py",
        6,
        "Use `is None` rather than == None",
        severity="nit",
        body="`==` can be overridden, so compare with `is None`.",
    )
    world.anthropic.policy = revising(lambda first: [titled(first, EVAL), reworded])
    await say_on_pr(world, "/cockpit drop F2")
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")

    [told] = revision_requests(world)
    dropped = told.split("dropped", 1)[1]
    assert "F2" in dropped and IS_NONE in dropped and "calc.py:6" in dropped
    assert await findings_of(world) == {1: (2, EVAL, "kept"), 2: (6, IS_NONE, "dropped")}
    status = world.status_body()
    assert "| F3 |" not in status
    assert "withdrawn none · reported again but dropped by people F2" in status
    assert any("reported again but dropped by people F2." in b for b in bodies(world))
    [pending] = world.pending_reviews()
    assert [c["line"] for c in pending["comments"]] == [2]
    await say_on_pr(world, "/cockpit approve")
    [review] = published(world)
    assert [c["line"] for c in review["comments"]] == [2]


async def test_the_reviser_is_told_what_it_withdrew_earlier(world):
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")  # the scripted reviewer withdraws the nit
    assert (await findings_of(world))[2][2] == "withdrawn"
    await say_on_pr(world, "/cockpit send-back again")
    first, second = revision_requests(world)
    assert "withdrew" not in first
    withdrawn = second.split("withdrew", 1)[1]
    assert "F2" in withdrawn and IS_NONE in withdrawn


# -- 10: drop and the check run; drop and a revision ------------------------------------------


async def test_drop_gives_the_draft_a_check_run_without_the_dropped_finding(world):
    [before] = check_runs(world)
    assert sorted(a["start_line"] for a in before["annotations"]) == [2, 6]
    comment = await say_on_pr(world, "/cockpit drop F2")
    assert reactions(world, comment) == ["eyes", "rocket"]
    old, new = check_runs(world)
    assert old["id"] == before["id"]
    assert (new["status"], new["conclusion"]) == ("completed", "neutral")
    assert [a["start_line"] for a in new["annotations"]] == [2]
    assert new["output"]["title"] == "Draft: 1 finding(s)"
    [review] = await world.review_rows()
    assert review["check_run_id"] == new["id"]
    assert any("Dropped F2" in b and "check run" in b for b in bodies(world))


async def someone_waits_for(world, backend: str, key: str) -> bool:
    """Whether a second holder waits for `key` (the drop holds it)."""
    if backend == "postgres":
        waiting = (  # an advisory lock's low 32 bits are its objid
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND objid::bigint = (hashtext(?)::bigint & 4294967295)"
        )
        return bool(await rows(world, waiting, (key,)))
    lock = world.ctx.db._held.get(key)
    return lock is not None and bool(getattr(lock, "_waiters", None))


async def test_a_revision_waits_for_a_drop_that_is_writing_to_github(world, backend):
    await say_on_pr(world, "/cockpit codex-review")
    world.anthropic.gate.clear()  # the reviewer is revising
    requests = len(world.anthropic.requests)
    await say_on_pr(world, "/cockpit send-back", wait=False)
    await wait_for(lambda: len(world.anthropic.requests) > requests)

    gh = world.github
    original = gh._create_review
    held, release, hold = asyncio.Event(), asyncio.Event(), {"on": True}

    async def slow_create(request, body, **kwargs):
        if hold["on"] and body.get("event") is None:
            hold["on"] = False
            held.set()
            await release.wait()  # GitHub is slow to answer the drop's pending review
        return await original(request, body, **kwargs)

    gh._create_review = slow_create
    dropped = await say_on_pr(world, "/cockpit drop F1", wait=False)
    await asyncio.wait_for(held.wait(), 20)
    world.anthropic.gate.set()
    await wait_for(lambda: someone_waits_for(world, backend, publishing_key(1)), timeout=20)
    release.set()
    await world.wait_idle()

    assert reactions(world, dropped) == ["eyes", "rocket"]
    [review] = await world.review_rows()
    assert (review["state"], review["revision"]) == ("draft", 2)
    assert (await findings_of(world))[1][2] == "dropped"
    [pending] = world.pending_reviews()
    assert pending["comments"] == []  # F1 dropped, F2 withdrawn by the revision
    assert check_runs(world)[-1]["annotations"] == []


# -- every feature together ------------------------------------------------------------------

TOGETHER_HEAD = {
    **VERIFY_HEAD,
    "calc.py": HEAD["calc.py"]
    + "\n\ndef safe_total(values):\n    try:\n        return total(values)\n    except:\n"
    "        return 0\n",
}


async def test_verify_critique_revision_drop_and_approve_on_one_pr(open_world):
    world = await open_world(head=TOGETHER_HEAD, files=VERIFY_CONFIG)
    assert await findings_of(world) == {
        1: (2, EVAL, "kept"),
        2: (1, TOKEN, "kept"),
        3: (14, BARE, "kept"),
        4: (6, IS_NONE, "kept"),
    }
    assert await verdicts_of(world) == {
        1: "confirmed",
        2: "refuted",
        3: "confirmed",
        4: "confirmed",
    }

    reworded, added = "eval() executes untrusted input", "total() treats a missing list as empty"
    world.anthropic.policy = revising(
        lambda first: [
            {**titled(first, EVAL), "title": reworded},  # reworded
            titled(first, TOKEN),
            titled(first, BARE),
            finding("calc.py", 7, added),  # added; the nit is withdrawn
        ]
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    assert await findings_of(world) == {
        1: (2, reworded, "kept"),
        2: (1, TOKEN, "kept"),
        3: (14, BARE, "kept"),
        4: (6, IS_NONE, "withdrawn"),
        5: (7, added, "kept"),
    }
    assert await verdicts_of(world) == {
        1: "confirmed",
        2: "refuted",
        3: "confirmed",
        4: "confirmed",
        5: "uncertain",
    }
    assert "kept F1, F2, F3 · new F5 · withdrawn F4" in world.status_body()

    await say_on_pr(world, "/cockpit drop F5")
    await say_on_pr(world, "/cockpit approve")

    [review] = await world.review_rows()
    assert (review["state"], review["revision"], review["posted_by"]) == ("posted", 2, "octocat")
    states = await rows(
        world,
        "SELECT ordinal, state, checked_by FROM findings WHERE review_id = 1 ORDER BY ordinal",
    )
    assert [(f["ordinal"], f["state"], f["checked_by"]) for f in states] == [
        (1, "kept", "human"),
        (2, "skipped", "auto"),
        (3, "kept", "human"),
        (4, "withdrawn", "claude"),
        (5, "dropped", "human"),
    ]
    assert world.pending_reviews() == []
    [final] = published(world)
    assert final["state"] == "CHANGES_REQUESTED"
    assert sorted((c["path"], c["line"]) for c in final["comments"]) == [
        ("calc.py", 2),
        ("calc.py", 14),
    ]
    assert reworded in next(c["body"] for c in final["comments"] if c["line"] == 2)
    checks = check_runs(world)
    assert len(checks) == 3  # the review, its revision, the drop
    assert sorted(a["start_line"] for a in checks[-1]["annotations"]) == [1, 2, 14]
    status = world.status_body()
    assert "Published" in status or "published" in status
    runs = await rows(world, "SELECT kind, subkind, provider FROM runs ORDER BY id")
    assert [tuple(r) for r in runs] == [
        ("review", None, "claude"),
        *[("review", "verify", "codex")] * 4,  # one verify session per finding
        ("session", "critique", "codex"),
        ("review", "revision", "claude"),
        *[("review", "verify", "codex")] * 2,  # the revision's new and changed findings
    ]

    # Then a push: the ledger keeps every decision. The re-review raises the finding a person
    # dropped (F5) again in other words, where its code is now: it is suppressed.
    again = "total() treats a missing list as an empty one"
    world.anthropic.policy = raising_on_a_push(finding("calc.py", 8, again))
    head = world.push({"calc.py": "# parsing helpers\n" + TOGETHER_HEAD["calc.py"]})
    await world.send("pull_request", world.pull_request_payload("synchronize", head_sha=head))
    second = await world.wait_review("draft", index=1)
    assert second["suppressed"] == 1
    # F1 and F3 are on GitHub already, F4 was withdrawn, F5 dropped: only F2 (refuted, never
    # published) stays open in the draft, under its number.
    assert await findings_of(world, second["id"]) == {2: (1, TOKEN, "kept")}
    # F2's code is as it was: its verdict holds, and no verify pass runs for it again
    assert await verdicts_of(world, second["id"]) == {2: "refuted"}
    again_runs = await rows(
        world, "SELECT kind, subkind FROM runs WHERE review_id = ? ORDER BY id", (second["id"],)
    )
    assert [tuple(r) for r in again_runs] == [("review", None)]
    status = world.status_body()
    assert "published and still open F1, F3" in status
    assert "dropped by people F5 · repeats of dropped findings suppressed: 1" in status


def raising_on_a_push(found: dict):
    """The scripted reviewer, except that a re-review after a push submits `found`."""

    def policy(conversation: Conversation):
        first = conversation.user_texts[0] if conversation.user_texts else ""
        if (
            "submit_review" in conversation.tools
            and "re-review after a push" in first
            and conversation.result_of("git_diff") is not None
        ):
            return call("submit_review", summary="s", verdict="comment", findings=[found])
        return scripted_reviewer(conversation)

    return policy


async def test_a_revision_never_puts_a_finding_on_a_file_left_out_as_noise(open_world):
    world = await open_world(head={**HEAD, "yarn.lock": "# yarn lockfile v1\n"})
    world.anthropic.policy = revising(lambda first: [*first, finding("yarn.lock", 1, "Lock drift")])
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    [review] = await world.review_rows()
    assert review["revision"] == 2
    assert [title for _, title, _ in (await findings_of(world)).values()] == [EVAL, IS_NONE]
    assert "1 finding(s) the reviewer placed on them were dropped" in world.status_body()


async def test_a_revision_never_puts_a_finding_on_a_file_an_ignore_glob_matches(open_world):
    world = await open_world(
        head={**HEAD, "docs/design.md": "# Design\n"},
        files={".github/cockpit.toml": 'min_severity = "nit"\nignore = ["docs/**"]\n'},
    )
    world.anthropic.policy = revising(
        lambda first: [*first, finding("docs/design.md", 1, "Design drift")]
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    [review] = await world.review_rows()
    assert review["revision"] == 2
    assert [title for _, title, _ in (await findings_of(world)).values()] == [EVAL, IS_NONE]
    status = world.status_body()
    assert "1 finding(s) the reviewer placed on files matching an `ignore` glob were dropped" in (
        status
    )


def diffing_each_turn(conversation: Conversation):
    """The scripted reviewer and verifier, looking at the PR's diff again at the start of
    every turn: a review, the verify pass, a critique, a revision."""
    if _after_user(conversation):
        return call("git_diff")
    return scripted_reviewer(conversation)


def diffs_shown(*standins) -> list[str]:
    """Every answer of `git_diff` the models were given."""
    shown = []
    for standin in standins:
        for request in standin.requests:
            conversation = standin.normalise(request)
            pairs = zip(conversation.tool_calls, conversation.tool_results, strict=False)
            shown += [result for (name, _args), result in pairs if name == "git_diff"]
    return shown


async def test_no_later_turn_shows_the_model_a_file_the_review_left_out(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """Before: only the first review's diff left them out; the verify pass, a critique and a
    revision were shown the ignored and the noise files."""
    anthropic_standin.policy = openai_standin.policy = diffing_each_turn
    config = 'verify = true\nmin_severity = "nit"\nignore = ["docs/**"]\n'
    world = await start_world(
        github,
        settings,
        tmp_path,
        aiohttp_client,
        anthropic_standin,
        openai_standin,
        head={**HEAD, "docs/design.md": "# Design\n", "yarn.lock": "# yarn lockfile v1\n"},
        files={".github/cockpit.toml": config},
    )
    await say_on_pr(world, "/cockpit codex-review")
    await say_on_pr(world, "/cockpit send-back")
    [review] = await world.review_rows()
    assert review["revision"] == 2
    kinds = await rows(world, "SELECT kind, subkind FROM runs ORDER BY id")
    assert {(r["kind"], r["subkind"]) for r in kinds} >= {
        ("review", None),
        ("review", "verify"),
        ("session", "critique"),
        ("review", "revision"),
    }
    shown = diffs_shown(anthropic_standin, openai_standin)
    assert len(shown) >= 5 and all("calc.py" in diff for diff in shown)
    for diff in shown:
        assert "docs/design.md" not in diff and "yarn.lock" not in diff


async def test_send_back_needs_the_approve_permission(
    github, settings, tmp_path, aiohttp_client, anthropic_standin, openai_standin
):
    """Before: a writer could `send-back` "refute F1" and the revision withdrew it, where
    `approve_permission = "maintain"` keeps them from dropping it."""
    config = 'min_severity = "nit"\napprove_permission = "maintain"\n'
    world = build_world(
        github,
        tmp_path,
        files={".github/cockpit.toml": config},
        permissions={"octocat": "admin", "maint": "maintain", "writer": "write"},
    )
    world.client = await aiohttp_client(make_app(settings, router))
    world.anthropic, world.openai = anthropic_standin, openai_standin
    await world.send("pull_request", world.pull_request_payload("opened"))
    await world.wait_review("draft")
    before = await findings_of(world)
    await say_on_pr(world, "/cockpit codex-review", user="writer")  # a critique is for anyone

    refused = await say_on_pr(world, f"/cockpit send-back refute {EVAL}", user="writer")
    assert reactions(world, refused) == ["eyes", "confused"]
    said = "`send-back` decides what is published, so it needs `maintain` permission here"
    assert sum(said in body for body in bodies(world)) == 1
    [review] = await world.review_rows()
    assert review["revision"] == 1 and await findings_of(world) == before
    assert revision_requests(world) == []

    sent = await say_on_pr(world, f"/cockpit send-back refute {EVAL}", user="maint")
    assert reactions(world, sent) == ["eyes", "rocket"]
    [review] = await world.review_rows()
    assert review["revision"] == 2
    assert (EVAL, "withdrawn") in [
        (title, st) for _l, title, st in (await findings_of(world)).values()
    ]
