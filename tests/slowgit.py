"""A `git` that holds one subcommand while a file exists: a tool call that is still running
when the turn is stopped or the server is killed (put first on PATH; git is real)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SlowGit:
    bin_dir: Path  # put it first on PATH
    hold: Path  # while it exists, the subcommand waits
    started: Path  # created when a held call begins

    def release(self) -> None:
        self.hold.unlink(missing_ok=True)


def slow_git(root: Path, subcommand: str = "log") -> SlowGit:
    real = shutil.which("git")
    assert real, "git is on PATH"
    bin_dir, hold, started = root / "slow-bin", root / "slow-git.hold", root / "slow-git.started"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "git"
    script.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do\n'
        f'  if [ "$arg" = "{subcommand}" ] && [ -e "{hold}" ]; then\n'
        f'    touch "{started}"\n'
        f'    while [ -e "{hold}" ]; do sleep 0.02; done\n'
        "  fi\n"
        "done\n"
        f'exec "{real}" "$@"\n'
    )
    script.chmod(0o755)
    hold.touch()
    return SlowGit(bin_dir, hold, started)
