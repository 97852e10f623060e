"""The GitHub stand-in's "Sign in with GitHub": GitHub App user authorization (web flow).

As GitHub does it: `GET /login/oauth/authorize` (a page asking the signed-in web user,
`GitHubStandin.web_user`, to authorize the App, then a redirect to a registered callback URL
with a one-time `code` and the `state`; straight back when they authorized it before);
`POST /login/oauth/access_token` (the code exchange and `grant_type=refresh_token`; errors
answered 200 with an `error` word); codes single use within 10 minutes; user access tokens
`ghu_…` for 8 hours, refresh tokens `ghr_…` for 6 months, each used once (a refresh
invalidates the old pair). `GET /user` answers for a user token. Every route can ask
`user_of(request)` who a request is authenticated as."""

from __future__ import annotations

import html
import itertools
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from aiohttp import web

CODE_SECONDS = 600
ACCESS_SECONDS = 8 * 3600
REFRESH_SECONDS = 15_897_600  # 184 days, what GitHub says for `refresh_token_expires_in`


def _token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")[:36]


@dataclass
class Grant:
    login: str
    client_id: str
    expires: float
    redirect_uri: str = ""  # a code's
    pair: str = ""  # a token's: the access and refresh token issued together


class OAuthStandin:
    def __init__(self, github: Any) -> None:
        self.github = github
        # The stand-in's own App's OAuth client (Apps created by the manifest flow have theirs).
        self.client_id = "Iv1." + secrets.token_hex(8)
        self.client_secret = secrets.token_hex(20)
        self.callback_urls: list[str] = []  # the App's registered callback URLs (strict)
        self.user_ids: dict[str, int] = {}
        self._ids = itertools.count(7001)
        self.codes: dict[str, Grant] = {}
        self.access: dict[str, Grant] = {}
        self.refresh: dict[str, Grant] = {}
        self.authorized: set[tuple[str, str]] = set()  # (login, client_id)
        self.exchanges = 0  # code exchanges answered
        self.refreshes = 0  # refresh requests that reached the token endpoint
        self.code_ttl = CODE_SECONDS
        self.access_ttl = ACCESS_SECONDS
        self.refresh_ttl = REFRESH_SECONDS

    # -- for tests --------------------------------------------------------------------------

    def user_id(self, login: str) -> int:
        """`login`'s GitHub user id (stable within this stand-in)."""
        if login not in self.user_ids:
            self.user_ids[login] = next(self._ids)
        return self.user_ids[login]

    def user_token_for(self, login: str) -> str:
        """A user access token of `login` for this App, as if they had signed in."""
        self.authorized.add((login, self.client_id))
        return self._issue(login, self.client_id)["access_token"]

    def user_of(self, request: web.Request) -> str | None:
        """The user a request is authenticated as (a valid `ghu_` token), else None."""
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() not in ("token", "bearer"):
            return None
        grant = self.access.get(credential.strip())
        if grant is None or grant.expires < time.time():
            return None
        return grant.login

    def expire_access(self, login: str) -> None:
        """`login`'s access tokens expire now (their refresh tokens still work)."""
        for grant in self.access.values():
            if grant.login == login:
                grant.expires = time.time() - 1

    def revoke(self, login: str) -> dict[str, Any]:
        """`login` revokes the App's authorization in their settings: every token of theirs
        stops working; returns the `github_app_authorization` `revoked` payload GitHub sends."""
        for table in (self.access, self.refresh):
            for token in [t for t, g in table.items() if g.login == login]:
                del table[token]
        self.authorized = {a for a in self.authorized if a[0] != login}
        return {
            "action": "revoked",
            "sender": {
                "login": login,
                "id": self.user_id(login),
                "node_id": f"U_{self.user_id(login)}",
                "type": "User",
                "site_admin": False,
            },
        }

    # -- routes -------------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/login/oauth/authorize", self._authorize_page)
        app.router.add_post("/login/oauth/authorize", self._authorize)
        app.router.add_post("/login/oauth/access_token", self._access_token)

    def _clients(self) -> dict[str, tuple[str, list[str]]]:
        """client id → (secret, callback URLs), this App's and those the manifest flow made."""
        clients = {self.client_id: (self.client_secret, self.callback_urls)}
        for created in self.github.created_apps:
            clients[created["client_id"]] = (
                created["client_secret"],
                list(created.get("callback_urls") or []),
            )
        return clients

    def _redirect(self, query: Any) -> tuple[str, str] | web.Response:
        """(client id, redirect URI) of an authorize request, or GitHub's error page."""
        client_id = str(query.get("client_id", ""))
        client = self._clients().get(client_id)
        if client is None:
            return web.Response(status=404, text="Not Found", content_type="text/html")
        callbacks = client[1]
        redirect_uri = str(query.get("redirect_uri") or (callbacks[0] if callbacks else ""))
        if redirect_uri not in callbacks:
            return web.Response(
                status=400,
                content_type="text/html",
                text="<h1>The redirect_uri is not associated with this application.</h1>",
            )
        return client_id, redirect_uri

    async def _authorize_page(self, request: web.Request) -> web.StreamResponse:
        found = self._redirect(request.query)
        if isinstance(found, web.Response):
            return found
        client_id, redirect_uri = found
        login = self.github.web_user
        state = request.query.get("state", "")
        if (login, client_id) in self.authorized:
            raise web.HTTPFound(self._back(login, client_id, redirect_uri, state))
        fields = {"client_id": client_id, "redirect_uri": redirect_uri, "state": state}
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
            for name, value in fields.items()
        )
        page = (
            "<!doctype html><html><head><meta charset=utf-8><title>Authorize application</title>"
            f"</head><body><h1>Authorize PR Cockpit</h1><p>Signed in as {html.escape(login)}</p>"
            f'<form action="/login/oauth/authorize" method="post">{hidden}'
            '<button id="authorize" type="submit">Authorize</button></form></body></html>'
        )
        return web.Response(text=page, content_type="text/html")

    async def _authorize(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        found = self._redirect(form)
        if isinstance(found, web.Response):
            return found
        client_id, redirect_uri = found
        login = self.github.web_user
        self.authorized.add((login, client_id))
        raise web.HTTPFound(self._back(login, client_id, redirect_uri, str(form.get("state", ""))))

    def _back(self, login: str, client_id: str, redirect_uri: str, state: str) -> str:
        code = secrets.token_hex(10)
        self.codes[code] = Grant(login, client_id, time.time() + self.code_ttl, redirect_uri)
        query = {"code": code, **({"state": state} if state else {})}
        sep = "&" if "?" in redirect_uri else "?"
        return f"{redirect_uri}{sep}{urlencode(query)}"

    async def _access_token(self, request: web.Request) -> web.Response:
        raw = await request.read()
        fields: dict[str, str] = dict(request.query)
        if request.content_type == "application/json" and raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = {}
            fields |= {k: str(v) for k, v in body.items()} if isinstance(body, dict) else {}
        else:
            fields |= dict(parse_qsl(raw.decode(errors="replace")))
        self.github._record(request, request.path, {k: v for k, v in fields.items()})
        await self.github.gate.wait()
        if (failed := self.github._failed(request, request.path)) is not None:
            return failed
        answer = self._exchange(fields)
        if "application/json" in request.headers.get("Accept", ""):
            return web.json_response(answer)
        return web.Response(
            text=urlencode({k: str(v) for k, v in answer.items()}),
            content_type="application/x-www-form-urlencoded",
        )

    def _exchange(self, fields: dict[str, str]) -> dict[str, Any]:
        client_id = fields.get("client_id", "")
        client = self._clients().get(client_id)
        if client is None or not secrets.compare_digest(fields.get("client_secret", ""), client[0]):
            return _oauth_error("incorrect_client_credentials")
        now = time.time()
        if fields.get("grant_type") == "refresh_token":
            self.refreshes += 1
            grant = self.refresh.pop(fields.get("refresh_token", ""), None)
            if grant is None or grant.expires < now or grant.client_id != client_id:
                return _oauth_error("bad_refresh_token")
            # A refresh invalidates the old pair.
            for token in [t for t, g in self.access.items() if g.pair == grant.pair]:
                del self.access[token]
            return self._issue(grant.login, client_id)
        grant = self.codes.pop(fields.get("code", ""), None)
        if grant is None or grant.expires < now or grant.client_id != client_id:
            return _oauth_error("bad_verification_code")
        if fields.get("redirect_uri") and fields["redirect_uri"] != grant.redirect_uri:
            return _oauth_error("redirect_uri_mismatch")
        self.exchanges += 1
        return self._issue(grant.login, client_id)

    def _issue(self, login: str, client_id: str) -> dict[str, Any]:
        now = time.time()
        access, refresh = _token("ghu_"), _token("ghr_")
        pair = secrets.token_hex(6)
        self.access[access] = Grant(login, client_id, now + self.access_ttl, pair=pair)
        self.refresh[refresh] = Grant(login, client_id, now + self.refresh_ttl, pair=pair)
        return {
            "access_token": access,
            "expires_in": self.access_ttl,
            "refresh_token": refresh,
            "refresh_token_expires_in": self.refresh_ttl,
            "token_type": "bearer",
            "scope": "",
        }

    # -- REST -----------------------------------------------------------------------------------

    async def get_user(self, request: web.Request, body: dict) -> web.Response:
        """`GET /user`: the authenticated user (a user token; an App's installation token is
        refused as GitHub does)."""
        login = self.user_of(request)
        if login is None:
            return web.json_response(
                {"message": "Resource not accessible by integration", "status": "403"},
                status=403,
            )
        user_id = self.user_id(login)
        return web.json_response(
            {
                "login": login,
                "id": user_id,
                "node_id": f"U_{user_id}",
                "type": "User",
                "site_admin": False,
                "html_url": f"{self.github.web_url}/{login}",
            }
        )


def _oauth_error(word: str) -> dict[str, str]:
    descriptions = {
        "incorrect_client_credentials": "The client_id and/or client_secret passed are incorrect.",
        "bad_verification_code": "The code passed is incorrect or expired.",
        "bad_refresh_token": "The refresh token passed is incorrect or expired.",
        "redirect_uri_mismatch": "The redirect_uri MUST match the registered callback URL.",
    }
    return {"error": word, "error_description": descriptions[word]}
