"""The server's "Sign in with GitHub" routes: `GET /auth/github/login` (to GitHub's authorize
page with a one-time `state`), `GET /auth/github/callback` (the state checked and used, the
code exchanged, `GET /user`, the token stored and the job the link carried enqueued, in one
transaction), `POST /auth/logout`. Pages never show a token, a code or the state."""

from __future__ import annotations

import hmac
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from bot.auth import LOGIN_PATH, missing_settings, oauth
from bot.auth.session import csrf_ok, end_session, read_session, secure, start_session
from bot.auth.state import STATE_SECONDS, BadState, State, new_state, read_state
from bot.auth.tokens import UserTokens
from bot.config import Settings
from bot.queue import REVIEWS, JobQueue
from bot.records.database import Database
from bot.records.user_tokens import state_used, use_state
from bot.texts import PEOPLE, render, say

log = logging.getLogger(__name__)

CALLBACK_PATH = oauth.CALLBACK_PATH
LOGOUT_PATH = "/auth/logout"
FLOW_COOKIE = "cockpit_signin"  # this browser's sign-in in progress: the state's nonce
_CODE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_ERROR_WORD = re.compile(r"^[a-z_]{1,64}$")
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the callback's URL holds the code and the state
    "Content-Security-Policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


class SignInRoutes:
    """Needs the database, the job queue (a link's job is enqueued with the token) and the
    process's user tokens."""

    def __init__(
        self,
        settings: Settings,
        context: Callable[[], tuple[Database, JobQueue, UserTokens]],
    ) -> None:
        self.settings = settings
        self.context = context

    def add_to(self, app: web.Application) -> None:
        app.router.add_get(LOGIN_PATH, self.login)
        app.router.add_get(CALLBACK_PATH, self.callback)
        app.router.add_post(LOGOUT_PATH, self.logout)

    # -- the routes ---------------------------------------------------------------------------

    async def login(self, request: web.Request) -> web.StreamResponse:
        if missing := missing_settings(self.settings):
            return self._page("unset", 503, message=say(PEOPLE, "sign_in.unset", missing=missing))
        given = request.query.get("state")
        if given:
            try:
                state = read_state(self.settings, given)
            except BadState as exc:
                return self._page(exc.why, 400)
            text = given
        else:  # the page's own "Sign in": bound to nobody, nothing to do after
            state, text = new_state(self.settings)
        response = web.HTTPFound(oauth.authorize_url(self.settings, text), headers=HEADERS)
        response.set_cookie(
            FLOW_COOKIE,
            state.nonce,
            max_age=STATE_SECONDS,
            path="/auth/github",
            httponly=True,
            samesite="Lax",  # sent on the top-level redirect back from GitHub
            secure=secure(self.settings),
        )
        return response

    async def callback(self, request: web.Request) -> web.StreamResponse:
        if missing := missing_settings(self.settings):
            return self._page("unset", 503, message=say(PEOPLE, "sign_in.unset", missing=missing))
        try:
            state = read_state(self.settings, request.query.get("state", ""))
        except BadState as exc:
            return self._page(exc.why, 400)
        cookie = request.cookies.get(FLOW_COOKIE, "")
        if not hmac.compare_digest(cookie.encode(), state.nonce.encode()):
            return self._page("other_browser", 400)
        if error := request.query.get("error"):
            return self._page("denied", 400, error=error if _ERROR_WORD.match(error) else "")
        code = request.query.get("code", "")
        if not _CODE.match(code):
            return self._page("refused", 400, error="no code")
        db, jobs, tokens = self.context()
        if await state_used(db, state.nonce):
            return self._page("used", 400)
        http = tokens.http
        try:
            assert http is not None
            pair = await oauth.exchange_code(http, self.settings, code)
            user = await oauth.user_of(http, self.settings, pair.access)
        except oauth.Refused as exc:
            return self._page("refused", 400, error=str(exc))
        except oauth.Unreachable as exc:
            return self._page("unreachable", 502, error=str(exc))
        if state.user_id is not None and user.id != state.user_id:
            found = {"bound_to": state.user_id, "completed_by": user.id}
            log.warning("a sign-in link was completed by another user", extra={"fields": found})
            return self._page("other_user", 403, login=user.login)
        # Used up only now: a link is public on the PR, and someone else completing it must
        # not spend it for the person it was made for (GitHub's codes are single-use anyway).
        async with db.transaction() as conn:
            fresh = await use_state(conn, state.nonce, state.expires_at, time.time())
        if not fresh:
            return self._page("used", 400)
        await self._keep(jobs, tokens, user, pair, state)
        log.info("signed in", extra={"fields": {"user_id": user.id, "then": _job(state)}})
        page = web.Response(status=200, content_type="text/html", headers=HEADERS)
        csrf = start_session(page, self.settings, user.id, user.login)  # the page's session
        page.text = self._page(
            "signed_in",
            login=user.login,
            going_ahead=state.then is not None,
            back=self._back(state),
            csrf=csrf,
        ).text
        page.del_cookie(FLOW_COOKIE, path="/auth/github")
        return page

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """Ends the browser's session and deletes the person's stored tokens (as
        `/cockpit signout` does); needs the page's CSRF token."""
        session = read_session(request, self.settings)
        form = await request.post()
        if session is None or not csrf_ok(self.settings, session, str(form.get("csrf", ""))):
            return self._page("bad_logout", 403)
        _, _, tokens = self.context()
        await tokens.forget(session.user_id)
        page = self._page("signed_out")
        end_session(page)
        return page

    # -- helpers -------------------------------------------------------------------------------

    async def _keep(
        self, jobs: JobQueue, tokens: UserTokens, user: oauth.GitHubUser, pair: Any, state: State
    ) -> None:
        """The token, and the job the link carried, committed together (or neither)."""

        async def store(conn: Any) -> dict[str, Any]:
            await tokens.store(user, pair, conn)
            return {}

        then = state.then
        if then is None:
            await tokens.store(user, pair)
            return
        await jobs.enqueue(
            then["job"],
            str(then.get("key") or f"sign-in:{user.id}"),
            dict(then.get("args") or {}),
            queue=str(then.get("queue") or REVIEWS),
            prepare=store,
        )

    def _back(self, state: State) -> str | None:
        """The link back the link's job carried (the PR's page; the state is sealed by this
        server, so it is one of ours)."""
        back = (state.then or {}).get("back")
        ok = isinstance(back, str) and back.startswith(("https://", "http://"))
        return back if ok else None

    def _page(self, kind: str, status: int = 200, **context: Any) -> web.Response:
        text = render(
            "auth/page.html.j2",
            kind=kind,
            logout=LOGOUT_PATH,
            prefix=self.settings.command_prefix,
            **context,
        )
        return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)


def _job(state: State) -> str | None:
    return str(state.then["job"]) if state.then else None
