"""How `cockpit eval` names a run again (the resume hint), light to import (no model SDK)."""

from __future__ import annotations

import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Resume:
    command: str
    data_dir: Path
    temporary: bool  # the data directory is in the system's temporary folder


RUNNER = "cockpit eval run"  # what runs an eval (scripts/eval_offline.py names itself)


def resume_hint(
    batch: int | str, data_dir: Path, cwd: Path | None = None, runner: str | None = None
) -> Resume:
    """The command names `data_dir` unless it is the default (`./data`) where it runs."""
    where = Path(data_dir).expanduser().resolve()
    here = (cwd or Path.cwd()).resolve()
    command = f"{runner or RUNNER} --resume {batch}"
    if where != here / "data":
        command = f"COCKPIT_DATA_DIR={shlex.quote(str(where))} {command}"
    temporary = where.is_relative_to(Path(tempfile.gettempdir()).resolve())
    return Resume(command, where, temporary)
