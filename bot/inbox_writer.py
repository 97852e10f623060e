"""The inbox writer: a small process that commits deliveries for the webhook server.

The server verifies a delivery, frames it on a socket, and answers GitHub once this process
says the delivery (with its processing job) is committed. Whatever has arrived while the last
commit ran is the next batch (group commit: one fsync for many deliveries).

Running the commit in its own process keeps SQLite and compression off the server's
interpreter lock: measured with wrk at 64 connections, the same commit on a thread of the
server acknowledged about a third fewer deliveries per second.

Wire format, server → writer, one frame per delivery:
    !II (header length, body length), header (JSON list), body (raw bytes)
    header = [delivery id, event, action, installation id, repo, job row (INSERT_SQL values)]
writer → server: one byte per frame, in order: 1 stored and its job can run now, 3 stored and
its job waits behind an earlier one of its PR, 0 seen before, 2 commit failed.

    python -m bot.inbox_writer FD DATABASE
"""

from __future__ import annotations

import signal
import socket
import sqlite3
import struct
import sys
import time
import zlib
from collections.abc import Sequence
from typing import Any

import orjson

FRAME = struct.Struct("!II")
STORED, WAITING, SEEN, FAILED = 1, 3, 0, 2
MAX_FRAME = 26 * 1024 * 1024  # the server refuses bodies over 25 MiB before framing them

DELIVERY_SQL = (
    "INSERT INTO deliveries (id, event, action, installation_id, repo, body, received_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
JOB_SQL = (
    "INSERT INTO jobs (kind, queue, key, payload, max_attempts, run_after, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def encode(header: Sequence[Any], body: bytes) -> bytes:
    head = orjson.dumps(list(header))
    return FRAME.pack(len(head), len(body)) + head + body


def decode(buffer: bytearray) -> tuple[list[tuple[list[Any], bytes]], int]:
    """The complete frames at the start of `buffer`, and how many bytes they used."""
    frames, pos = [], 0
    while len(buffer) - pos >= FRAME.size:
        head_len, body_len = FRAME.unpack_from(buffer, pos)
        if head_len + body_len > MAX_FRAME:
            raise ValueError("frame too large")
        end = pos + FRAME.size + head_len + body_len
        if len(buffer) < end:
            break
        start = pos + FRAME.size
        header = orjson.loads(bytes(buffer[start : start + head_len]))
        frames.append((header, bytes(buffer[start + head_len : end])))
        pos = end
    return frames, pos


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # a 202 survives power loss, not just a crash
    conn.execute("PRAGMA busy_timeout=0")  # see begin()
    # Checkpoints (copying the WAL into the database file) happen on the server's
    # connection, never inside an acknowledgement's commit.
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


def begin(conn: sqlite3.Connection, patience: float = 5.0) -> None:
    """BEGIN IMMEDIATE, waiting out the server's own short write transactions.

    SQLite's busy handler sleeps 1, 2, 5, 10 … ms between tries: each collision with a
    worker's commit would cost an acknowledgement that much. Retrying every 0.1 to 1 ms keeps
    the wait near the length of the transaction it waits for.
    """
    deadline = time.monotonic() + patience
    pause = 0.0001
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.001)


def commit(conn: sqlite3.Connection, frames: list[tuple[list[Any], bytes]]) -> list[int]:
    """Which deliveries are new; the new ones and their jobs are committed together."""
    now = time.time()
    ids = list({header[0] for header, _ in frames})
    # Compressed before taking the write lock: the lock is held only for the inserts and
    # the sync, which leaves the server's own writes (job claims, outcomes) room between
    # group commits.
    packed = [zlib.compress(body, 1) for _, body in frames]
    begin(conn)
    try:
        marks = ",".join("?" * len(ids))
        seen = {
            row[0] for row in conn.execute(f"SELECT id FROM deliveries WHERE id IN ({marks})", ids)
        }
        results, fresh, deliveries, jobs = [], [], [], []
        for n, (((delivery_id, event, action, installation, repo, job), _), body) in enumerate(
            zip(frames, packed, strict=True)
        ):
            if delivery_id in seen:
                results.append(SEEN)
                continue
            seen.add(delivery_id)
            results.append(STORED)
            fresh.append(n)
            deliveries.append((delivery_id, event, action, installation, repo, body, now))
            jobs.append(tuple(job))
        conn.executemany(DELIVERY_SQL, deliveries)
        last_id = conn.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()[0]
        conn.executemany(JOB_SQL, jobs)
        # The schema's triggers put a job behind an earlier one of its key ('waiting'): the
        # server wakes its workers only for jobs that can run.
        states = conn.execute("SELECT state FROM jobs WHERE id > ? ORDER BY id", (last_id,))
        for n, (state,) in zip(fresh, states, strict=True):
            if state == "waiting":
                results[n] = WAITING
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return results


def serve(sock: socket.socket, conn: sqlite3.Connection) -> None:
    """Until the server closes its end: read what has arrived, commit it, answer."""
    buffer = bytearray()
    while True:
        chunk = sock.recv(1 << 20)
        if not chunk:
            return
        buffer += chunk
        frames, used = decode(buffer)
        del buffer[:used]
        if not frames:
            continue
        try:
            results = commit(conn, frames)
        except Exception as exc:  # the server answers 503: nothing was acknowledged
            print(f"inbox writer: commit failed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
            results = [FAILED] * len(frames)
        sock.sendall(bytes(results))


def main(argv: list[str]) -> int:
    # The server decides when this process ends (it closes the socket); a Ctrl-C sent to
    # the whole process group must not cut a commit short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    fd, path = int(argv[0]), argv[1]
    with socket.socket(fileno=fd) as sock:
        conn = connect(path)
        try:
            serve(sock, conn)
        finally:
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
