"""The one list of PR commands (templates/commands.toml): help, the status comment, the README."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources

from bot.records.vocab import ACTIVE, ReviewState

# Rate-limited per PR and per person: each starts a model run.
STARTS_MODEL = frozenset({"review", "codex-review", "ask", "send-back"})


@dataclass(frozen=True)
class Spec:
    name: str
    what: str
    args: str = ""

    @property
    def usage(self) -> str:
        return f"{self.name} {self.args}".strip()

    @property
    def starts_model(self) -> bool:
        return self.name in STARTS_MODEL


_DECLARED = tomllib.loads(resources.files("templates").joinpath("commands.toml").read_text())
COMMANDS = tuple(Spec(name, **row) for name, row in _DECLARED.items())
BY_NAME = {spec.name: spec for spec in COMMANDS}


def suggested(state: str | None, stale: bool = False, cross_review: bool = False) -> list[str]:
    """The commands that make sense now, for a PR whose latest review is in `state` (and
    whose draft a second AI is critiquing, when `cross_review`)."""
    if state is None:
        return ["review", "help"]
    if state in ACTIVE:
        return ["status", "stop"]
    if state == ReviewState.DRAFT and not stale and cross_review:
        return ["ask <message>", "send-back", "end", "approve", "drop F1", "help"]
    if state == ReviewState.DRAFT and not stale:
        return [
            "approve",
            "approve F1 F2 --comment",
            "vet",
            "drop F1",
            "codex-review",
            "review",
            "help",
        ]
    return ["review", "help"]
