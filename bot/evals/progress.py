"""What `cockpit eval run` shows as it works: a one-line bar on a terminal, else a line per case."""

from __future__ import annotations

import shlex
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bot.evals.results import CaseFigures, CaseResult, EvalResult, ModelRun, ProgressSink
from bot.evals.scoring import add_usd
from bot.texts import OPERATOR, say

BAR_WIDTH = 24
RUNNER = "cockpit eval run"  # what runs an eval (scripts/eval_offline.py names itself)


@dataclass(frozen=True)
class Resume:
    command: str
    data_dir: Path
    temporary: bool  # the data directory is in the system's temporary folder


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


def eta_text(elapsed: float, done: int, total: int) -> str:
    if not done or done >= total:
        return "0:00"
    seconds = round(elapsed / done * (total - done))
    return f"{seconds // 60}:{seconds % 60:02d}"


@dataclass
class ConsoleProgress(ProgressSink):
    stream: TextIO
    tty: bool
    total: int = 0
    done: int = 0
    failed: int = 0
    usd: float | None = 0.0
    started: float = field(default_factory=time.monotonic)
    batch: int | None = None
    data_dir: Path | None = None  # where the run's results are stored (to resume it)
    runner: str | None = None  # the command that resumes it (default: `cockpit eval run`)

    def start(self, result: EvalResult, total: int, resumed: bool) -> None:
        self.total, self.started, self.batch = total, time.monotonic(), result.batch
        resume = resume_hint(result.batch, self.data_dir or Path("data"), runner=self.runner)
        cases = total // max(len(result.runs), 1)
        said = say(
            OPERATOR, "eval.started", result=result, cases=cases, resumed=resumed, resume=resume
        )
        self._write(said + "\n")

    def case_done(self, run: ModelRun, result: CaseResult, figures: CaseFigures) -> None:
        self.done += 1
        self.failed += bool(result.error)
        self.usd = add_usd(self.usd, figures.usd)
        if not self.tty:
            line = say(
                OPERATOR, "eval.case", progress=self, run=run, result=result, figures=figures
            )
            self._write(line + "\n")
            return
        filled = round(BAR_WIDTH * self.done / max(self.total, 1))
        bar = "█" * filled + "░" * (BAR_WIDTH - filled)
        eta = eta_text(time.monotonic() - self.started, self.done, self.total)
        line = say(OPERATOR, "eval.bar", progress=self, bar=bar, eta=eta, run=run, result=result)
        self._write("\r\033[K" + line)

    def finish(self) -> None:
        if self.tty and self.done:  # the bar's line ends
            self._write("\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
