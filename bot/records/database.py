"""The database contract both backends implement; only the records floor runs statements."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


def marks(values: Iterable[object]) -> str:
    """A `?` for each of `values`; `NULL` for none, which `IN` matches nothing with."""
    return ", ".join("?" for _ in values) or "NULL"


class Interrupted(sqlite3.OperationalError):
    """A statement ran past its deadline and the database stopped it (SQLite: `interrupt`,
    Postgres: `statement_timeout`); its transaction was rolled back."""


class Cursor(Protocol):
    rowcount: int

    async def fetchone(self) -> Any: ...

    async def fetchall(self) -> Iterable[Any]: ...


class Connection(Protocol):
    async def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor: ...

    async def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any: ...


class Database(Protocol):
    """Statements one at a time or in a transaction, rows read by column name, a lock across
    the processes sharing the database, and the schema's steps."""

    def transaction(
        self, lock: str | None = None, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[Connection]:
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
        """Rowcount (a new row's id: `INSERT … RETURNING id` through `fetchone`)."""
        ...

    async def fetchone(self, sql: str, args: Sequence[Any] = ()) -> Any: ...

    async def fetchall(self, sql: str, args: Iterable[Any] = ()) -> list[Any]: ...

    async def ping(self) -> bool:
        """Bounded: health never hangs on it."""
        ...

    async def migrate(self) -> Any: ...

    async def schema_version(self) -> int: ...

    async def empty(self) -> bool:
        """Nothing made yet: not a table (a database another process is only starting to make)."""
        ...

    async def check_schema(self) -> None:
        """`SchemaBehind` unless this release's whole schema is there."""
        ...

    async def close(self) -> None: ...


async def delete_in_chunks(db: Database, older_than: float, chunk: int, *statements: str) -> int:
    """Run each `DELETE … WHERE key IN (SELECT … WHERE … < ? LIMIT ?)` until it deletes
    nothing, `chunk` rows at a time, so a write lock is never held long; how many went."""
    total = 0
    for statement in statements:
        while count := await db.execute(statement, (older_than, chunk)):
            total += count
    return total
