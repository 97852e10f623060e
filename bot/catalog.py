"""The one list of commands: help, the status comment's command line and the README's table."""

from __future__ import annotations

from dataclasses import dataclass

from bot.records.vocab import ACTIVE, ReviewState


@dataclass(frozen=True)
class Spec:
    name: str
    args: str
    what: str
    starts_model: bool = False  # rate-limited per PR and per person

    @property
    def usage(self) -> str:
        return f"{self.name} {self.args}".strip()


COMMANDS = (
    Spec("help", "", "the command list for this PR's current state"),
    Spec("status", "", "refresh the status comment"),
    Spec(
        "review",
        "[--provider claude|codex|chat] [--verify]",
        "review the current head now (supersedes older work)",
        starts_model=True,
    ),
    Spec(
        "drop",
        "F2 [F5 …] [why]",
        "remove findings from the draft (pending review, check run and status follow); the"
        " reason and who dropped them are kept, and a dropped finding is never raised again on"
        " this PR (needs `approve_permission`, like `approve`)",
    ),
    Spec(
        "approve",
        "[F1 F3 …] [--request-changes | --comment]",
        "publish the draft, or only the listed findings",
    ),
    Spec(
        "codex-review",
        "[instructions] [--with claude|codex|chat] [--restart]",
        "a second AI (the other provider) critiques the current draft",
        starts_model=True,
    ),
    Spec(
        "ask",
        "<message>",
        "continue the active cross-review, or ask the draft's reviewer",
        starts_model=True,
    ),
    Spec(
        "send-back",
        "[note]",
        "send the critique back to the first reviewer, which revises the draft (needs"
        " `approve_permission`, like `approve`: the revision may withdraw findings)",
        starts_model=True,
    ),
    Spec("end", "", "end the active cross-review"),
    Spec("stop", "", "cancel the running review or session turn, and drop queued turns"),
    Spec("config", "", "the repository's effective configuration, and where each value comes from"),
)
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
        return ["approve", "approve F1 F2 --comment", "drop F1", "codex-review", "review", "help"]
    return ["review", "help"]
