"""The GitHub stand-in's lists of what a user token reaches (the cockpit page's access):
`GET /user/installations` and `GET /user/installations/{id}/repositories`, as strict as
GitHub: a user token only (an installation token or none: 403/401), the App's installations
where the person can see at least one repository, only the repositories they can see, paged
(`per_page` ≤ 100, `page`)."""

from __future__ import annotations

from typing import Any

from aiohttp import web


class UserAccessStandin:
    def __init__(self, github: Any) -> None:
        self.github = github
        self.access: dict[str, set[str]] = {}  # login -> the full names they can see

    # -- for tests ----------------------------------------------------------------------------

    def grant(self, login: str, *repos: str) -> None:
        """`login` can see these repositories (as a collaborator or a member would)."""
        self.access.setdefault(login, set()).update(repos)

    def revoke(self, login: str, *repos: str) -> None:
        self.access.get(login, set()).difference_update(repos)

    # -- REST ---------------------------------------------------------------------------------

    def _visible(self, login: str) -> list[Any]:
        seen = self.access.get(login, set())
        return sorted(
            (r for r in self.github.repos.values() if r.full_name in seen), key=lambda r: r.id
        )

    async def installations(self, request: web.Request, body: dict) -> web.Response:
        login = self._user(request)
        if isinstance(login, web.Response):
            return login
        ids = sorted({r.installation_id for r in self._visible(login)})
        items = [_installation(self.github, i) for i in ids]
        page = _page(request, items)
        if isinstance(page, web.Response):
            return page
        return web.json_response({"total_count": len(items), "installations": page})

    async def repositories(
        self, request: web.Request, body: dict, installation: str
    ) -> web.Response:
        login = self._user(request)
        if isinstance(login, web.Response):
            return login
        repos = [r for r in self._visible(login) if r.installation_id == int(installation)]
        if not repos:  # not an installation this person can reach
            return web.json_response({"message": "Not Found", "status": "404"}, status=404)
        items = [
            {
                "id": r.id,
                "name": r.name,
                "full_name": r.full_name,
                "private": r.private,
                "owner": {"login": r.owner, "type": "Organization"},
                "html_url": f"{self.github.web_url}/{r.full_name}",
            }
            for r in repos
        ]
        page = _page(request, items)
        if isinstance(page, web.Response):
            return page
        return web.json_response({"total_count": len(items), "repositories": page})

    def _user(self, request: web.Request) -> str | web.Response:
        credential = request.headers.get("Authorization", "").partition(" ")[2].strip()
        login = self.github.user_of(request)
        if login is not None:
            return login
        if credential in self.github.tokens:  # an installation token: not a person
            message, status = "Resource not accessible by integration", 403
        else:
            message, status = ("Bad credentials" if credential else "Requires authentication"), 401
        return web.json_response({"message": message, "status": str(status)}, status=status)


def _installation(github: Any, installation_id: int) -> dict[str, Any]:
    owner = next(
        (r.owner for r in github.repos.values() if r.installation_id == installation_id), ""
    )
    return {
        "id": installation_id,
        "app_id": int(github.app_id),
        "app_slug": github.slug,
        "target_type": "Organization",
        "account": {"login": owner, "type": "Organization"},
        "repository_selection": "selected",
        "permissions": dict(github.app_permissions),
    }


def _page(request: web.Request, items: list[dict]) -> list[dict] | web.Response:
    try:
        per_page = int(request.query.get("per_page", "30"))
        page = int(request.query.get("page", "1"))
    except ValueError:
        return web.json_response({"message": "Invalid request", "status": "422"}, status=422)
    per_page = min(max(per_page, 1), 100)
    start = (max(page, 1) - 1) * per_page
    return items[start : start + per_page]
