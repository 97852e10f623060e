"""Job handlers for the background workers, registered when the server starts."""

from __future__ import annotations

from bot.context import Context


def setup_workers(ctx: Context) -> None:
    """Attach the job kinds this build knows how to run."""
