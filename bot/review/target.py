"""Where on GitHub a PR's review goes: its repository, number and the installation's client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.records.types import Pull, Review
from bot.redaction import redact
from bot.texts import fit, repo_url_of

if TYPE_CHECKING:
    from bot.context import Context


@dataclass
class Target:
    ctx: Context
    gh: Any
    pull: Pull

    @classmethod
    def of(cls, ctx: Context, pull: Pull) -> Target:
        return cls(ctx, ctx.github.installation_api(pull.installation_id), pull)

    @property
    def repo_url(self) -> str | None:
        """The repository's page on GitHub: the one place model text may link to."""
        return repo_url_of(self.pull.html_url)

    @property
    def owner_repo(self) -> dict[str, Any]:
        owner, name = self.pull.repo.split("/", 1)
        return {"owner": owner, "repo": name, "number": self.pull.number}

    async def comment(self, body: str) -> int:
        created = await self.gh.post(
            "/repos/{owner}/{repo}/issues/{number}/comments",
            self.owner_repo,
            data={"body": fit(redact(body))},
        )
        return int(created["id"])

    async def edit_comment(self, comment_id: int, body: str) -> None:
        """A comment of the bot's edited in place (a sign-in link's reply, once done)."""
        await self.gh.patch(
            "/repos/{owner}/{repo}/issues/comments/{id}",
            {**self.owner_repo, "id": comment_id},
            data={"body": fit(redact(body))},
        )

    def status_link(self, review: Review) -> str | None:
        if not (self.pull.html_url and review.status_comment_id):
            return None
        return f"{self.pull.html_url}#issuecomment-{review.status_comment_id}"
