"""A local GitHub REST stand-in (aiohttp on 127.0.0.1) speaking the subset the bot uses.

It behaves like GitHub where the bot depends on it: App JWTs are verified with the public
key, installation tokens are issued and required on repository calls, a user may hold only
one pending review per PR, review comments must sit on lines of the diff, and request bodies
can be validated against GitHub's OpenAPI description. Used by the tests and `cockpit demo`.
It also has GitHub's App manifest flow (the new-App web form for a user or an organisation,
then `POST /app-manifests/{code}/conversions` with single-use codes), for `cockpit register`,
and GitHub's GraphQL API (bot/standin/graphql.py) for the fields the bot uses.

It serves as github.com does (REST at the root, GraphQL at `/graphql`) or, started with
`enterprise=True`, as GitHub Enterprise Server does: REST under `/api/v3`, GraphQL at
`/api/graphql`, the web pages at the root, and absolute URLs (pagination links, `html_url`)
on its own host. Pagination links use GitHub's `/repositories/{id}/…` form.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import html
import itertools
import json
import os
import re
import secrets
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.config import Secret, Settings
from bot.standin import serve_local
from bot.standin.github_oauth import OAuthStandin
from bot.standin.github_reviews import PersonReviews, _error
from bot.standin.github_user import UserAccessStandin
from bot.standin.openapi import OpenAPIValidator
from bot.standin.repo import GeneratedPR

if TYPE_CHECKING:
    from bot.standin.graphql import GraphQLEndpoint

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# The permissions `cockpit register` asks for: what a stand-in installation grants by default.
_MANIFEST_PERMISSIONS = json.loads(
    resources.files("templates").joinpath("app-manifest.json").read_text()
)["default_permissions"]
_BY_ID = re.compile(r"^/repositories/(?P<id>\d+)(?P<rest>/.*)?$")
ENTERPRISE_API = "/api/v3"


def commentable_lines(diff: str) -> dict[str, dict[str, dict[int, int]]]:
    """path → side → {line: hunk number}, the lines GitHub lets a review comment on."""
    result: dict[str, dict[str, dict[int, int]]] = {}
    path = None
    old = new = 0
    hunk = 0
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            path = None
        elif line.startswith("+++ "):
            target = line[4:]
            path = target[2:] if target.startswith("b/") else None
            if path is not None:
                result.setdefault(path, {"LEFT": {}, "RIGHT": {}})
        elif line.startswith("--- ") and path is None:
            source = line[4:]
            if source.startswith("a/"):
                result.setdefault(source[2:], {"LEFT": {}, "RIGHT": {}})
                path = source[2:]
        elif (match := _HUNK.match(line)) and path is not None:
            old, new = int(match.group(1)), int(match.group(3))
            hunk += 1
        elif path is not None and hunk and line[:1] in (" ", "+", "-"):
            sides = result[path]
            if line[0] == " ":
                sides["LEFT"][old] = hunk
                sides["RIGHT"][new] = hunk
                old, new = old + 1, new + 1
            elif line[0] == "+":
                sides["RIGHT"][new] = hunk
                new += 1
            else:
                sides["LEFT"][old] = hunk
                old += 1
    return result


@dataclass
class StandinRepo:
    owner: str
    name: str
    clone_url: str
    installation_id: int
    default_branch: str = "main"
    files: dict[str, str] = field(default_factory=dict)  # on the default branch (contents API)
    permissions: dict[str, str] = field(default_factory=dict)
    id: int = 0
    git_dir: Path | None = None  # served over git's smart HTTP at `<host>/o/r.git`; then the
    # contents API reads the default branch of this repository, as GitHub does
    private: bool = True  # git reads need an installation token (HTTP Basic)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class StandinPull:
    repo: StandinRepo
    number: int
    head_sha: str
    base_sha: str
    diff: str
    title: str = "A change"

    @property
    def lines(self) -> dict[str, dict[str, dict[int, int]]]:
        return commentable_lines(self.diff)


@dataclass
class Failure:
    method: str
    pattern: re.Pattern
    status: int
    body: dict
    headers: dict[str, str]
    times: int


class GitHubStandin(PersonReviews):
    def __init__(
        self,
        *,
        app_id: str = "4242",
        slug: str = "pr-cockpit",
        validator: OpenAPIValidator | None = None,
        graphql_schema: Path | None = None,
    ) -> None:
        """`graphql_schema`: GitHub's published schema (SDL) that validates GraphQL
        requests; without it the GraphQL endpoint answers that it has none."""
        self.app_id = app_id
        self.slug = slug
        self.validator = validator
        self.graphql_schema = graphql_schema
        self._graphql: GraphQLEndpoint | None = None
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.private_key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode()
        self._public_key = key.public_key()
        self.repos: dict[str, StandinRepo] = {}
        self.pulls: dict[tuple[str, int], StandinPull] = {}
        self.tokens: dict[str, tuple[int, float]] = {}
        self.token_requests = 0
        self.issue_comments: dict[int, dict] = {}
        self.review_comments: dict[int, dict] = {}  # published in reviews, by REST id
        self.review_threads: dict[str, dict] = {}  # by GraphQL node id
        # What the App's installations granted: the manifest's permissions unless a test
        # changes them (resolving a review thread needs `contents: write`).
        self.app_permissions: dict[str, str] = dict(_MANIFEST_PERMISSIONS)
        self.reviews: dict[int, dict] = {}
        self.check_runs: dict[int, dict] = {}
        self.reactions: list[dict] = []
        self.requests: list[dict] = []
        self.violations: list[str] = []
        self.failures: list[Failure] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self._ids = itertools.count(1000)
        self._runner: web.AppRunner | None = None
        self.url = ""  # the host: web pages, and REST too unless `enterprise`
        self.enterprise = False
        # GHES writes its configured hostname into absolute URLs (links, html_url), which
        # need not be the name a client reaches it by: set this to play that.
        self.hostname_url: str | None = None
        # The manifest flow: who is signed in to the web UI, the manifests posted to the
        # new-App form, the Apps created from them, and their unexchanged codes.
        self.web_user = "octocat"
        self.manifests: list[dict] = []
        self.created_apps: list[dict] = []
        self.manifest_codes: dict[str, tuple[dict, float]] = {}
        self.manifest_code_ttl = 3600.0
        self.oauth = OAuthStandin(self)  # "Sign in with GitHub" (bot/standin/github_oauth.py)
        self.user_token_for = self.oauth.user_token_for
        self.user_of = self.oauth.user_of
        self.user_access = UserAccessStandin(self)  # the page's lists (github_user.py)

    def settings(self, data_dir: Path, webhook_secret: str, **overrides: Any) -> Settings:
        """Bot settings that point at this stand-in as its GitHub App."""
        return Settings(
            data_dir=data_dir,
            api_url=self.api_url,
            app_id=self.app_id,
            private_key=Secret(self.private_key_pem),
            webhook_secret=Secret(webhook_secret),
            app_slug=self.slug,
            **overrides,
        )

    @property
    def bot_login(self) -> str:
        return f"{self.slug}[bot]"

    @property
    def api_prefix(self) -> str:
        return ENTERPRISE_API if self.enterprise else ""

    @property
    def api_url(self) -> str:
        """GITHUB_API_URL for this stand-in: the host, or `<host>/api/v3` as on GHES."""
        return self.url + self.api_prefix

    @property
    def graphql_path(self) -> str:
        return "/api/graphql" if self.enterprise else "/graphql"

    @property
    def graphql_url(self) -> str:
        return self.url + self.graphql_path

    @property
    def web_url(self) -> str:
        """Where `html_url`s point: the GHES host itself, or a github.com look-alike."""
        return (self.hostname_url or self.url) if self.enterprise else "https://github.test"

    # -- set-up -------------------------------------------------------------

    def add_repo(
        self,
        owner: str,
        name: str,
        *,
        clone_url: str,
        installation_id: int = 1,
        files: dict[str, str] | None = None,
        permissions: dict[str, str] | None = None,
    ) -> StandinRepo:
        repo = StandinRepo(
            owner,
            name,
            clone_url,
            installation_id,
            files=dict(files or {}),
            permissions=dict(permissions or {}),
            id=next(self._ids),
        )
        self.repos[repo.full_name] = repo
        return repo

    def serve_git(self, repo: StandinRepo, git_dir: Path, *, private: bool = True) -> str:
        """Serve the repository's git objects at `<host>/<owner>/<name>.git`, as GitHub (and
        GHES, on its own host) does; that becomes its clone URL, which is returned."""
        repo.git_dir, repo.private = git_dir, private
        repo.clone_url = f"{self.url}/{repo.full_name}.git"
        return repo.clone_url

    def add_pull(
        self,
        repo: StandinRepo,
        number: int,
        *,
        head_sha: str,
        base_sha: str,
        diff: str,
        title: str = "A change",
    ) -> StandinPull:
        pull = StandinPull(repo, number, head_sha, base_sha, diff, title)
        self.pulls[(repo.full_name, number)] = pull
        return pull

    def add_generated_pr(
        self,
        owner: str,
        name: str,
        pr: GeneratedPR,
        *,
        installation_id: int,
        permissions: dict[str, str],
        files: dict[str, str] | None = None,
        title: str = "A change",
    ) -> StandinRepo:
        """A repository backed by a local PR from `make_pr`, with that PR open on it."""
        repo = self.add_repo(
            owner,
            name,
            clone_url=pr.clone_url,
            installation_id=installation_id,
            files=files,
            permissions=permissions,
        )
        self.add_pull(
            repo, pr.number, head_sha=pr.head_sha, base_sha=pr.base_sha, diff=pr.diff, title=title
        )
        return repo

    def fail_next(  # status 0: the connection drops without an answer
        self,
        method: str,
        path_regex: str,
        status: int,
        *,
        times: int = 1,
        body: dict | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.failures.append(
            Failure(
                method,
                re.compile(path_regex),
                status,
                body or {"message": "stand-in failure"},
                headers or {},
                times,
            )
        )

    def calls(self, method: str | None = None, path_regex: str = "") -> list[dict]:
        pattern = re.compile(path_regex)
        return [
            r
            for r in self.requests
            if (method is None or r["method"] == method) and pattern.search(r["path"])
        ]

    def add_review_thread(
        self, pull: StandinPull, *, path: str, line: int, body: str, user: str = "octocat"
    ) -> dict:
        """A person's review comment on the PR (a new thread); returns the comment."""
        review_id = next(self._ids)
        self.reviews[review_id] = {
            "id": review_id,
            "repo": pull.repo.full_name,
            "number": pull.number,
            "state": "COMMENTED",
            "body": "",
            "commit_id": pull.head_sha,
            "comments": [],
            "html_url": f"{self.web_url}/{pull.repo.full_name}/pull/{pull.number}",
            "user": user,
        }
        comment = {"path": path, "line": line, "side": "RIGHT", "body": body}
        return self._add_review_comment(pull, review_id, comment, user)

    def delivery(self, event: str, data: dict[str, Any], secret: str) -> tuple[bytes, dict]:
        """`data` as GitHub delivers `event` to the App's webhook: its body and headers."""
        body = json.dumps(data).encode()
        signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return body, {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": secrets.token_hex(8),
            "X-Hub-Signature-256": signature,
            "Content-Type": "application/json",
        }

    def _event(self, pull: StandinPull, sender: str) -> dict[str, Any]:
        repo = pull.repo
        return {
            "installation": {"id": repo.installation_id},
            "repository": {
                "id": repo.id,
                "name": repo.name,
                "full_name": repo.full_name,
                "private": repo.private,
                "owner": {"login": repo.owner, "type": "Organization"},
                "clone_url": repo.clone_url,
                "default_branch": repo.default_branch,
            },
            "sender": {"login": sender, "id": self.oauth.user_id(sender), "type": "User"},
        }

    def pull_request_opened(
        self, pull: StandinPull, *, body: str = "", author: str = "contributor"
    ) -> dict[str, Any]:
        """The `pull_request` event GitHub sends when `pull` is opened."""
        return {
            "action": "opened",
            "number": pull.number,
            **self._event(pull, author),
            "pull_request": {
                "number": pull.number,
                "state": "open",
                "draft": False,
                "title": pull.title,
                "body": body,
                "user": {"login": author, "type": "User"},
                "html_url": f"{self.web_url}/{pull.repo.full_name}/pull/{pull.number}",
                "head": {"sha": pull.head_sha, "ref": f"pr-{pull.number}"},
                "base": {"sha": pull.base_sha, "ref": pull.repo.default_branch},
            },
        }

    def pull_request_comment(self, pull: StandinPull, body: str, *, by: str) -> dict[str, Any]:
        """The `issue_comment` event GitHub sends when `by` comments `body` on `pull`."""
        return {
            "action": "created",
            **self._event(pull, by),
            "issue": {
                "number": pull.number,
                "title": pull.title,
                "pull_request": {"url": f"{self.web_url}/{pull.repo.full_name}/pull/{pull.number}"},
            },
            "comment": {
                "id": next(self._ids),
                "body": body,
                "user": {"login": by, "id": self.oauth.user_id(by), "type": "User"},
            },
        }

    def status_comments(self, repo: str, number: int) -> list[dict]:
        return [
            c
            for c in self.issue_comments.values()
            if c["repo"] == repo
            and c["number"] == number
            and "<!-- pr-cockpit:status -->" in c["body"]
        ]

    # -- lifecycle ------------------------------------------------------------

    async def start(
        self, port: int = 0, *, enterprise: bool = False, ssl_context: ssl.SSLContext | None = None
    ) -> str:
        """Serve on 127.0.0.1 (over TLS with `ssl_context`); returns the host URL."""
        self.enterprise = enterprise
        app = web.Application(client_max_size=50 * 1024 * 1024)
        for owner in ("", "/organizations/{org}"):
            app.router.add_post(owner + "/settings/apps/new", self._new_app_form)
            app.router.add_post(owner + "/settings/apps", self._create_app)
        app.router.add_post(self.graphql_path, self._graphql_request)
        self.oauth.add_routes(app)
        app.router.add_route("GET", "/{owner}/{name}.git/{tail:.+}", self._git)
        app.router.add_route("POST", "/{owner}/{name}.git/{tail:.+}", self._git)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner, self.url = await serve_local(app, port, ssl_context=ssl_context)
        return self.url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    # -- request handling -------------------------------------------------------

    def api_path(self, raw: str) -> str | None:
        """The REST path GitHub would route: the API root stripped, `/repositories/{id}/…`
        (the form of GitHub's pagination links) as `/repos/{owner}/{name}/…`; None when
        the path is outside the API root or names no repository."""
        if not raw.startswith(self.api_prefix + "/"):
            return None
        path = raw[len(self.api_prefix) :]
        if match := _BY_ID.match(path):
            repo = next((r for r in self.repos.values() if r.id == int(match["id"])), None)
            if repo is None:
                return None
            path = f"/repos/{repo.full_name}{match['rest'] or ''}"
        return path

    def _failed(self, request: web.Request, path: str) -> web.Response | None:
        """The answer of a failure `fail_next` set up for this request, if any."""
        for failure in self.failures:
            if (
                failure.times > 0
                and failure.method == request.method
                and failure.pattern.search(path)
            ):
                failure.times -= 1
                if failure.status == 0:  # unreachable: the connection drops, no answer
                    assert request.transport is not None
                    request.transport.close()
                    return web.Response(status=500)
                return web.json_response(
                    failure.body, status=failure.status, headers=failure.headers
                )
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = await request.json() if raw else None
        except ValueError:
            return _error(400, "Problems parsing JSON")
        path = self.api_path(request.path)
        self._record(request, path or request.path, body)
        await self.gate.wait()
        if path is None:
            if self.enterprise and not request.path.startswith(ENTERPRISE_API + "/"):
                self.violations.append(f"{request.method} {request.path}: outside {ENTERPRISE_API}")
            return _error(404, "Not Found")
        if self.validator is not None:
            self.violations.extend(self.validator.check_request(request.method, path, body))
        if (failed := self._failed(request, path)) is not None:
            return failed
        for method, pattern, handler in self._routes():
            match = pattern.match(path)
            if match and method == request.method:
                auth = self._authorise(request, handler, match.groupdict())
                if auth is not None:
                    return auth
                return await handler(request, body or {}, **match.groupdict())
        return _error(404, "Not Found")

    def _record(self, request: web.Request, path: str, body: Any) -> None:
        """`path`: as GitHub routes it (see `api_path`); `url_path`: as it was requested."""
        self.requests.append(
            {
                "method": request.method,
                "path": path,
                "url_path": request.path,
                "body": body,
                "headers": dict(request.headers),
                "query": dict(request.query),
            }
        )

    def _routes(self) -> list[tuple[str, re.Pattern, Callable]]:
        repo = r"^/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"
        table = [
            ("POST", r"^/app/installations/(?P<installation>\d+)/access_tokens$", self._token),
            ("GET", r"^/app$", self._app),
            ("GET", r"^/user$", self.oauth.get_user),
            ("GET", r"^/user/installations$", self.user_access.installations),
            (
                "GET",
                r"^/user/installations/(?P<installation>\d+)/repositories$",
                self.user_access.repositories,
            ),
            ("POST", r"^/app-manifests/(?P<code>[^/]+)/conversions$", self._convert_manifest),
            ("GET", repo + r"$", self._get_repo),
            ("GET", repo + r"/pulls/(?P<number>\d+)$", self._get_pull),
            ("GET", repo + r"/pulls/(?P<number>\d+)/reviews$", self._list_reviews),
            ("POST", repo + r"/pulls/(?P<number>\d+)/reviews$", self._create_review),
            ("GET", repo + r"/pulls/(?P<number>\d+)/reviews/(?P<rid>\d+)$", self._get_review),
            ("DELETE", repo + r"/pulls/(?P<number>\d+)/reviews/(?P<rid>\d+)$", self._delete_review),
            (
                "POST",
                repo + r"/pulls/(?P<number>\d+)/reviews/(?P<rid>\d+)/events$",
                self._submit_review,
            ),
            ("GET", repo + r"/issues/(?P<number>\d+)/comments$", self._list_comments),
            ("POST", repo + r"/issues/(?P<number>\d+)/comments$", self._create_comment),
            ("PATCH", repo + r"/issues/comments/(?P<cid>\d+)$", self._edit_comment),
            ("POST", repo + r"/issues/comments/(?P<cid>\d+)/reactions$", self._react),
            ("POST", repo + r"/pulls/comments/(?P<cid>\d+)/reactions$", self._react),
            ("GET", repo + r"/collaborators/(?P<user>[^/]+)/permission$", self._permission),
            ("POST", repo + r"/check-runs$", self._create_check_run),
            ("PATCH", repo + r"/check-runs/(?P<crid>\d+)$", self._update_check_run),
            ("GET", repo + r"/contents/(?P<path>.+)$", self._contents),
        ]
        return [(m, re.compile(p), h) for m, p, h in table]

    def _authorise(
        self, request: web.Request, handler: Callable, params: dict[str, str]
    ) -> web.Response | None:
        header = request.headers.get("Authorization", "")
        scheme, _, credential = header.partition(" ")
        if (
            handler in (self._convert_manifest, self.oauth.get_user)
            or getattr(handler, "__self__", None) is self.user_access
        ):  # the code; the user's
            return None
        if self.user_of(request) is not None:  # a user token: the repository must be installed
            known = self.repos.get(f"{params.get('owner')}/{params.get('name')}")
            return None if known is not None else _error(404, "Not Found")
        if handler in (self._token, self._app):
            if scheme.lower() != "bearer":
                return _error(401, "A JSON web token could not be decoded")
            try:
                claims = jwt.decode(
                    credential,
                    self._public_key,
                    algorithms=["RS256"],
                    options={"require": ["iat", "exp", "iss"]},
                )
            except jwt.PyJWTError as exc:
                return _error(401, f"'Expiration time' claim ('exp') is invalid: {exc}")
            if str(claims["iss"]) != self.app_id or claims["exp"] - claims["iat"] > 660:
                return _error(401, "JWT issuer or lifetime is not acceptable")
            return None
        if scheme.lower() not in ("token", "bearer") or credential not in self.tokens:
            return _error(401, "Bad credentials")
        installation, expires = self.tokens[credential]
        if expires < time.time():
            return _error(401, "Bad credentials")
        repo = self.repos.get(f"{params.get('owner')}/{params.get('name')}")
        if repo is None or repo.installation_id != installation:
            return _error(404, "Not Found")
        return None

    # -- handlers ---------------------------------------------------------------

    def _repo(self, owner: str, name: str) -> StandinRepo:
        return self.repos[f"{owner}/{name}"]

    async def _token(self, request: web.Request, body: dict, installation: str) -> web.Response:
        self.token_requests += 1
        token = "ghs_" + secrets.token_urlsafe(27).replace("-", "a").replace("_", "b")
        expires = time.time() + 3600
        self.tokens[token] = (int(installation), expires)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires))
        return web.json_response(
            {"token": token, "expires_at": stamp, "permissions": {"pull_requests": "write"}},
            status=201,
        )

    async def _app(self, request: web.Request, body: dict) -> web.Response:
        return web.json_response({"id": int(self.app_id), "slug": self.slug, "name": "PR Cockpit"})

    async def _get_repo(
        self, request: web.Request, body: dict, owner: str, name: str
    ) -> web.Response:
        repo = self._repo(owner, name)
        return web.json_response(
            {
                "id": repo.id,
                "name": name,
                "full_name": repo.full_name,
                "default_branch": repo.default_branch,
                "clone_url": repo.clone_url,
            }
        )

    async def _get_pull(
        self, request: web.Request, body: dict, owner: str, name: str, number: str
    ) -> web.Response:
        pull = self.pulls.get((f"{owner}/{name}", int(number)))
        if pull is None:
            return _error(404, "Not Found")
        repo = pull.repo
        return web.json_response(
            {
                "number": pull.number,
                "state": "open",
                "draft": False,
                "title": pull.title,
                "body": "",
                "user": {"login": "octocat", "type": "User"},
                "html_url": f"{self.web_url}/{repo.full_name}/pull/{pull.number}",
                "head": {"sha": pull.head_sha, "ref": f"pr-{pull.number}"},
                "base": {"sha": pull.base_sha, "ref": repo.default_branch},
            }
        )

    def _paged(self, request: web.Request, items: list, repo: StandinRepo) -> web.Response:
        """GitHub-style pages: `per_page` (≤ 100, default 30), `page`, and absolute
        `Link` URLs on the API root while more remain, naming the repository by id
        (`<api>/repositories/{id}/…?page=2`) as GitHub does."""
        per_page = min(int(request.query.get("per_page", 30)), 100)
        page = int(request.query.get("page", 1))
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            path = str(self.api_path(request.path))
            rest = path.removeprefix(f"/repos/{repo.full_name}")
            api = (self.hostname_url or self.url) + self.api_prefix
            base = f"{api}/repositories/{repo.id}{rest}?per_page={per_page}&page="
            last = (len(items) + per_page - 1) // per_page
            headers["Link"] = f'<{base}{page + 1}>; rel="next", <{base}{last}>; rel="last"'
        return web.json_response(chunk, headers=headers)

    def _add_review_comment(
        self, pull: StandinPull, review_id: int, comment: dict, user: str
    ) -> dict:
        """A review comment starts a thread (GitHub's `PullRequestReviewThread`)."""
        comment_id = next(self._ids)
        thread_id = _node_id("PRRT", comment_id)
        stored = {
            "id": comment_id,
            "node_id": _node_id("PRRC", comment_id),
            "repo": pull.repo.full_name,
            "number": pull.number,
            "review_id": review_id,
            "thread_id": thread_id,
            "path": comment.get("path"),
            "line": comment.get("line"),
            "start_line": comment.get("start_line"),
            "side": comment.get("side", "RIGHT"),
            "body": comment.get("body", ""),
            "user": user,
        }
        self.review_comments[comment_id] = stored
        self.review_threads[thread_id] = {
            "id": thread_id,
            "repo": pull.repo.full_name,
            "number": pull.number,
            "comment_ids": [comment_id],
            "resolved_by": None,
        }
        return stored

    def reply_in_thread(self, thread_id: str, body: str, user: str = "octocat") -> dict:
        """A person's reply in a review thread (GitHub's "Reply" under an inline comment)."""
        thread = self.review_threads[thread_id]
        first = self.review_comments[thread["comment_ids"][0]]
        comment_id = next(self._ids)
        reply = {**first, "id": comment_id, "node_id": _node_id("PRRC", comment_id)}
        reply.update(body=body, user=user, in_reply_to_id=first["id"])
        self.review_comments[comment_id] = reply
        thread["comment_ids"].append(comment_id)
        return reply

    def _comment_json(self, comment: dict) -> dict:
        return {
            "id": comment["id"],
            "body": comment["body"],
            "user": comment["user"],
            "html_url": f"{self.web_url}/{comment['repo']}/pull/{comment['number']}"
            f"#issuecomment-{comment['id']}",
        }

    async def _list_comments(
        self, request: web.Request, body: dict, owner: str, name: str, number: str
    ) -> web.Response:
        found = [
            c
            for c in self.issue_comments.values()
            if c["repo"] == f"{owner}/{name}" and c["number"] == int(number)
        ]
        return self._paged(request, [self._comment_json(c) for c in found], self._repo(owner, name))

    async def _create_comment(
        self, request: web.Request, body: dict, owner: str, name: str, number: str
    ) -> web.Response:
        comment_id = next(self._ids)
        comment = {
            "id": comment_id,
            "repo": f"{owner}/{name}",
            "number": int(number),
            "body": body["body"],
            "user": {"login": self.bot_login, "type": "Bot"},
        }
        self.issue_comments[comment_id] = comment
        return web.json_response(self._comment_json(comment), status=201)

    async def _edit_comment(
        self, request: web.Request, body: dict, owner: str, name: str, cid: str
    ) -> web.Response:
        comment = self.issue_comments.get(int(cid))
        if comment is None:
            return _error(404, "Not Found")
        comment["body"] = body["body"]
        return web.json_response(self._comment_json(comment))

    async def _react(
        self, request: web.Request, body: dict, owner: str, name: str, cid: str
    ) -> web.Response:
        kind = "review_comment" if "/pulls/comments/" in request.path else "issue_comment"
        reaction = {
            "id": next(self._ids),
            "comment_id": int(cid),
            "kind": kind,
            "content": body["content"],
        }
        self.reactions.append(reaction)
        return web.json_response(reaction, status=201)

    async def _permission(
        self, request: web.Request, body: dict, owner: str, name: str, user: str
    ) -> web.Response:
        permission = self._repo(owner, name).permissions.get(user, "none")
        if permission == "outside":
            return _error(404, "Not Found")
        return web.json_response(
            {"permission": permission, "role_name": permission, "user": {"login": user}}
        )

    async def _create_check_run(
        self, request: web.Request, body: dict, owner: str, name: str
    ) -> web.Response:
        check_id = next(self._ids)
        run = {"id": check_id, "repo": f"{owner}/{name}", "annotations": [], **body}
        run["annotations"] = list((body.get("output") or {}).get("annotations") or [])
        self.check_runs[check_id] = run
        return web.json_response(run, status=201)

    async def _update_check_run(
        self, request: web.Request, body: dict, owner: str, name: str, crid: str
    ) -> web.Response:
        run = self.check_runs.get(int(crid))
        if run is None:
            return _error(404, "Not Found")
        annotations = (body.get("output") or {}).get("annotations") or []
        if len(annotations) > 50:
            return _error(422, "Unprocessable Entity", ["annotations: at most 50 per request"])
        run.update({k: v for k, v in body.items() if k != "output"})
        if "output" in body:
            run["output"] = {**run.get("output", {}), **body["output"]}
            run["annotations"].extend(annotations)
        return web.json_response(run)

    async def _contents(
        self, request: web.Request, body: dict, owner: str, name: str, path: str
    ) -> web.Response:
        repo = self._repo(owner, name)
        ref = request.query.get("ref", repo.default_branch)
        if repo.git_dir is not None:  # a served repository: its branch, as GitHub reads it
            content = await asyncio.to_thread(git_blob, repo.git_dir, ref, path)
        elif ref == repo.default_branch and path in repo.files:
            content = repo.files[path].encode()
        else:
            content = None
        if content is None:
            return _error(404, "Not Found")
        sha = blob_sha(content)
        etag = f'"{sha}"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.json_response(
            {
                "type": "file",
                "name": path.rsplit("/", 1)[-1],
                "path": path,
                "encoding": "base64",
                "size": len(content),
                "sha": sha,
                "content": base64.b64encode(content).decode(),
            },
            headers={"ETag": etag},
        )

    # -- git over HTTP ----------------------------------------------------------------------------

    async def _git(self, request: web.Request) -> web.StreamResponse:
        """git's smart HTTP protocol, as GitHub serves it (`info/refs?service=git-upload-pack`,
        then `POST git-upload-pack`; protocol v2, partial-clone filters, any object asked for
        by id), run by `git http-backend`, with GitHub's Basic auth: user `x-access-token`, an
        installation token of the repository as password. Read-only, like a clone URL."""
        info = request.match_info
        repo = self.repos.get(f"{info['owner']}/{info['name']}")
        self._record(request, request.path, None)
        if repo is None or repo.git_dir is None:
            return web.Response(status=404, text="Repository not found.")
        if repo.private and not self._git_reader(request, repo):
            return web.Response(
                status=401,
                text="Authentication failed",
                headers={"WWW-Authenticate": 'Basic realm="GitHub"'},
            )
        smart = (request.method, info["tail"]) in (
            ("GET", "info/refs"),
            ("POST", "git-upload-pack"),
        )
        if not smart or request.query.get("service", "git-upload-pack") != "git-upload-pack":
            return web.Response(status=403, text="Only git's smart HTTP protocol, read-only.")
        return await _http_backend(request, repo.git_dir, info["tail"])

    def _git_reader(self, request: web.Request, repo: StandinRepo) -> bool:
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, _, token = base64.b64decode(credential).decode().partition(":")
        except ValueError:
            return False
        known = self.tokens.get(token)
        return (
            user == "x-access-token"
            and known is not None
            and known[0] == repo.installation_id
            and known[1] >= time.time()
        )

    # -- GraphQL --------------------------------------------------------------------------------

    async def _graphql_request(self, request: web.Request) -> web.Response:
        """`POST /graphql` (`/api/graphql` on GHES): an installation token is required."""
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self._record(request, request.path, body)
        await self.gate.wait()
        if (failed := self._failed(request, request.path)) is not None:
            return failed
        scheme, _, credential = request.headers.get("Authorization", "").partition(" ")
        known = self.tokens.get(credential) if scheme.lower() in ("token", "bearer") else None
        if self.user_of(request) is not None:  # a person's token: sees as that person
            known = (None, time.time() + 60)
        if known is None or known[1] < time.time():
            return web.json_response(
                {
                    "message": "This endpoint requires you to be authenticated.",
                    "documentation_url": "https://docs.github.com/graphql/guides/forming-calls-with-graphql#authenticating-with-graphql",
                },
                status=401,
            )
        if self.graphql_schema is None:
            return _error(501, "this GitHub stand-in was started without a GraphQL schema")
        if self._graphql is None:
            from bot.standin.graphql import GraphQLEndpoint

            self._graphql = GraphQLEndpoint(self, self.graphql_schema)
        if not isinstance(body, dict):
            return _error(400, "Problems parsing JSON")
        return web.json_response(
            self._graphql.answer(body, installation=known[0], viewer=self.viewer(request))
        )

    # -- the App manifest flow (web pages, then the code exchange) ------------------------------

    async def _new_app_form(self, request: web.Request) -> web.Response:
        """GitHub's "Create GitHub App" page for a posted manifest: a name to confirm."""
        form = await request.post()
        org = request.match_info.get("org")
        try:
            manifest = json.loads(str(form.get("manifest", "")))
        except ValueError:
            manifest = None
        problem = _manifest_problem(manifest)
        if problem:
            return web.Response(status=422, text=problem)
        self.manifests.append(
            {"manifest": manifest, "state": request.query.get("state"), "org": org}
        )
        owner = f"/organizations/{org}" if org else ""
        fields = {"manifest": json.dumps(manifest), "state": request.query.get("state", "")}
        hidden = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
            for name, value in fields.items()
        )
        page = (
            "<!doctype html><html><head><meta charset=utf-8><title>Create GitHub App</title>"
            f"</head><body><h1>Create GitHub App for {html.escape(org or self.web_user)}</h1>"
            f'<form action="{owner}/settings/apps" method="post">{hidden}'
            '<label>GitHub App name <input name="name" '
            f'value="{html.escape(str(manifest.get("name", "")))}"></label>'
            '<button id="create" type="submit">Create GitHub App</button></form></body></html>'
        )
        return web.Response(text=page, content_type="text/html")

    async def _create_app(self, request: web.Request) -> web.Response:
        """ "Create GitHub App" clicked: register it, send the browser to `redirect_url`."""
        form = await request.post()
        org = request.match_info.get("org")
        manifest = json.loads(str(form["manifest"]))
        name = str(form.get("name") or manifest.get("name") or "").strip()
        if not name:
            return web.Response(status=422, text="Name can't be blank")
        app_id = next(self._ids)
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        hook = manifest.get("hook_attributes") or {}
        owner = {"login": org or self.web_user, "type": "Organization" if org else "User"}
        created = {
            "id": app_id,
            "slug": slug,
            "node_id": f"A_{app_id}",
            "owner": owner,
            "name": name,
            "description": manifest.get("description", ""),
            "external_url": manifest["url"],
            "html_url": f"{self.url}/apps/{slug}",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "permissions": manifest.get("default_permissions") or {},
            "events": manifest.get("default_events") or [],
            "hook": hook,
            "callback_urls": list(manifest.get("callback_urls") or []),
            "client_id": f"Iv1.{secrets.token_hex(8)}",
            "client_secret": secrets.token_hex(20),
            "webhook_secret": secrets.token_hex(20) if hook else None,
            "pem": _new_private_key_pem(),
        }
        self.created_apps.append(created)
        code = secrets.token_hex(20)
        self.manifest_codes[code] = (created, time.monotonic() + self.manifest_code_ttl)
        back = {"code": code}
        if form.get("state"):
            back["state"] = str(form["state"])
        raise web.HTTPFound(_with_query(manifest["redirect_url"], back))

    async def _convert_manifest(self, request: web.Request, body: dict, code: str) -> web.Response:
        """The code works once, within the hour (then, as on GitHub, it is not found)."""
        found = self.manifest_codes.pop(code, None)
        if found is None or found[1] < time.monotonic():
            return _error(404, "Not Found")
        answer = {k: v for k, v in found[0].items() if k not in ("hook", "callback_urls")}
        return web.json_response(answer, status=201)


def _manifest_problem(manifest: Any) -> str | None:
    if not isinstance(manifest, dict):
        return "Invalid manifest: not a JSON object"
    if not manifest.get("url"):
        return "Invalid manifest: url is required"
    hook = manifest.get("hook_attributes")
    if hook is not None and not (isinstance(hook, dict) and hook.get("url")):
        return "Invalid manifest: hook_attributes.url is required"
    if not str(manifest.get("redirect_url", "")).startswith(("http://", "https://")):
        return "Invalid manifest: redirect_url must be a URL"
    return None


def _with_query(url: str, extra: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query), *extra.items()])
    return urlunsplit(parts._replace(query=query))


def _new_private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


def _node_id(kind: str, number: int) -> str:
    """An opaque global id in GitHub's current style (`PRRT_…`, `PRRC_…`)."""
    return f"{kind}_" + base64.urlsafe_b64encode(
        f"cockpit:{kind}:{number}".encode()
    ).decode().rstrip("=")


GIT_SERVER_CONFIG = {  # what GitHub's git servers allow: partial clones and fetches by id
    "uploadpack.allowFilter": "true",
    "uploadpack.allowAnySHA1InWant": "true",
}


def _git_server_env(git_dir: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(git_dir),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_COUNT": str(len(GIT_SERVER_CONFIG)),
    }
    for n, (key, value) in enumerate(GIT_SERVER_CONFIG.items()):
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
    return env


async def _http_backend(request: web.Request, git_dir: Path, tail: str) -> web.Response:
    """One request through `git http-backend` (CGI). aiohttp has already inflated a gzipped
    request body, so the backend is not told about the encoding."""
    body = await request.read()
    env = {
        **_git_server_env(git_dir),
        "GIT_PROJECT_ROOT": str(git_dir.parent),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": f"/{git_dir.name}/{tail}",
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.query_string,
        "CONTENT_TYPE": request.headers.get("Content-Type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        "REMOTE_ADDR": request.remote or "127.0.0.1",
    }
    proc = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(body)
    ends = [(out.find(sep), sep) for sep in (b"\r\n\r\n", b"\n\n") if sep in out]
    at, sep = min(ends) if ends else (len(out), b"")
    head, payload = out[:at], out[at + len(sep) :]
    status, headers = 200, {}
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        elif name:
            headers[name.strip()] = value.strip()
    if proc.returncode and status == 200:
        return web.Response(status=500, text=err.decode(errors="replace")[-500:])
    return web.Response(status=status, body=payload, headers=headers)


def git_blob(git_dir: Path, rev: str, path: str) -> bytes | None:
    """A file of a served repository at `rev`, or None when it has no such file."""
    found = subprocess.run(
        ["git", "cat-file", "blob", "--end-of-options", f"{rev}:{path}"],
        cwd=git_dir,
        env=_git_server_env(git_dir),
        capture_output=True,
        timeout=30,
    )
    return found.stdout if found.returncode == 0 else None


def blob_sha(content: bytes) -> str:
    """The git blob id GitHub's contents API answers as `sha`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()
