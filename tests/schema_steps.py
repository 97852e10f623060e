"""Schema steps applied by hand, as an earlier release left a SQLite file (upgrade tests)."""

from __future__ import annotations

import sqlite3

from bot.records import schema


def apply_sqlite_step(conn: sqlite3.Connection, step: schema.Step) -> None:
    conn.executescript(schema.ddl(step.schema, schema.SQLITE))
    for table, column, declaration in step.columns:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    conn.executescript(schema.ddl(step.after, schema.SQLITE))
    conn.executescript(step.sqlite)


async def open_from_before(backend: str, tmp_path, request, step: schema.Step, rows=()):
    """A database as the release before `step` left it (every earlier step applied by hand,
    `rows` inserted), opened by today's code: SQLite applies the missing steps as it opens,
    Postgres by `migrate` (asserted to apply exactly the missing ones)."""
    import psycopg

    from bot.records.postgres import PgDatabase, step_ddl
    from bot.records.sqlite import SqliteDatabase

    earlier = schema.STEPS[: schema.STEPS.index(step)]
    if backend == "sqlite":
        path = tmp_path / "before.sqlite3"
        with sqlite3.connect(path) as old:
            old.executescript(schema.VERSIONS)
            for s in earlier:
                apply_sqlite_step(old, s)
                old.execute("INSERT INTO schema_versions VALUES (?, ?, 0)", (s.version, s.name))
            for sql in rows:
                old.execute(sql)
        return await SqliteDatabase.open(path)
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
    return db
