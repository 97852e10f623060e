"""Attacks on sign-in, vet, reconcile and the cockpit page (#30, #31) that found something:
each test is a way in that used to work."""

from __future__ import annotations

import pytest

from tests.test_signin import browser, cockpit, follow  # noqa: F401 - the fixture

pytestmark = pytest.mark.backends


async def test_a_link_another_user_completes_still_works_for_its_owner(cockpit, github):  # noqa: F811
    """The vet reply's sign-in link is public on the PR: anyone who opens it and signs in as
    themselves must not use it up for the person it was made for."""
    link = cockpit.link("alice")
    github.web_user = "bob"
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 403 and "for another GitHub user" in page
    github.web_user = "alice"
    async with browser() as http:
        status, page, _ = await follow(http, link)
    assert status == 200 and "Signed in as @alice" in page, page
    assert [row[1] for row in await cockpit.token_rows()] == ["alice"]
