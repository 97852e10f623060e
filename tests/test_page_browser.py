"""The cockpit page end to end in headless Chromium: a real `cockpit serve` reviews a PR (the
scripted model), a person signs in from the page with GitHub (the stand-in's authorize page),
sees the inbox with two repositories of which they may see one, opens the draft, drops a
finding with a reason (read back from the database), vets the draft (her pending review holds
it, the inbox lists it as hers), opens the figures; a PR title made of
script and event-handler markup shows as text and runs nothing. Screenshots of each page go
to $COCKPIT_ARTIFACTS (default: the test's temporary folder)."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from bot.standin.models import AnthropicStandin
from bot.standin.scripted import scripted_reviewer
from tests import deliveries
from tests.conftest import WEBHOOK_SECRET, wait_for
from tests.test_register import Chromium
from tests.test_signin import Cockpit
from tests.world import build_world

PWNED = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> Parse input'


class Browser(Chromium):
    async def call(self, method: str, params: dict | None = None) -> dict:
        assert self.ws is not None
        self.ids += 1
        await self.ws.send_json({"id": self.ids, "method": method, "params": params or {}})
        while True:
            answer = await self.ws.receive_json(timeout=30)
            if answer.get("id") == self.ids:
                return answer.get("result") or {}

    async def go(self, url: str, ready: str) -> None:
        """Navigate, then wait until `ready` (a CSS selector) is on the new page."""
        await self.call("Page.navigate", {"url": url})
        await self.until(ready)

    async def until(self, selector: str) -> None:
        expression = f"!!document.querySelector({json.dumps(selector)})"

        async def there() -> bool:
            return bool(await self.evaluate(expression))

        await wait_for(there, 30)

    async def screenshot(self, path: Path) -> None:
        found = await self.call("Page.captureScreenshot", {"format": "png"})
        path.write_bytes(base64.b64decode(found["data"]))

    async def text(self) -> str:
        return await self.evaluate("document.body.innerText") or ""


@pytest.fixture
async def model():
    standin = AnthropicStandin(scripted_reviewer)
    await standin.start()
    yield standin
    await standin.stop()


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("COCKPIT_ARTIFACTS") or tmp_path / "artifacts")
    where.mkdir(parents=True, exist_ok=True)
    return where


async def test_sign_in_inbox_draft_drop_and_figures_in_chromium(tmp_path, github, model):
    world = build_world(github, tmp_path, permissions={"octocat": "admin", "alice": "admin"})
    secret = github.add_repo(
        "octo", "secret", clone_url="https://example.test/s.git", installation_id=99
    )
    github.user_access.grant("alice", "octo/widgets")
    github.web_user = "alice"
    cockpit = Cockpit(
        github,
        tmp_path,
        None,
        ANTHROPIC_BASE_URL=model.url,
        COCKPIT_OPERATORS="carol",
    )
    await cockpit.server.start()
    shots = artifacts(tmp_path)
    browser = Browser(tmp_path / "profile")
    try:
        for repo, number, title, delivery in (
            (world, world.pr.number, PWNED, "d-1"),
            (None, 5, "Secret work", "d-2"),
        ):
            data = world.pull_request_payload("opened")
            data["pull_request"]["title"] = title
            if repo is None:  # the other repository: stored, its review not awaited
                deliveries.retarget(
                    data,
                    owner="octo",
                    name="secret",
                    clone_url="x",
                    installation_id=99,
                    repo_id=secret.id,
                )
                data["number"] = data["pull_request"]["number"] = number
            body = json.dumps(data).encode()
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    f"{cockpit.url}/webhooks/github",
                    data=body,
                    headers=deliveries.headers("pull_request", body, WEBHOOK_SECRET, delivery),
                ) as response,
            ):
                assert response.status == 202
        await wait_for(lambda: bool(world.pending_reviews()), timeout=90)

        await browser.open(cockpit.url + "/")
        await browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 860, "deviceScaleFactor": 1, "mobile": False},
        )
        await browser.until("#signin")
        await browser.screenshot(shots / "page-signin.png")
        await browser.evaluate("document.getElementById('signin').click()")
        await browser.until("#authorize")
        await browser.evaluate("document.getElementById('authorize').click()")
        await browser.until("#result")
        assert "Signed in as @alice" in await browser.text()

        await browser.go(cockpit.url + "/", "#drafts")
        inbox = await browser.text()
        assert "octo/widgets#1" in inbox and "octo/secret" not in inbox
        assert "<script>window.pwned=1</script>" in inbox  # shown as text
        assert await browser.evaluate("window.pwned === undefined")
        await browser.screenshot(shots / "page-inbox.png")

        await browser.go(cockpit.url + "/r/octo/widgets/pull/1", "#drop-1")
        await browser.screenshot(shots / "page-draft.png")
        await browser.evaluate(
            "document.getElementById('reason-1').value = 'the input is trusted here';"
            "document.getElementById('drop-1').click()"
        )
        await browser.until("#notice")
        assert not await browser.evaluate("!!document.getElementById('drop-1')")
        assert await browser.evaluate("window.pwned === undefined")
        await browser.screenshot(shots / "page-dropped.png")

        # Vet: the draft becomes alice's own pending review (as `/cockpit vet` from her).
        await browser.go(cockpit.url + "/r/octo/widgets/pull/1", "#vet")
        await browser.evaluate("document.getElementById('vet').click()")
        await browser.until("#notice")
        assert "is your pending review" in await browser.text()
        held = github.pending_of("octo/widgets", 1, "alice")
        assert held is not None and "**F1" not in str(held.get("comments"))  # F1 was dropped
        await browser.go(cockpit.url + "/", "ul#held")
        assert "octo/widgets#1" in await browser.evaluate(
            "document.querySelector('ul#held').innerText"
        )

        await browser.go(cockpit.url + "/stats", "svg.chart")
        figures = await browser.text()
        assert "Per provider and model" in figures and "octo/secret" not in figures
        assert "claude" in figures  # the review of octo/widgets counted for its figures
        await browser.screenshot(shots / "page-figures.png")
        await browser.go(cockpit.url + "/r/octo/secret/pull/5", "h1")
        assert "Not found" in await browser.text()
    finally:
        await browser.close()
        cockpit.server.terminate()
    with sqlite3.connect(cockpit.data_dir / "cockpit.sqlite3") as conn:
        rows = conn.execute(
            "SELECT f.state, f.dropped_by, f.why FROM findings f JOIN reviews r"
            " ON r.id = f.review_id JOIN pulls p ON p.id = r.pull_id"
            " WHERE p.repo = 'octo/widgets' AND f.ordinal = 1"
        ).fetchall()
    assert rows == [("dropped", "alice", "the input is trusted here")]
    for name in ("signin", "inbox", "draft", "dropped", "figures"):
        assert (shots / f"page-{name}.png").stat().st_size > 1000
