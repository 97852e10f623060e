"""`github_app_authorization`: a person revoked the App's authorization; their tokens go."""

from __future__ import annotations

from typing import Any

from gidgethub import routing, sansio

from bot.context import Context

router = routing.Router()


@router.register("github_app_authorization", action="revoked")
async def revoked(event: sansio.Event, gh: Any, *args: Any, ctx: Context, **kwargs: Any) -> None:
    user_id = (event.data.get("sender") or {}).get("id")
    if isinstance(user_id, int) and ctx.user_tokens is not None:
        await ctx.user_tokens.forget(user_id)
