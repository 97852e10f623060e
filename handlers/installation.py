"""`installation` events: forget everything about an uninstalled installation."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.context import Context
from bot.review.lifecycle import forget_installation

router = routing.Router()


@router.register("installation", action="deleted")
async def uninstalled(
    event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any
) -> None:
    await forget_installation(ctx, event.data["installation"]["id"])
