"""A PR's read-only worktrees (per review and per session), prepared from its mirror."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.records.pulls import pull_by_id
from bot.records.reviews import conversations_of
from bot.records.types import Job, Pull
from bot.worktrees import Worktree

# The remote's HEAD (its default branch, whatever its name), fetched with every PR's refs.
DEFAULT_BRANCH = "refs/cockpit/default-branch"

if TYPE_CHECKING:
    from bot.context import Context


def worktree_name(pull: Pull, review_id: int, session_id: int | None = None) -> str:
    """A review's worktree, or one session's of it (turns of two sessions may run at once)."""
    name = f"{pull.repo}-{pull.number}-r{review_id}"
    return name if session_id is None else f"{name}-s{session_id}"


async def prepare_worktree(ctx: Context, pull: Pull, head_sha: str, name: str) -> Worktree:
    clone_url = pull.clone_url
    installation = pull.installation_id
    token_source = None
    if clone_url.startswith("https://") and installation:

        async def token_source() -> str:  # the mirror fetches blobs as the review reads them
            return await ctx.github.installation_token(installation)

    base = f"refs/heads/{pull.base_ref}"
    await ctx.mirrors.sync(
        pull.repo,
        clone_url,
        [base, f"refs/pull/{pull.number}/head"],
        await token_source() if token_source else None,
        default_branch=DEFAULT_BRANCH,
    )
    return await ctx.mirrors.add_worktree(
        pull.repo, name=name, head_sha=head_sha, base_ref=base, token=token_source
    )


async def default_branch_commit(tree: Worktree) -> str:
    """The default branch's commit as the worktree's fetch found it: where a review reads the
    team's instructions and `.gitattributes` (never from the PR)."""
    out = await tree.git(
        "rev-parse", "--verify", "--end-of-options", f"{DEFAULT_BRANCH}^{{commit}}"
    )
    return out.decode().strip()


async def cleanup_pull_job(ctx: Context, job: Job) -> None:
    """A closed PR's worktrees go, and its refs in the mirror unless it was reopened."""
    pull = await pull_by_id(ctx.db, job.payload["pull_id"])
    if pull is None:
        return
    found = await conversations_of(ctx.db, pull.id)
    names = {worktree_name(pull, review_id) for review_id, _ in found} | {
        worktree_name(pull, review_id, session_id)
        for review_id, session_id in found
        if session_id is not None
    }
    for name in sorted(names):
        await ctx.mirrors.remove_worktree(pull.repo, ctx.mirrors.tree_path(name))
    current = await pull_by_id(ctx.db, pull.id)
    if current is not None and current.state == "closed":  # not reopened meanwhile
        await ctx.mirrors.drop_pull_refs(pull.repo, [pull.number])
