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


PROBE = aiohttp.ClientTimeout(total=5)  # a listener that never answers is not our server


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
        self.env = {
            **{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")},
            **env,
        }
        self.listen_flags = flags
        self._listen_on(free_port())
        if data_dir is not None:
            self.env["COCKPIT_DATA_DIR"] = str(data_dir)
        self.cwd = cwd
        self.command = command or [sys.executable, "-m", "bot"]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def _listen_on(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        listen = {"host": "127.0.0.1", "port": str(port)}
        self.flags = [f"--{k}={v}" for k, v in listen.items()] if self.listen_flags else []
        if not self.listen_flags:
            self.env.update({f"COCKPIT_{k.upper()}": v for k, v in listen.items()})

    async def start(self, timeout: float = 60.0) -> None:  # a loaded machine starts slowly
        # The free port was free when picked; another process of a parallel run may take it
        # before the server binds it (an outgoing connection's ephemeral port, too): pick again.
        for _ in range(3):
            logged = self.log_path.stat().st_size if self.log_path.exists() else 0
            try:
                return await self._start(timeout)
            except RuntimeError:
                told = self.log_path.read_bytes()[logged:].decode(errors="replace")
                if f":{self.port} is in use" not in told:
                    raise
                self._listen_on(free_port())
        await self._start(timeout)

    async def _start(self, timeout: float) -> None:
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
                    async with session.get(f"{self.url}/healthz", timeout=PROBE) as response:
                        if response.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
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
