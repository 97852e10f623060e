"""Run `cockpit serve` as a real subprocess (for crash tests and benchmarks)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """`cockpit serve` on a free loopback port. `data_dir=None` leaves COCKPIT_DATA_DIR
    unset (the default, `./data`, under `cwd`); `command` runs another installation's
    `cockpit` (a wheel's venv) instead of this checkout's `python -m bot`; `flags` gives
    the listen address as `--host`/`--port` rather than in the environment."""

    def __init__(
        self,
        env: dict[str, str],
        data_dir: Path | None,
        log_path: Path,
        *,
        role: str = "all",
        cwd: Path | None = None,
        command: list[str] | None = None,
        flags: bool = False,
    ) -> None:
        self.role = role
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        listen = {"host": "127.0.0.1", "port": str(self.port)}
        self.env = {
            **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
            **env,
            **({} if flags else {f"COCKPIT_{k.upper()}": v for k, v in listen.items()}),
        }
        self.flags = [f"--{k}={v}" for k, v in listen.items()] if flags else []
        if data_dir is not None:
            self.env["COCKPIT_DATA_DIR"] = str(data_dir)
        self.cwd = cwd
        self.command = command or [sys.executable, "-m", "bot"]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    async def start(self, timeout: float = 60.0) -> None:  # a loaded machine starts slowly
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.command, "serve", "--role", self.role, *self.flags],
            env=self.env,
            cwd=self.cwd,
            stdout=log,
            stderr=log,
        )
        deadline = asyncio.get_running_loop().time() + timeout
        async with aiohttp.ClientSession() as session:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
                try:
                    async with session.get(f"{self.url}/healthz") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError("server did not become healthy")
                await asyncio.sleep(0.05)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
