"""GitHub's GraphQL API in the GitHub stand-in: GitHub's published schema checks every request,
and the fields the bot uses resolve against the stand-in's pull requests and review threads.

Strict where GitHub is: a field, argument or type the schema lacks is an error in GitHub's
words (`Field 'x' doesn't exist on type 'Y'`, with its `extensions.code`), answered with HTTP
200 and no `data`; a connection needs `first` or `last` (at most 100); an id that names
nothing is a `NOT_FOUND` error beside `null` data. A field the schema has but the stand-in does
not resolve is an error saying so, never a silent null. Needs `graphql-core` (a dev extra).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from graphql import (
    GraphQLError,
    GraphQLResolveInfo,
    GraphQLSchema,
    GraphQLSyntaxError,
    OperationDefinitionNode,
    build_schema,
    execute,
    parse,
    print_ast,
    validate,
)

from bot.standin.github_reviews import review_node_id


class GitHubState(Protocol):
    """What the endpoint reads and changes of the stand-in's state (`bot.standin.github`)."""

    repos: dict[str, Any]
    pulls: dict[tuple[str, int], Any]
    review_comments: dict[int, dict]  # published in reviews, by REST id
    review_threads: dict[str, dict]  # by GraphQL node id
    reviews: dict[int, dict]  # by REST id (bot/standin/github_reviews.py)
    app_permissions: dict[str, str]  # what the App's installations granted

    def sees(self, review: dict, login: str) -> bool: ...

    def review_author(self, review: dict) -> str: ...

    def add_pending_thread(self, login: str, args: dict) -> dict: ...

    @property
    def bot_login(self) -> str: ...

    @property
    def web_url(self) -> str: ...


MAX_PAGE = 100
NO_QUERY = "A query attribute must be specified and must be a string."

# graphql-core's validation messages → GitHub's (graphql-ruby's) words and codes.
_GITHUB_WORDS: list[tuple[re.Pattern, Callable[[re.Match], tuple[str, dict]]]] = [
    (
        re.compile(r"^Cannot query field '(?P<field>\w+)' on type '(?P<type>\w+)'"),
        lambda m: (
            f"Field '{m['field']}' doesn't exist on type '{m['type']}'",
            {"code": "undefinedField", "typeName": m["type"], "fieldName": m["field"]},
        ),
    ),
    (
        re.compile(r"^Unknown argument '(?P<arg>\w+)' on field '(?P<type>\w+)\.(?P<field>\w+)'"),
        lambda m: (
            f"Field '{m['field']}' doesn't accept argument '{m['arg']}'",
            {
                "code": "argumentNotAccepted",
                "name": m["field"],
                "typeName": "Field",
                "argumentName": m["arg"],
            },
        ),
    ),
    (
        re.compile(r"^Argument '\w+\.(?P<field>\w+)\((?P<arg>\w+):\)' of type .* is required"),
        lambda m: (
            f"Field '{m['field']}' is missing required arguments: {m['arg']}",
            {
                "code": "missingRequiredArguments",
                "className": "Field",
                "name": m["field"],
                "arguments": m["arg"],
            },
        ),
    ),
    (
        re.compile(r"^Field '(?P<field>\w+)' of type '(?P<type>[^']+)' must have a selection"),
        lambda m: (
            f"Field must have selections (field '{m['field']}' returns {m['type']} but has "
            f"no selections. Did you mean '{m['field']} {{ ... }}'?)",
            {"code": "selectionMismatch", "nodeName": f"field '{m['field']}'"},
        ),
    ),
]
_BAD_VARIABLE = re.compile(r"^Variable '\$(?P<name>\w+)' has invalid value: (?P<why>.*)$")


class NotFound(GraphQLError):
    """GitHub's `"type": "NOT_FOUND"` error: the field answers null beside it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"type": "NOT_FOUND"})


class Forbidden(GraphQLError):
    """GitHub's `"type": "FORBIDDEN"`: the App's installation lacks a permission."""

    def __init__(self) -> None:
        super().__init__("Resource not accessible by integration", extensions={"type": "FORBIDDEN"})


class Unsupported(GraphQLError):
    """A valid request that GitHub would answer but the stand-in cannot: the test must know."""


@cache
def load_schema(path: Path) -> GraphQLSchema:
    # GitHub's schema breaks two of the spec's rules that graphql-core checks (a field defined
    # twice; deprecated fields implementing non-deprecated interface fields): GitHub serves it
    # as it is, so it is taken as valid.
    return build_schema(path.read_text(), assume_valid_sdl=True, assume_valid=True)


def github_error(error: GraphQLError, variables: dict[str, str] | None = None) -> dict[str, Any]:
    """One error as GitHub writes it: message, locations, path, and `type` or `extensions`.
    `variables`: the operation's variable types by name, for a variable's bad value."""
    message, extensions = error.message, dict(error.extensions or {})
    for pattern, words in _GITHUB_WORDS:
        if match := pattern.match(error.message):
            message, extensions = words(match)
            break
    if (match := _BAD_VARIABLE.match(error.message)) and variables:
        kind = variables.get(match["name"], "")
        message = f"Variable ${match['name']} of type {kind} was provided invalid value"
        extensions = {"problems": [{"path": [], "explanation": match["why"]}]}
    answer: dict[str, Any] = {"message": message}
    if error.locations:
        answer["locations"] = [{"line": loc.line, "column": loc.column} for loc in error.locations]
    if error.path:
        answer["path"] = list(error.path)
    if "type" in extensions:
        answer["type"] = extensions.pop("type")
    if extensions:
        answer["extensions"] = extensions
    return answer


def _resolve(source: Any, info: GraphQLResolveInfo, **args: Any) -> Any:
    """Fields are dict keys; a callable one gets the field's arguments. A missing key is
    a field the stand-in does not resolve: an error, so no test passes on a silent null."""
    if not isinstance(source, dict) or info.field_name not in source:
        owner = info.parent_type.name
        raise Unsupported(f"the GitHub stand-in does not resolve {owner}.{info.field_name}")
    value = source[info.field_name]
    return value(**args) if callable(value) else value


def connection(name: str, items: list[dict], page: dict[str, Any]) -> dict:
    """A GitHub connection page (`nodes`, `edges`, `pageInfo`, `totalCount`) with GitHub's
    rule that `first` (or `last`) is given and at most 100. Pages go forwards only here."""
    if page.get("last") is not None or page.get("before") is not None:
        raise Unsupported(f"the GitHub stand-in pages `{name}` forwards only (first/after)")
    first, after = page.get("first"), page.get("after")
    if first is None:
        raise GraphQLError(
            f"You must provide a `first` or `last` value to properly paginate the `{name}`"
            " connection.",
            extensions={"type": "MISSING_PAGINATION_BOUNDARIES"},
        )
    if first > MAX_PAGE or first < 0:
        raise GraphQLError(
            f"Requesting {first} records on the `{name}` connection exceeds the `first` limit"
            f" of {MAX_PAGE} records.",
            extensions={"type": "EXCESSIVE_PAGINATION"},
        )
    start = int(after.removeprefix("cursor:")) if after and after.startswith("cursor:") else 0
    chunk = items[start : start + first]
    cursors = [f"cursor:{start + n + 1}" for n in range(len(chunk))]
    return {
        "nodes": chunk,
        "edges": [{"node": node, "cursor": c} for node, c in zip(chunk, cursors, strict=True)],
        "totalCount": len(items),
        "pageInfo": {
            "hasNextPage": start + first < len(items),
            "hasPreviousPage": start > 0,
            "startCursor": cursors[0] if cursors else None,
            "endCursor": cursors[-1] if cursors else None,
        },
    }


class GraphQLEndpoint:
    """Answers `POST /graphql` bodies for one stand-in, as one installation sees it."""

    def __init__(self, github: GitHubState, schema_path: Path) -> None:
        self.github = github
        self.schema = load_schema(Path(schema_path))

    def answer(
        self, body: dict[str, Any], *, installation: int | None, viewer: str | None = None
    ) -> dict[str, Any]:
        """`installation`: the repositories an installation token sees (None: a person's
        token, which sees every repository of the stand-in); `viewer`: who asks (None: the
        App's bot), which decides the pending reviews it sees."""
        self.viewer = viewer or self.github.bot_login
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            return {
                "errors": [{"message": "A query attribute must be specified and must be a string."}]
            }
        try:
            document = parse(query)
        except GraphQLSyntaxError as exc:
            return {"errors": [github_error(exc)]}
        errors = validate(self.schema, document)
        if errors:
            return {"errors": [github_error(e) for e in errors]}
        variables = body.get("variables") or {}
        if not isinstance(variables, dict):
            return {"errors": [{"message": "Variables are invalid JSON."}]}
        result = execute(
            self.schema,
            document,
            root_value=self._root(installation),
            variable_values=variables,
            operation_name=body.get("operationName"),
            field_resolver=_resolve,
        )
        declared = {
            definition.variable.name.value: print_ast(definition.type)
            for operation in document.definitions
            if isinstance(operation, OperationDefinitionNode)
            for definition in operation.variable_definitions or ()
        }
        answer: dict[str, Any] = {}
        if result.errors:
            answer["errors"] = [github_error(e, declared) for e in result.errors]
        if result.data is not None:
            answer["data"] = result.data
        return answer

    # -- the objects ------------------------------------------------------------------------------

    def _root(self, installation: int | None) -> dict[str, Any]:
        github = self.github

        def repository(owner: str, name: str, followRenames: bool = True) -> dict:
            repo = github.repos.get(f"{owner}/{name}")
            if repo is None or not self._visible(repo.full_name, installation):
                raise NotFound(f"Could not resolve to a Repository with the name '{owner}/{name}'.")
            return self._repository(repo.full_name)

        def node(id: str) -> dict:
            found = self._node(id, installation)
            if found is None:
                raise NotFound(f"Could not resolve to a node with the global id of '{id}'")
            return found

        def resolve_review_thread(input: dict) -> dict:
            thread = github.review_threads.get(input["threadId"])
            if thread is None or not self._visible(thread["repo"], installation):
                raise NotFound(
                    f"Could not resolve to a node with the global id of '{input['threadId']}'"
                )
            if github.app_permissions.get("contents") != "write":  # as GitHub asks of Apps
                raise Forbidden()
            thread["resolved_by"] = github.bot_login
            return {
                "clientMutationId": input.get("clientMutationId"),
                "thread": self._thread(thread),
            }

        def add_review_thread(input: dict) -> dict:
            """A thread in the viewer's own pending review (`pullRequestReviewId`)."""
            try:
                comment = github.add_pending_thread(self.viewer, input)
            except LookupError:
                raise NotFound(
                    "Could not resolve to a node with the global id of"
                    f" '{input.get('pullRequestReviewId')}'"
                ) from None
            except ValueError as exc:
                raise GraphQLError(str(exc), extensions={"type": "UNPROCESSABLE"}) from None
            return {
                "clientMutationId": input.get("clientMutationId"),
                "thread": self._thread(github.review_threads[comment["thread_id"]]),
            }

        return {
            "repository": repository,
            "node": node,
            "resolveReviewThread": resolve_review_thread,
            "addPullRequestReviewThread": add_review_thread,
        }

    def _visible(self, full_name: str, installation: int | None) -> bool:
        repo = self.github.repos.get(full_name)
        return repo is not None and installation in (None, repo.installation_id)

    def _thread_seen(self, thread: dict) -> bool:
        """A thread of a pending review is seen by that review's author only."""
        first = self.github.review_comments[thread["comment_ids"][0]]
        review = self.github.reviews.get(first["review_id"])
        return review is None or self.github.sees(review, self.viewer)

    def _node(self, node_id: str, installation: int | None) -> dict | None:
        github = self.github
        thread = github.review_threads.get(node_id)
        if (
            thread is not None
            and self._visible(thread["repo"], installation)
            and self._thread_seen(thread)
        ):
            return self._thread(thread)
        for review in github.reviews.values():
            if (
                review_node_id(review["id"]) == node_id
                and self._visible(review["repo"], installation)
                and github.sees(review, self.viewer)
            ):
                return self._review(review)
        for comment in github.review_comments.values():
            if comment["node_id"] == node_id and self._visible(comment["repo"], installation):
                return self._comment(comment)
        return None

    def _repository(self, full_name: str) -> dict:
        github = self.github
        owner, name = full_name.split("/", 1)

        def pull_request(number: int) -> dict:
            pull = github.pulls.get((full_name, number))
            if pull is None:
                raise NotFound(f"Could not resolve to a PullRequest with the number of {number}.")
            return self._pull(full_name, number)

        return {
            "__typename": "Repository",
            "name": name,
            "nameWithOwner": full_name,
            "owner": {"__typename": "User", "login": owner},
            "pullRequest": pull_request,
        }

    def _pull(self, full_name: str, number: int) -> dict:
        github = self.github

        def review_threads(**page: Any) -> dict:
            threads = [
                self._thread(t)
                for t in github.review_threads.values()
                if t["repo"] == full_name and t["number"] == number and self._thread_seen(t)
            ]
            return connection("reviewThreads", threads, page)

        def reviews(states: list[str] | None = None, author: str | None = None, **page: Any):
            found = [
                self._review(r)
                for r in github.reviews.values()
                if r["repo"] == full_name
                and r["number"] == number
                and github.sees(r, self.viewer)
                and (states is None or r["state"] in states)
                and (author is None or github.review_author(r) == author)
            ]
            return connection("reviews", found, page)

        return {
            "__typename": "PullRequest",
            "number": number,
            "url": f"{github.web_url}/{full_name}/pull/{number}",
            "repository": lambda: self._repository(full_name),
            "reviewThreads": review_threads,
            "reviews": reviews,
        }

    def _review(self, review: dict) -> dict:
        github = self.github
        full_name, number = review["repo"], review["number"]

        def review_comments(**page: Any) -> dict:
            found = [
                self._comment(c)
                for c in github.review_comments.values()
                if c["review_id"] == review["id"]
            ]
            return connection("comments", found, page)

        return {
            "__typename": "PullRequestReview",
            "id": review_node_id(review["id"]),
            "databaseId": review["id"],
            "fullDatabaseId": str(review["id"]),
            "state": review["state"],
            "body": review.get("body") or "",
            "author": _actor(github.review_author(review)),
            "viewerDidAuthor": github.review_author(review) == self.viewer,
            "url": f"{github.web_url}/{full_name}/pull/{number}#pullrequestreview-{review['id']}",
            "comments": review_comments,
            "pullRequest": lambda: self._pull(full_name, number),
        }

    def _thread(self, thread: dict) -> dict:
        github = self.github
        comments = [github.review_comments[i] for i in thread["comment_ids"]]
        first = comments[0]
        resolver = thread["resolved_by"]

        def thread_comments(**page: Any) -> dict:
            if page.get("skip"):
                raise Unsupported("the GitHub stand-in does not skip thread comments")
            return connection("comments", [self._comment(c) for c in comments], page)

        return {
            "__typename": "PullRequestReviewThread",
            "id": thread["id"],
            "isResolved": resolver is not None,
            "isOutdated": False,
            "isCollapsed": resolver is not None,
            "path": first["path"],
            "line": first["line"],
            "startLine": first["start_line"],
            "diffSide": first["side"],
            "viewerCanResolve": resolver is None,
            "viewerCanUnresolve": resolver is not None,
            "comments": thread_comments,
            "pullRequest": lambda: self._pull(thread["repo"], thread["number"]),
        }

    def _comment(self, comment: dict) -> dict:
        return {
            "__typename": "PullRequestReviewComment",
            "id": comment["node_id"],
            "databaseId": comment["id"],
            "author": _actor(comment["user"]),
            "fullDatabaseId": str(comment["id"]),
            "body": comment["body"],
            "path": comment["path"],
            "line": comment["line"],
            "url": f"{self.github.web_url}/{comment['repo']}/pull/{comment['number']}"
            f"#discussion_r{comment['id']}",
            "pullRequest": lambda: self._pull(comment["repo"], comment["number"]),
        }


def _actor(login: str) -> dict[str, str]:
    """A comment's author as GraphQL names it: an App's bot without REST's `[bot]`."""
    if login.endswith("[bot]"):
        return {"__typename": "Bot", "login": login.removesuffix("[bot]")}
    return {"__typename": "User", "login": login}
