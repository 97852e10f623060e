"""Signed webhook deliveries built from GitHub's published example payloads."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import re
import uuid
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "github"
WEBHOOKS = FIXTURES / "webhooks"
GHES_WEBHOOKS = FIXTURES / "webhooks-ghes"
OPENAPI = FIXTURES / "openapi-subset.json"
GRAPHQL_SCHEMA = FIXTURES / "graphql-schema.graphql"
_GHES_HOST = "https://octocoders.github.io"  # the host in the published GHES examples
_GHES_REPO = "Codertocat/Hello-World"


def payload(name: str) -> dict[str, Any]:
    """A fresh copy of a published payload, e.g. `payload("pull_request.opened")`."""
    return copy.deepcopy(json.loads((WEBHOOKS / f"{name}.json").read_text()))


def ghes_payload(name: str, *, host: str, full_name: str, number: int) -> dict[str, Any]:
    """A payload published from GitHub Enterprise Server (`webhooks-ghes/`), its absolute URLs
    (`<host>/api/v3/repos/…`, `<host>/<owner>/<repo>/…`) moved to `host`, `full_name` and PR
    `number`: live URLs on the stand-in, so nothing but the client's refusal keeps the bot
    from calling one."""
    text = (GHES_WEBHOOKS / f"{name}.json").read_text()
    text = text.replace(_GHES_HOST, host).replace(_GHES_REPO, full_name)
    text = re.sub(r"/(pulls|pull|issues)/\d+\b", rf"/\1/{number}", text)
    return json.loads(text)


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def headers(event: str, body: bytes, secret: str, delivery_id: str | None = None) -> dict:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(body, secret),
        "Content-Type": "application/json",
    }


def as_pr_comment(data: dict[str, Any], pr_number: int) -> dict[str, Any]:
    """Published issue_comment examples are on plain issues; make it a PR comment as GitHub does."""
    issue = data["issue"]
    repo = data["repository"]["full_name"]
    issue["number"] = pr_number
    issue["pull_request"] = {
        "url": f"https://api.github.com/repos/{repo}/pulls/{pr_number}",
        "html_url": f"https://github.com/{repo}/pull/{pr_number}",
        "diff_url": f"https://github.com/{repo}/pull/{pr_number}.diff",
        "patch_url": f"https://github.com/{repo}/pull/{pr_number}.patch",
        "merged_at": None,
    }
    return data


def retarget(
    data: dict[str, Any],
    *,
    owner: str,
    name: str,
    clone_url: str,
    installation_id: int,
    default_branch: str = "main",
    repo_id: int | None = None,
) -> dict[str, Any]:
    """Point a published payload at a stand-in repository and installation (`repo_id`: the
    stand-in's id of it, as GitHub's payloads carry the repository's own id)."""
    repo = data["repository"]
    if repo_id is not None:
        repo["id"] = repo_id
    repo["name"] = name
    repo["default_branch"] = default_branch  # the stand-in's repositories' (the examples': master)
    repo["full_name"] = f"{owner}/{name}"
    repo["owner"]["login"] = owner
    repo["clone_url"] = clone_url
    data["installation"] = {
        "id": installation_id,
        "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uMQ==",
    }
    return data
