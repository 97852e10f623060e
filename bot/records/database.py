"""The database contract both backends implement (`bot.records.sqlite.SqliteDatabase` and
`bot.records.postgres.PgDatabase`, one of them opened by `bot.backend.open_backend`). Only
the records floor runs statements; code above it calls the floor's functions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


def marks(values: Iterable[object]) -> str:
    """A statement's `?` for each of `values` (`IN (?, ?)`); `NULL` for none, which `IN`
    matches nothing with."""
    return ", ".join("?" for _ in values) or "NULL"


class Interrupted(sqlite3.OperationalError):
    """A statement ran past its deadline and the database stopped it (SQLite: `interrupt`,
    Postgres: `statement_timeout`); its transaction was rolled back."""


class Cursor(Protocol):
    """What a statement in a transaction returns."""

    rowcount: int
    lastrowid: int | None

    async def fetchone(self) -> Any: ...

    async def fetchall(self) -> Iterable[Any]: ...


class Connection(Protocol):
    """A transaction's connection."""

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any: ...


class Database(Protocol):
    """Statements one at a time or in a transaction, rows read by column name (records are
    built from them by `from_row`), a lock across whatever processes share the database, and
    the schema's steps."""

    def transaction(
        self, lock: str | None = None, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """One transaction; `lock` names what other processes must not change meanwhile.
        With `timeout`, a statement still running that many seconds after the transaction
        began is stopped (`Interrupted`), and so is one whose caller is cancelled: the
        connection is free again at once, not when the statement would have ended."""
        ...

    def hold(self, key: str) -> AbstractAsyncContextManager[None]:
        """One holder of `key` at a time, for work that talks to GitHub (no transaction is
        kept open)."""
        ...

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> int:
        """Run one statement; rowcount, or the new row's id for an INSERT."""
        ...

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> Any: ...

    async def fetchall(self, sql: str, args: Iterable[Any] = ()) -> list[Any]: ...

    async def ping(self) -> bool:
        """Whether the database answers (bounded: health never hangs on it)."""
        ...

    async def migrate(self) -> Any:
        """Apply the schema's missing steps (`bot.records.schema.Migrated` says what it did)."""
        ...

    async def schema_version(self) -> int: ...

    async def empty(self) -> bool:
        """Nothing made yet: not a table (a database another process is only starting to
        make)."""
        ...

    async def check_schema(self) -> None:
        """`bot.records.schema.SchemaBehind` unless this release's whole schema is there."""
        ...

    async def close(self) -> None: ...


async def delete_in_chunks(db: Database, older_than: float, chunk: int, *statements: str) -> int:
    """Run each `DELETE … WHERE key IN (SELECT … WHERE … < ? LIMIT ?)` in turn until it
    deletes nothing, `chunk` rows at a time, so a write lock is never held long; returns how
    many went."""
    total = 0
    for statement in statements:
        while count := await db.execute(statement, (older_than, chunk)):
            total += count
    return total
