"""Retention of closed PRs' conversations, on both backends: what goes, and the cost ledger
that stays."""

from __future__ import annotations

import time

import pytest

from bot import workers
from bot.records.runs import prune_runs
from bot.records.stats import model_figures, totals
from tests.test_stats import History, finding

pytestmark = pytest.mark.backends
NOW = time.time()


async def test_conversations_of_long_closed_prs_go_and_the_cost_ledger_stays(db):
    for number, state, updated in ((1, "closed", 1000), (2, "closed", 9000), (3, "open", 1000)):
        [pull_id] = await db.fetchone(
            "INSERT INTO pulls (repo, number, state, updated_at) VALUES ('o/r', ?, ?, ?)"
            " RETURNING id",
            (number, state, updated),
        )
        [review_id] = await db.fetchone(
            "INSERT INTO reviews (pull_id, head_sha, created_at, updated_at) VALUES (?, 'a', 0, 0)"
            " RETURNING id",
            (pull_id,),
        )
        await db.execute(
            "INSERT INTO findings (review_id, ordinal, path, severity, title)"
            " VALUES (?, 1, 'x', 'nit', 't')",
            (review_id,),
        )
        [session_id] = await db.fetchone(
            "INSERT INTO sessions (pull_id, provider, model, created_at, updated_at)"
            " VALUES (?, 'claude', 'm', 0, 0) RETURNING id",
            (pull_id,),
        )
        await db.execute(
            "INSERT INTO messages (session_id, seq, id, role, content, created_at)"
            " VALUES (?, 0, 'msg-0', 'user', 'hi', 0)",
            (session_id,),
        )
        await db.execute(
            "INSERT INTO runs (kind, session_id, review_id, provider, model, cost_usd,"
            " started_at) VALUES ('review', ?, ?, 'claude', 'm', 0.5, 0)",
            (session_id, review_id),
        )
    await workers.prune_closed_conversations(db, older_than=5000)
    for table, expected in (("reviews", 2), ("findings", 2), ("sessions", 2), ("messages", 2)):
        assert (await db.fetchone(f"SELECT COUNT(*) FROM {table}"))[0] == expected, table
    assert tuple(await db.fetchone("SELECT COUNT(*), SUM(cost_usd) FROM runs")) == (3, 1.5)


async def test_runs_nothing_shows_go_after_their_retention_and_stats_still_count_them(db):
    """A long-closed PR's conversation goes (its figures counted first), then its runs and
    their usage once past RUN_TTL; the open PR's old run and today's run stay. `cockpit
    stats` and the gauges count the pruned review as before."""
    history = History(db)
    closed = await history.pull("octo/widgets", 1, "a")
    old_review = await history.draft(
        closed, "a", [(1, finding(1)), (2, finding(2))], provider="claude", model="m", usd=[0.5]
    )
    await history.publish(old_review, [1])
    still_open = await history.pull("octo/widgets", 2, "b")
    await history.draft(still_open, "b", [(1, finding(1))], provider="claude", model="m", usd=[0.2])
    await db.execute("INSERT INTO run_usage (run_id, model) SELECT id, model FROM runs")
    await db.execute(
        "INSERT INTO runs (kind, provider, model, cost_usd, started_at)"
        " VALUES ('eval', 'claude', 'm', 0.1, ?)",
        (NOW,),
    )
    await db.execute("UPDATE pulls SET state = 'closed', updated_at = 1000 WHERE id = ?", (closed,))
    counted = await model_figures(db)
    assert [(f.reviews, f.published, f.usd) for f in counted] == [(2, 1, 0.7)]

    await workers.prune_closed_conversations(db, older_than=NOW - workers.CONVERSATION_TTL)
    assert await db.fetchone("SELECT id FROM reviews WHERE id = ?", (old_review,)) is None
    assert (await db.fetchone("SELECT COUNT(*) FROM runs"))[0] == 3  # not yet
    pruned = await prune_runs(db, NOW - workers.RUN_TTL, chunk=1)
    assert pruned == 2  # the closed PR's run and its usage row
    runs = await db.fetchall("SELECT review_id, started_at FROM runs ORDER BY id")
    assert [(row["review_id"] is not None, row["started_at"]) for row in runs] == [
        (True, 0.0),  # the open PR's review still shows its cost
        (False, NOW),
    ]
    usage = await db.fetchone("SELECT COUNT(*) FROM run_usage")
    assert usage[0] == 1
    assert await model_figures(db) == counted
    assert await totals(db, recount=100, timeout=None) == counted


async def test_notices_and_command_uses_older_than_the_cutoff_are_forgotten(db):
    from bot.records.notices import first_notice, forget_before, take_uses

    assert await first_notice(db, "old", NOW - 90000, every=3600)
    assert await first_notice(db, "new", NOW, every=3600)
    assert await take_uses(db, [("old", 5, 86400)], NOW - 90000) is None
    assert await take_uses(db, [("new", 5, 86400)], NOW) is None
    await forget_before(db, NOW - 86400)
    assert [tuple(row) for row in await db.fetchall("SELECT key FROM notices")] == [("new",)]
    assert [tuple(row) for row in await db.fetchall("SELECT key FROM command_uses")] == [("new",)]
