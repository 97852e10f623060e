"""What `cockpit eval run` shows as it works: a bar with ETA and cost, or a line per case."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bot.evals.messages import resume_hint
from bot.evals.runner import CaseResult, EvalResult, ModelRun, ProgressSink
from bot.evals.scoring import add_usd, case_figures
from bot.texts import OPERATOR, say

BAR_WIDTH = 24


def eta_text(elapsed: float, done: int, total: int) -> str:
    if not done or done >= total:
        return "0:00"
    seconds = round(elapsed / done * (total - done))
    return f"{seconds // 60}:{seconds % 60:02d}"


@dataclass
class ConsoleProgress(ProgressSink):
    """A bar redrawn in place on a terminal; one plain line per case elsewhere (logs, CI)."""

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
    _drawn: bool = False

    def start(self, result: EvalResult, total: int, resumed: bool) -> None:
        self.total, self.started, self.batch = total, time.monotonic(), result.batch
        self.stream.write(
            say(
                OPERATOR,
                "eval.started",
                batch=result.batch,
                resumed=resumed,
                models=[run.model for run in result.runs],
                provider=result.options.provider,
                cases=total // max(len(result.runs), 1),
                verify=result.options.verify,
                verifier=result.runs[0].verify_provider if result.runs else None,
                judge=result.judge.name,
                resume=resume_hint(result.batch, self.data_dir or Path("data"), runner=self.runner),
            )
            + "\n"
        )
        self.stream.flush()

    def case_done(self, run: ModelRun, result: CaseResult) -> None:
        self.done += 1
        self.failed += bool(result.error)
        figures = case_figures(result, run.final, verify=True)  # its whole spend
        self.usd = add_usd(self.usd, figures.usd)
        if self.tty:
            filled = round(BAR_WIDTH * self.done / max(self.total, 1))
            line = say(
                OPERATOR,
                "eval.bar",
                bar="█" * filled + "░" * (BAR_WIDTH - filled),
                done=self.done,
                total=self.total,
                eta=eta_text(time.monotonic() - self.started, self.done, self.total),
                usd=self.usd,
                failed=self.failed,
                model=run.model,
                case=result.case.id,
            )
            self.stream.write("\r\033[K" + line)
            self._drawn = True
        else:
            self.stream.write(
                say(
                    OPERATOR,
                    "eval.case",
                    done=self.done,
                    total=self.total,
                    model=run.model,
                    result=result,
                    counts=figures,
                    refuted=figures.refuted,
                    usd=figures.usd,
                )
                + "\n"
            )
        self.stream.flush()

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
