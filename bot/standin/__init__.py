"""Local stand-ins for the services the bot talks to (tests and `cockpit demo`)."""

from __future__ import annotations

import ssl

from aiohttp import web


async def serve_local(
    app: web.Application, port: int = 0, *, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1 (a free port unless given; over TLS with `ssl_context`);
    return the runner and base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    scheme = "https" if ssl_context else "http"
    return runner, f"{scheme}://127.0.0.1:{bound}"
