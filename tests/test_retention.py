"""Retention of closed PRs' conversations, on both backends: what goes, and the cost ledger
that stays."""

from __future__ import annotations

import pytest

from bot import workers

pytestmark = pytest.mark.backends


async def test_conversations_of_long_closed_prs_go_and_the_cost_ledger_stays(db):
    for number, state, updated in ((1, "closed", 1000), (2, "closed", 9000), (3, "open", 1000)):
        pull_id = await db.execute(
            "INSERT INTO pulls (repo, number, state, updated_at) VALUES ('o/r', ?, ?, ?)",
            (number, state, updated),
        )
        review_id = await db.execute(
            "INSERT INTO reviews (pull_id, head_sha, created_at, updated_at) VALUES (?, 'a', 0, 0)",
            (pull_id,),
        )
        await db.execute(
            "INSERT INTO findings (review_id, ordinal, path, severity, title)"
            " VALUES (?, 1, 'x', 'nit', 't')",
            (review_id,),
        )
        session_id = await db.execute(
            "INSERT INTO sessions (pull_id, provider, model, created_at, updated_at)"
            " VALUES (?, 'claude', 'm', 0, 0)",
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
