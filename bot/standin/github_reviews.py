"""Pull request reviews in the GitHub stand-in, as GitHub keeps them per user.

A review belongs to the user whose token created it (an installation token: the App's bot).
A pending review is visible only to its author: listing, reading, deleting or submitting it
as anyone else finds nothing (404), and a user may hold one pending review per PR (a second
`POST …/reviews` without `event` answers 422). A person's pending review grows with GraphQL
`addPullRequestReviewThread` (bot/standin/graphql.py calls `add_pending_thread`). A test
plays the person in the browser: `edit_pending_comment`, `delete_pending_comment` and
`submit_as_person`, which answers the `pull_request_review` `submitted` delivery GitHub sends
(the shape of GitHub's published example, `review.user` being the person who submitted).
"""

from __future__ import annotations

import base64
import time
from typing import Any

from aiohttp import web

_STATES = {
    None: "PENDING",
    "COMMENT": "COMMENTED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "APPROVE": "APPROVED",
}


def review_node_id(review_id: int) -> str:
    """A review's GraphQL id, GitHub's current style (`PRR_…`)."""
    raw = f"cockpit:PRR:{review_id}".encode()
    return "PRR_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


class PersonReviews:
    """Mixed into `GitHubStandin`: the `…/pulls/{n}/reviews` routes and their state."""

    def viewer(self, request: web.Request) -> str:
        """Who the request is authenticated as: a person's login for a user token, else the
        App's bot (an installation token)."""
        return self.user_of(request) or self.bot_login

    def review_author(self, review: dict) -> str:
        return review.get("user") or self.bot_login

    def sees(self, review: dict, login: str) -> bool:
        """A pending review only by its author."""
        return review["state"] != "PENDING" or self.review_author(review) == login

    def pending_of(self, full: str, number: int, login: str) -> dict | None:
        for review in self.reviews.values():
            if (
                review["repo"] == full
                and review["number"] == number
                and review["state"] == "PENDING"
                and self.review_author(review) == login
            ):
                return review
        return None

    def review_comments_of(self, review_id: int) -> list[dict]:
        return [c for c in self.review_comments.values() if c["review_id"] == review_id]

    def _review_json(self, review: dict) -> dict:
        login = self.review_author(review)
        hidden = ("repo", "number", "comments", "user")
        return {k: v for k, v in review.items() if k not in hidden} | {
            "node_id": review_node_id(review["id"]),
            "user": {
                "login": login,
                "id": self.oauth.user_id(login),
                "type": "Bot" if login.endswith("[bot]") else "User",
            },
        }

    async def _list_reviews(
        self, request: web.Request, body: dict, owner: str, name: str, number: str
    ) -> web.Response:
        login = self.viewer(request)
        found = [
            self._review_json(r)
            for r in self.reviews.values()
            if r["repo"] == f"{owner}/{name}" and r["number"] == int(number) and self.sees(r, login)
        ]
        return self._paged(request, found, self._repo(owner, name))

    async def _create_review(
        self, request: web.Request, body: dict, owner: str, name: str, number: str
    ) -> web.Response:
        full = f"{owner}/{name}"
        pull = self.pulls.get((full, int(number)))
        if pull is None:
            return _error(404, "Not Found")
        login = self.viewer(request)
        event = body.get("event")
        if event is None and self.pending_of(full, int(number), login) is not None:
            return _error(
                422,
                "Unprocessable Entity",
                ["User can only have one pending review per pull request"],
            )
        lines = pull.lines
        for comment in body.get("comments") or []:
            problem = _comment_problem(comment, lines)
            if problem:
                return _error(422, "Unprocessable Entity", [problem])
        review_id = next(self._ids)
        review = {
            "id": review_id,
            "repo": full,
            "number": int(number),
            "state": _STATES[event],
            "body": body.get("body", ""),
            "commit_id": body.get("commit_id", pull.head_sha),
            "comments": list(body.get("comments") or []),
            "html_url": f"{self.web_url}/{full}/pull/{number}#pullrequestreview-{review_id}",
            "user": login,
        }
        self.reviews[review_id] = review
        for comment in review["comments"]:
            self._add_review_comment(pull, review_id, comment, login)
        return web.json_response(self._review_json(review))

    def _visible_review(self, request: web.Request, rid: str) -> dict | None:
        review = self.reviews.get(int(rid))
        if review is None or not self.sees(review, self.viewer(request)):
            return None
        return review

    async def _get_review(
        self,
        request: web.Request,
        body: dict,
        owner: str,
        name: str,
        number: str,
        rid: str,
    ) -> web.Response:
        review = self._visible_review(request, rid)
        if review is None:
            return _error(404, "Not Found")
        return web.json_response(self._review_json(review))

    def _pending(self, request: web.Request, rid: str, verb: str) -> dict | web.Response:
        """The requester's pending review `rid`, or GitHub's answer when it is not one."""
        review = self._visible_review(request, rid)
        if review is None:
            return _error(404, "Not Found")
        if review["state"] != "PENDING":
            return _error(422, "Unprocessable Entity", [f"Can not {verb} a non-pending review"])
        return review

    async def _delete_review(
        self,
        request: web.Request,
        body: dict,
        owner: str,
        name: str,
        number: str,
        rid: str,
    ) -> web.Response:
        review = self._pending(request, rid, "delete")
        if isinstance(review, web.Response):
            return review
        del self.reviews[int(rid)]
        for comment in self.review_comments_of(int(rid)):
            del self.review_comments[comment["id"]]
            self.review_threads.pop(comment["thread_id"], None)
        return web.json_response(self._review_json(review))

    async def _submit_review(
        self,
        request: web.Request,
        body: dict,
        owner: str,
        name: str,
        number: str,
        rid: str,
    ) -> web.Response:
        review = self._pending(request, rid, "submit")
        if isinstance(review, web.Response):
            return review
        review["state"] = _STATES[body["event"]]
        review["submitted_at"] = _stamp()
        if body.get("body"):
            review["body"] = body["body"]
        return web.json_response(self._review_json(review))

    # -- GraphQL `addPullRequestReviewThread` --------------------------------------------------

    def add_pending_thread(self, login: str, args: dict) -> dict:
        """A new thread in `login`'s own pending review; the stored first comment. Raises
        LookupError (no such pending review of theirs: GitHub's NOT_FOUND) or ValueError
        (a line or path GitHub refuses, in its words)."""
        review = next(
            (
                r
                for r in self.reviews.values()
                if review_node_id(r["id"]) == args.get("pullRequestReviewId")
                and self.sees(r, login)
            ),
            None,
        )
        if review is None or review["state"] != "PENDING" or self.review_author(review) != login:
            raise LookupError(args.get("pullRequestReviewId"))
        pull = self.pulls[(review["repo"], review["number"])]
        comment: dict[str, Any] = {
            "path": args["path"],
            "side": args.get("side") or "RIGHT",
            "body": args["body"],
        }
        if args.get("subjectType") == "FILE":
            if args["path"] not in pull.lines:
                raise ValueError("Path could not be resolved")
            comment["line"] = None
        else:
            comment["line"] = args.get("line")
            if args.get("startLine") is not None:
                comment["start_line"] = args["startLine"]
                comment["start_side"] = args.get("startSide") or comment["side"]
            problem = _comment_problem(comment, pull.lines)
            if problem:
                raise ValueError(problem)
        return self._add_review_comment(pull, review["id"], comment, login)

    # -- the person in the browser (tests) -----------------------------------------------------

    def edit_pending_comment(self, comment_id: int, body: str) -> None:
        self.review_comments[comment_id]["body"] = body

    def delete_pending_comment(self, comment_id: int) -> None:
        comment = self.review_comments.pop(comment_id)
        self.review_threads.pop(comment["thread_id"], None)

    def submit_as_person(
        self, review_id: int, *, event: str = "COMMENT", body: str | None = None
    ) -> dict[str, Any]:
        """The person presses "Submit review": their pending review is published, and the
        `pull_request_review` `submitted` delivery GitHub then sends is returned."""
        review = self.reviews[review_id]
        assert review["state"] == "PENDING", "only a pending review is submitted"
        review["state"] = _STATES[event]
        review["submitted_at"] = _stamp()
        if body is not None:
            review["body"] = body
        return self.review_submitted(review_id)

    def review_submitted(self, review_id: int) -> dict[str, Any]:
        review = self.reviews[review_id]
        pull = self.pulls[(review["repo"], review["number"])]
        login = self.review_author(review)
        api = (self.hostname_url or self.url) + self.api_prefix
        pull_url = f"{api}/repos/{pull.repo.full_name}/pulls/{pull.number}"
        html = f"{self.web_url}/{pull.repo.full_name}/pull/{pull.number}"
        user = _user(login, self.oauth.user_id(login))
        return {
            "action": "submitted",
            "review": {
                "id": review_id,
                "node_id": review_node_id(review_id),
                "user": user,
                "body": review.get("body") or None,
                "commit_id": review["commit_id"],
                "submitted_at": review.get("submitted_at") or _stamp(),
                "state": review["state"].lower(),
                "html_url": f"{html}#pullrequestreview-{review_id}",
                "pull_request_url": pull_url,
                "author_association": "MEMBER",
                "_links": {
                    "html": {"href": f"{html}#pullrequestreview-{review_id}"},
                    "pull_request": {"href": pull_url},
                },
            },
            "pull_request": {
                "url": pull_url,
                "number": pull.number,
                "html_url": html,
                "state": "open",
                "locked": False,
                "draft": False,
                "title": pull.title,
                "body": "",
                "user": _user("contributor", self.oauth.user_id("contributor")),
                "head": {"sha": pull.head_sha, "ref": f"pr-{pull.number}"},
                "base": {"sha": pull.base_sha, "ref": pull.repo.default_branch},
            },
            **self._event(pull, login),
            "sender": user,
        }


def _user(login: str, user_id: int) -> dict[str, Any]:
    return {
        "login": login,
        "id": user_id,
        "node_id": f"U_{user_id}",
        "type": "Bot" if login.endswith("[bot]") else "User",
        "site_admin": False,
    }


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _comment_problem(comment: dict, lines: dict[str, dict[str, dict[int, int]]]) -> str | None:
    sides = lines.get(comment.get("path", ""))
    if sides is None:
        return "Path could not be resolved"
    side = comment.get("side", "RIGHT")
    line = comment.get("line")
    if line not in sides.get(side, {}):
        return "Pull request review thread line must be part of the diff"
    if "start_line" in comment:
        start_side = comment.get("start_side", side)
        start_hunk = sides.get(start_side, {}).get(comment["start_line"])
        if start_hunk is None or start_hunk != sides[side][line] or comment["start_line"] > line:
            return "Pull request review thread start line must be part of the same hunk"
    return None


def _error(status: int, message: str, errors: list[str] | None = None) -> web.Response:
    body: dict[str, Any] = {"message": message, "documentation_url": "https://docs.github.com/rest"}
    if errors:
        body["errors"] = errors
    return web.json_response(body, status=status)
