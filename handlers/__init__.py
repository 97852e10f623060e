"""The gidgethub routers, one per event family, combined into the one `router`."""

from gidgethub import routing

from handlers import authorization, comments, installation, pull_request

router = routing.Router(
    pull_request.router, comments.router, installation.router, authorization.router
)
