"""The pull request a command runs on, and how a command says it could not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.records.pulls import find_pull, upsert_pull
from bot.records.types import Pull
from bot.review.target import Target

if TYPE_CHECKING:
    from bot.context import Context


class CommandFailed(Exception):
    """A command could not do what was asked; the message is shown on the PR."""


@dataclass
class PullRequest:
    ctx: Context
    gh: Any
    repo: dict[str, Any]
    number: int
    pull: Pull | None
    actor: str
    installation_id: int | None = None
    comment_id: int | None = None  # the comment the commands came in
    actor_id: int | None = None  # the commenter's GitHub user id

    @property
    def owner(self) -> str:
        return self.repo["owner"]["login"]

    @property
    def name(self) -> str:
        return self.repo["name"]

    @property
    def owner_repo(self) -> dict[str, Any]:
        return {"owner": self.owner, "repo": self.name, "number": self.number}

    @property
    def prefix(self) -> str:
        return self.ctx.settings.command_prefix

    async def refresh(self) -> Pull:
        """Read the PR from GitHub (a comment's payload has no head sha) and store it."""
        data = await self.gh.getitem("/repos/{owner}/{repo}/pulls/{number}", self.owner_repo)
        installation = self.installation_id or (self.pull.installation_id if self.pull else None)
        await upsert_pull(self.ctx.db, installation, self.repo, data)
        self.pull = await find_pull(self.ctx.db, self.repo, self.number)
        assert self.pull is not None
        return self.pull

    async def known(self) -> Pull:
        return self.pull or await self.refresh()

    def target(self) -> Target:
        assert self.pull is not None
        return Target(self.ctx, self.gh, self.pull)
