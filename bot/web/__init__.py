"""The cockpit page: `GET /` (inbox), `GET /r/{owner}/{repo}/pull/{n}` (a draft and its
actions), `GET /stats` (figures), for signed-in people, each seeing only the repositories
their sign-in reaches (`access.py`); the session cookie and CSRF (`session.py`); charts drawn
on the server (`charts.py`); queries in `bot/records/pages.py`; templates in `templates/web/`."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from bot.context import Context


def add_page(app: web.Application, context: Callable[[], Context]) -> None:
    from bot.web.views import PageRoutes

    PageRoutes(context).add_to(app)
