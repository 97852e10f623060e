"""The cockpit page's routes: `GET /` (inbox), `GET /r/{owner}/{repo}/pull/{n}` (a draft) and
its POST actions (drop, approve, vet: the slash commands' own functions and permission checks),
`GET /stats` (figures), `GET /static/cockpit.css`. Pages read: no model is called on a GET,
each view runs a fixed number of statements."""

from __future__ import annotations

import datetime as dt
import logging
import re
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web

from bot.agents.transcript import answer_text
from bot.auth import LOGIN_PATH, missing_settings
from bot.auth.session import csrf_ok, csrf_token, end_session, read_session
from bot.commands import draft as draft_commands
from bot.commands import gate
from bot.commands.parse import Command
from bot.commands.pr import CommandFailed, PullRequest
from bot.context import Context
from bot.records import pages
from bot.records.stats import totals
from bot.records.vocab import FindingState, ReviewState
from bot.stats import ModelStats
from bot.texts import PEOPLE, render, say
from bot.web.access import Access, AccessUnavailable, NotSignedIn, Viewer
from bot.web.charts import line_chart

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self';"
    " frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
DRAFT_PATH = "/r/{owner}/{repo}/pull/{number:[0-9]{1,9}}"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
STYLESHEET = resources.files("bot.web").joinpath("static/cockpit.css").read_bytes()
FIGURES_SECONDS = 1.8  # counting what changed into the figures, at most (as /metrics)
RECOUNT = 200  # changes counted per view at most (the rest: the next view, a scrape)

# The page's actions: the slash commands' own functions (their checks come with them).
ACTIONS = {
    "drop": draft_commands.cmd_drop,
    "approve": draft_commands.cmd_approve,
    "vet": draft_commands.cmd_vet,
}


class PageRoutes:
    """`context` gives the process's Context once the app has started."""

    def __init__(self, context: Callable[[], Context]) -> None:
        self.context = context
        self._access: Access | None = None

    def access(self) -> Access:
        if self._access is None:
            ctx = self.context()
            self._access = Access(ctx.settings, ctx.user_tokens, ctx.http)
        return self._access

    def add_to(self, app: web.Application) -> None:
        app.router.add_get("/", self.inbox)
        app.router.add_get(DRAFT_PATH, self.draft)
        app.router.add_post(DRAFT_PATH + "/drop", self.drop)
        app.router.add_post(DRAFT_PATH + "/approve", self.approve)
        app.router.add_post(DRAFT_PATH + "/vet", self.vet)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/static/cockpit.css", self.stylesheet)

    # -- who is looking ------------------------------------------------------------------------

    async def _viewer(self, request: web.Request) -> Viewer | web.Response:
        ctx = self.context()
        settings = ctx.settings
        if missing := missing_settings(settings):
            text = say(PEOPLE, "sign_in.unset", missing=missing)
            return _page("web/signin.html.j2", 503, viewer=None, unset=text, login_path=LOGIN_PATH)
        session = read_session(request, settings)
        if session is None:
            return _page("web/signin.html.j2", 401, viewer=None, login_path=LOGIN_PATH)
        try:
            return await self.access().viewer(
                session.user_id, session.login, csrf_token(settings, session.cookie)
            )
        except NotSignedIn:
            page = _page("web/signin.html.j2", 401, viewer=None, login_path=LOGIN_PATH, gone=True)
            end_session(page)
            return page
        except AccessUnavailable as exc:
            log.warning("access not known", extra={"fields": {"reason": str(exc)}})
            return _page("web/message.html.j2", 502, viewer=None, kind="unreachable")

    # -- pages -------------------------------------------------------------------------------

    async def inbox(self, request: web.Request) -> web.Response:
        viewer = await self._viewer(request)
        if isinstance(viewer, web.Response):
            return viewer
        db = self.context().db
        offset = _int(request.query.get("offset"), 0)
        drafts, total = await pages.inbox_drafts(db, viewer.repos, offset, 25)
        held = await pages.held_by(db, viewer.login, viewer.repos)
        failed = await pages.failed_reviews(db, viewer.repos)
        sessions = await pages.waiting_sessions(db, viewer.repos)
        return _page(
            "web/inbox.html.j2",
            viewer=viewer,
            drafts=drafts,
            held=held,
            prefix=self.context().settings.command_prefix,
            total=total,
            offset=offset,
            limit=25,
            failed=failed,
            sessions=sessions,
            now=time.time(),
        )

    async def draft(
        self, request: web.Request, notice: str = "", status: int = 200
    ) -> web.Response:
        viewer = await self._viewer(request)
        if isinstance(viewer, web.Response):
            return viewer
        found = await self._draft(request, viewer)
        if isinstance(found, web.Response):
            return found
        repo, page = found
        can_decide = await self._may_decide(page, viewer, repo)
        messages = [(line, answer_text(line.item)) for line in page.messages]
        return _page(
            "web/draft.html.j2",
            status,
            viewer=viewer,
            repo=repo,
            page=page,
            messages=messages,
            can_decide=can_decide,
            notice=notice or _done(request.query.get("done")),
            open_draft=page.review is not None and page.review.state == ReviewState.DRAFT,
            kept=FindingState.KEPT,
        )

    async def stats(self, request: web.Request) -> web.Response:
        viewer = await self._viewer(request)
        if isinstance(viewer, web.Response):
            return viewer
        ctx = self.context()
        db = ctx.db
        offset = _int(request.query.get("offset"), 0)
        limit = min(max(_int(request.query.get("limit"), 50), 1), pages.PAGE_LIMIT)
        # Count what changed since the last count (bounded, as a /metrics scrape does); then
        # every model's figures for an operator, the viewer's repositories' for others.
        try:
            figures = await totals(db, recount=RECOUNT, timeout=FIGURES_SECONDS)
        except Exception:
            log.warning("figures could not be counted", exc_info=True)
            figures = await pages.models_of(db, None)
        if viewer.repos is not None:
            figures = await pages.models_of(db, viewer.repos)
        weeks = await pages.weekly(db, viewer.repos)
        runs, runs_total = await pages.run_list(db, viewer.repos, offset, limit)
        evals = await pages.eval_runs(db) if viewer.operator else []
        labels = [dt.datetime.fromtimestamp(w.start, dt.UTC).strftime("%m-%d") for w in weeks]
        charts = [
            line_chart(
                "Acceptance per week (published ÷ decided by people)",
                labels,
                {"acceptance": [w.acceptance for w in weeks]},
                lambda v: f"{v:.0%}",
            ),
            line_chart(
                "Findings per review, per week",
                labels,
                {"findings per review": [w.findings_per_review for w in weeks]},
                lambda v: f"{v:.1f}",
            ),
            line_chart(
                "Refuted, withdrawn and suppressed findings per week",
                labels,
                {
                    "refuted": [float(w.refuted) for w in weeks],
                    "withdrawn": [float(w.withdrawn) for w in weeks],
                    "suppressed": [float(w.suppressed) for w in weeks],
                },
                lambda v: f"{v:g}",
            ),
            line_chart(
                "USD per accepted finding, per week",
                labels,
                {"USD per accepted finding": [w.usd_per_accepted for w in weeks]},
                lambda v: f"${v:.2f}",
            ),
        ]
        return _page(
            "web/stats.html.j2",
            viewer=viewer,
            models=[ModelStats(f) for f in figures],
            charts=charts,
            chart_titles=[
                "Acceptance per week",
                "Findings per review",
                "Refuted, withdrawn, suppressed",
                "USD per accepted finding",
            ],
            runs=runs,
            runs_total=runs_total,
            offset=offset,
            limit=limit,
            evals=evals,
        )

    async def stylesheet(self, request: web.Request) -> web.Response:
        return web.Response(
            body=STYLESHEET,
            content_type="text/css",
            headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    # -- actions ------------------------------------------------------------------------------

    async def drop(self, request: web.Request) -> web.Response:
        return await self._act(request, "drop")

    async def approve(self, request: web.Request) -> web.Response:
        return await self._act(request, "approve")

    async def vet(self, request: web.Request) -> web.Response:
        return await self._act(request, "vet")

    async def _act(self, request: web.Request, command: str) -> web.Response:
        """A POST form: the session's CSRF token, then the slash command's own function (its
        checks: the draft's state, the person's `approve_permission`)."""
        viewer = await self._viewer(request)
        if isinstance(viewer, web.Response):
            return viewer
        form = await request.post()
        session = read_session(request, self.context().settings)
        if session is None or not csrf_ok(
            self.context().settings, session, str(form.get("csrf", ""))
        ):
            return _page("web/message.html.j2", 403, viewer=viewer, kind="csrf")
        found = await self._draft(request, viewer)
        if isinstance(found, web.Response):
            return found
        repo, page = found
        findings: tuple[int, ...] = ()
        words: tuple[str, ...] = ()
        if command == "drop":
            number = _int(str(form.get("finding", "")), 0)
            if number <= 0:
                return await self.draft(request, say(PEOPLE, "which_to_drop"), 400)
            findings = (number,)
            words = tuple(str(form.get("reason", "")).split())
        pr = self._pr(page, viewer, repo)
        try:
            if not await gate.may_run(pr):
                raise CommandFailed(say(PEOPLE, "web.not_allowed"))
            await ACTIONS[command](pr, Command(command, findings=findings, words=words))
        except CommandFailed as exc:
            return await self.draft(request, str(exc), 409)
        log.info(
            "page action",
            extra={"fields": {"command": command, "by": viewer.login, "repo": repo}},
        )
        raise web.HTTPSeeOther(request.path.rsplit("/", 1)[0] + f"?done={command}")

    # -- helpers -------------------------------------------------------------------------------

    async def _draft(
        self, request: web.Request, viewer: Viewer
    ) -> tuple[str, pages.DraftPage] | web.Response:
        owner, name = request.match_info["owner"], request.match_info["repo"]
        repo = f"{owner}/{name}"
        # A repository the person may not see answers as one that does not exist.
        if not (_NAME.match(owner) and _NAME.match(name)) or not viewer.sees(repo):
            return _page("web/message.html.j2", 404, viewer=viewer, kind="not_found")
        page = await pages.draft_page(self.context().db, repo, int(request.match_info["number"]))
        if page is None or not viewer.sees_pull(page.pull):
            return _page("web/message.html.j2", 404, viewer=viewer, kind="not_found")
        return repo, page

    def _pr(self, page: pages.DraftPage, viewer: Viewer, repo: str) -> PullRequest:
        ctx = self.context()
        owner, name = repo.split("/", 1)
        pull = page.pull
        assert pull.installation_id is not None
        data: dict[str, Any] = {
            "owner": {"login": owner},
            "name": name,
            "full_name": repo,
            "id": pull.repo_id,
        }
        gh = ctx.github.installation_api(pull.installation_id)
        return PullRequest(
            ctx,
            gh,
            data,
            pull.number,
            pull,
            viewer.login,
            pull.installation_id,
            actor_id=viewer.user_id,
        )

    async def _may_decide(self, page: pages.DraftPage, viewer: Viewer, repo: str) -> bool:
        """Whether to show the actions: the person has the repository's approve permission
        (asked of GitHub as the slash commands ask it; a POST is checked again)."""
        if page.review is None or page.pull.installation_id is None:
            return False
        try:
            await gate.may_decide(self._pr(page, viewer, repo), "approve")
        except CommandFailed:
            return False
        except Exception:
            log.warning("permission not known", exc_info=True)
            return False
        return True


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None and len(text) < 10 else default
    except ValueError:
        return default


def _done(word: str | None) -> str:
    return say(PEOPLE, f"web.done_{word}") if word in ACTIONS else ""


def _age(when: float) -> str:
    seconds = max(0, time.time() - when)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def _money(value: float | None) -> str:
    return "n/a" if value is None else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def _ratio(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else fmt % value


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _link(url: str | None) -> str | None:
    """A link to GitHub only when it is one (http or https): never `javascript:` or the like."""
    return url if url and url.startswith(("https://", "http://")) else None


_HELPERS = {"age": _age, "money": _money, "ratio": _ratio, "percent": _percent, "link": _link}


def _page(name: str, status: int = 200, **context: Any) -> web.Response:
    text = render(name, **_HELPERS, **context)
    return web.Response(text=text, status=status, content_type="text/html", headers=HEADERS)
