"""A git "dumb HTTP" server on 127.0.0.1 that requires an installation token, like GitHub."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

from aiohttp import web

from bot.standin import serve_local


class TokenGitServer:
    def __init__(self, repos: Path, token: str) -> None:
        self.repos = repos
        self.expected = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
        self.authorised = 0
        self.refused = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> str:
        app = web.Application()
        app.router.add_get("/{path:.+}", self._serve)
        self._runner, self.url = await serve_local(app, ssl_context=ssl_context)
        return self.url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != self.expected:
            self.refused += 1
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})
        self.authorised += 1
        target = (self.repos / request.match_info["path"]).resolve()
        if not target.is_relative_to(self.repos.resolve()) or not target.is_file():
            return web.Response(status=404)
        return web.FileResponse(target)
