"""PR comments (`issue_comment`, `pull_request_review_comment`): `/cockpit …` commands."""

from __future__ import annotations

from gidgethub import routing

router = routing.Router()
