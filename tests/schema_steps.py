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
