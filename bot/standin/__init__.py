"""Local stand-ins for the services the bot talks to (tests and `cockpit demo`)."""

from __future__ import annotations

from aiohttp import web


async def serve_local(app: web.Application, port: int = 0) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 (a free port unless given); return the runner and base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{bound}"
