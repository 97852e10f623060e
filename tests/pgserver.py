"""A throwaway Postgres cluster in a temporary folder, for the tests and the scale-out drill.

Debian's `postgresql` package provides the server programs (under /usr/lib/postgresql/N/bin,
not on PATH). Postgres refuses to run as root, so as root the cluster belongs to the
`postgres` user the package creates. `COCKPIT_TEST_DATABASE_URL` names an existing server
instead (its user must be allowed to create databases).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

USER = "cockpit"


class Unavailable(RuntimeError):
    """No Postgres server could be found or started here (the message says why)."""


def _bindir() -> Path:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4])
    )
    if not versions:
        raise Unavailable("pg_ctl not found (Debian: apt-get install postgresql)")
    return Path(versions[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgCluster:
    """initdb + pg_ctl start on 127.0.0.1; `stop()` removes everything."""

    def __init__(self, *, durable: bool = False, max_connections: int = 300) -> None:
        self.durable = durable  # fsync on: acknowledged commits reach the disk
        self.max_connections = max_connections
        self.root: Path | None = None
        self._options = ""
        self.port = 0
        self.external = os.environ.get("COCKPIT_TEST_DATABASE_URL")

    @property
    def url(self) -> str:
        if self.external:
            return self.external
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        as_root = os.geteuid() == 0
        command = ["runuser", "-u", "postgres", "--", *argv] if as_root else list(argv)
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise Unavailable(f"{Path(argv[0]).name} failed: {result.stderr.strip()[-500:]}")

    def start(self) -> PgCluster:
        if self.external:
            return self
        bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="cockpit-pg-"))
        if os.geteuid() == 0:
            try:
                shutil.chown(self.root, "postgres", "postgres")
            except (LookupError, OSError) as exc:
                raise Unavailable(f"no postgres user to run the server as ({exc})") from exc
        self.root.chmod(0o700)
        data = self.root / "data"
        self._run(
            str(bindir / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8",
            "--no-sync", "--no-instructions",
        )  # fmt: skip
        self.port = _free_port()
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            f"-c max_connections={self.max_connections}",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._options = " ".join(options)
        self.start_server()
        return self

    def start_server(self) -> None:
        """Start the server (again, on the same port and data)."""
        assert self.root is not None
        self._run(
            str(_bindir() / "pg_ctl"), "-D", str(self.root / "data"),
            "-l", str(self.root / "server.log"), "-o", self._options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop_server(self, mode: str = "immediate") -> None:
        """Stop the server (`immediate`: as a crash or an abrupt restart looks to clients)."""
        assert self.root is not None
        data = str(self.root / "data")
        self._run(str(_bindir() / "pg_ctl"), "-D", data, "-m", mode, "-w", "stop")

    def create_database(self, template: str | None = None) -> str:
        """A new empty database (or a copy of `template`); returns its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        if self.root is None:
            return
        data = self.root / "data"
        if (data / "postmaster.pid").exists():
            with contextlib.suppress(Unavailable):
                self._run(str(_bindir() / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None
