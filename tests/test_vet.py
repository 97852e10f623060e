"""#30 `/cockpit vet`: the draft as the vetter's own pending review, and reconciling what they
submit by `F` number (published by a person, edited, dropped by a person; their own comments
left alone)."""

from __future__ import annotations

import pytest

from bot.review.reconcile import number_of, reconcile

F1 = "**F1 · major** · Division by zero\n\nThe divisor can be 0."
F2 = "**F2 · minor** · Unused import\n\n`os` is never used."
F3 = "**F3 · critical** · SQL injection\n\nThe name goes into the query."
F4 = "- **F4 · major** · `a.py:90` — **Outside the diff** (not on a line of the diff)"


def test_reconcile_by_number_published_edited_removed_and_own_comments():
    placed = {1: F1, 2: F2, 3: F3, 4: F4}
    comments = [
        F1.replace("\n", "\r\n") + " ",  # GitHub's line endings: not an edit
        "**F3 · critical** · SQL injection\n\nUse a bound parameter here.",  # edited
        "I would also rename this.",  # the person's own
        "**F9 · nit** · typed by the person",  # no finding of ours: theirs
    ]
    body = "Looks good overall.\n\n" + F4 + "\n"
    outcome = reconcile(placed, comments, body)
    assert {n: edited for n, (_, edited) in outcome.published.items()} == {
        1: False,
        3: True,
        4: False,
    }
    assert outcome.published[3][0].endswith("Use a bound parameter here.")
    assert outcome.removed == (2,)
    assert outcome.own == 2


def test_a_body_finding_deleted_from_the_body_is_removed():
    outcome = reconcile({4: F4}, [], "Nothing else.")
    assert outcome.removed == (4,) and outcome.published == {}


def test_number_of():
    assert number_of(F1) == 1
    assert number_of("  **F12 · nit** · x") == 12
    assert number_of("F1 is wrong") is None
    assert number_of("") is None


# -- what a vetter's submission stores, counted like approve and drop (both backends) ---------


@pytest.mark.backends
async def test_a_vetters_decisions_count_like_approve_and_drop(db):
    from bot.evals.from_reviews import golden_from_reviews
    from bot.records import review_state
    from bot.records.reviews import get_review, load_findings
    from bot.records.stats import model_figures
    from tests.test_stats import History, finding

    h = History(db)
    pull_id = await h.pull("octo/widgets", 1, "a")
    numbered = [(n, finding(n)) for n in (1, 2, 3, 4)]
    review_id = await h.draft(pull_id, "a", numbered, provider="claude", model="claude-x")
    placed = {1: F1, 2: F2, 3: F3}  # F4 was not put in the vetter's review
    assert await review_state.hand_to_vetter(db, review_id, "alice", 77, placed)
    assert (await get_review(db, review_id)).vetter == "alice"
    outcome = reconcile(placed, [F1, F3 + " (reworded)"], "")
    why = "removed from their review"
    assert not await review_state.published_by_person(
        db, review_id, "mallory", "COMMENT", outcome.published, outcome.removed, why
    )  # only the person holding the draft
    assert await review_state.published_by_person(
        db, review_id, "alice", "COMMENT", outcome.published, outcome.removed, why
    )
    review = await get_review(db, review_id)
    assert (review.state, review.posted_by) == ("posted", "alice")
    found = {f.ordinal: f for f in await load_findings(db, review_id)}
    assert [(found[n].state, found[n].checked_by, found[n].edited) for n in (1, 2, 3, 4)] == [
        ("kept", "human", 0),
        ("dropped", "human", None),
        ("kept", "human", 1),
        ("skipped", "auto", None),
    ]
    assert found[3].published_text == F3 + " (reworded)"
    assert (found[2].dropped_by, found[2].why) == ("alice", why)
    [figures] = await model_figures(db)
    assert (figures.published, figures.dropped_by_people) == (2, 1)
    golden = await golden_from_reviews(db, "octo/widgets")
    [case] = golden["cases"]
    assert [label["title"] for label in case["labels"]] == ["problem 1", "problem 3"]
    assert [label["title"] for label in case["known_false_positives"]] == ["problem 2"]


@pytest.mark.backends
async def test_an_upgrade_adds_the_vetters_columns_and_older_rows_still_read(
    backend, tmp_path, request
):
    import sqlite3

    import psycopg

    from bot.records import schema
    from bot.records.postgres import PgDatabase, step_ddl
    from bot.records.reviews import get_review, load_findings
    from bot.records.sqlite import SqliteDatabase
    from tests.schema_steps import apply_sqlite_step

    [step] = [s for s in schema.STEPS if ("reviews", "vetter", "TEXT") in s.columns]
    earlier = schema.STEPS[: schema.STEPS.index(step)]
    rows = [
        "INSERT INTO pulls (repo, number) VALUES ('octo/widgets', 7)",
        "INSERT INTO reviews (pull_id, head_sha, state, created_at, updated_at)"
        " VALUES (1, 'abc', 'draft', 0, 0)",
        "INSERT INTO findings (review_id, ordinal, path, severity, title, state)"
        " VALUES (1, 1, 'a.py', 'critical', 'older', 'kept')",
    ]
    if backend == "sqlite":
        path = tmp_path / "before.sqlite3"
        with sqlite3.connect(path) as old:
            old.executescript(schema.VERSIONS)
            for s in earlier:
                apply_sqlite_step(old, s)
                old.execute("INSERT INTO schema_versions VALUES (?, ?, 0)", (s.version, s.name))
            for sql in rows:
                old.execute(sql)
        db = await SqliteDatabase.open(path)
    else:
        url = request.getfixturevalue("pg_cluster").create_database()
        with psycopg.connect(url, autocommit=True) as old:
            old.execute(schema.VERSIONS)
            for s in earlier:
                for statement in step_ddl(s):
                    old.execute(statement.sql)
                old.execute("INSERT INTO schema_versions VALUES (%s, %s, 0)", (s.version, s.name))
            for sql in rows:
                old.execute(sql)
        db = await PgDatabase.open(url)
        assert (await db.migrate()).steps == [s.version for s in schema.STEPS[len(earlier) :]]
    try:
        assert await db.schema_version() == schema.SCHEMA_VERSION
        review = await get_review(db, 1)
        assert (review.vetter, review.vetter_review_id) == (None, None)
        [older] = await load_findings(db, 1)
        assert (older.vetted_text, older.published_text, older.edited) == (None, None, None)
    finally:
        await db.close()
