"""`cockpit stats` and the review gauges of `/metrics`: per provider and model, acceptance is
people's verdict only, withdrawals and refutations are counted apart, and --since and --repo
narrow what is counted."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.backend import open_database
from bot.records import ledger, review_state
from bot.records.database import Database
from bot.records.ledger import LedgerWrites, NewEntry
from bot.records.pulls import upsert_pull
from bot.records.reviews import update_review
from bot.records.runs import NewRun, finish_run, start_run
from bot.records.sessions import create_session
from bot.records.stats import ModelFigures, model_figures
from bot.records.types import DraftFinding
from bot.records.vocab import ReviewState
from bot.server import CONTEXT, make_app
from bot.stats import ModelStats, gauges, parse_since, summarise, to_json
from handlers import router

pytestmark = pytest.mark.backends

OLD = dt.datetime(2020, 6, 1, tzinfo=dt.UTC).timestamp()


def finding(n: int, **kwargs) -> DraftFinding:
    return DraftFinding(f"app/m{n}.py", "major", f"problem {n}", f"why {n}", line=n, **kwargs)


class History:
    """Reviews made through the storage functions the review job and commands use."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.job = 0

    async def pull(self, repo: str, number: int, head: str) -> int:
        return await upsert_pull(
            self.db,
            1,
            {"full_name": repo, "id": hash(repo) % 10_000},
            {"number": number, "head": {"sha": head * 40}, "base": {"ref": "main"}},
        )

    async def draft(
        self,
        pull_id: int,
        head: str,
        numbered: list[tuple[int, DraftFinding]],
        *,
        provider: str,
        model: str,
        usd: list[float | None] = (),
        writes: LedgerWrites | None = None,
    ) -> int:
        self.job += 1
        async with self.db.transaction() as conn:
            review_id = await review_state.create(conn, pull_id, head * 40, provider)
        assert await review_state.take_run(self.db, review_id, f"job:{self.job}", config_error=None)
        session = await create_session(
            self.db, provider=provider, model=model, pull_id=pull_id, review_id=review_id
        )
        for cost in usd:
            run = NewRun("review", None, session.id, review_id, provider, model, None, 0.0)
            run_id = await start_run(self.db, run, since=0.0, admit=None)
            await finish_run(
                self.db, run_id, {}, {}, status="ok", error=None, tool_calls=0, cost_usd=cost
            )
        await review_state.set_findings(self.db, review_id, numbered, writes)
        ended = await review_state.end_run(self.db, review_id, f"job:{self.job}", ReviewState.DRAFT)
        assert ended is not None
        return review_id

    async def publish(self, review_id: int, chosen: list[int]) -> None:
        assert await review_state.claim_posting(self.db, review_id, "alice", "COMMENT", chosen)
        assert await review_state.mark_posted(self.db, review_id)


def entries(pull_id: int, review_id: int, head: str, ordinals: range) -> LedgerWrites:
    return LedgerWrites(
        pull_id,
        review_id,
        head * 40,
        new=tuple(NewEntry(n, f"fp{n}", f"app/m{n}.py", "", f"problem {n}") for n in ordinals),
    )


async def make_history(db: Database) -> None:
    """claude-x on octo/widgets: a draft a person vetted (F2 dropped, F3 withdrawn by a
    revision, F4 refuted and so left out of the approve) and published, then a push that fixed
    F1 and suppressed a repeat of F2. gpt-y on octo/gadgets: one review published whole, one
    from 2020 still a draft, one that failed before its draft."""
    h = History(db)
    widgets = await h.pull("octo/widgets", 1, "a")
    first = [finding(1), finding(2), finding(3), finding(4, verify_status="refuted"), finding(5)]
    r1 = await h.draft(
        widgets, "a", list(enumerate(first, 1)), provider="claude", model="claude-x", usd=[0.3]
    )
    assert await review_state.drop_findings(db, r1, (2,), "a style choice", by="maint")
    kept = [(n, first[n - 1]) for n in (1, 4, 5)]
    assert await review_state.begin_revision(db, r1, kept, [3], by="claude", texts={"summary": "s"})
    assert await review_state.end_revision(db, r1)
    await h.publish(r1, [1, 5])
    await _ledger_fixed(h, widgets, r1)

    gadgets = await h.pull("octo/gadgets", 2, "c")
    r3 = await h.draft(
        gadgets,
        "c",
        [(1, finding(1)), (2, finding(2))],
        provider="codex",
        model="gpt-y",
        usd=[0.5],
    )
    await h.publish(r3, [1, 2])
    r4 = await h.draft(gadgets, "d", [(3, finding(3))], provider="codex", model="gpt-y")
    await update_review(db, r4, created_at=OLD)
    async with db.transaction() as conn:
        failed = await review_state.create(conn, gadgets, "e" * 40, "codex")
    await review_state.take_run(db, failed, "job:failed", config_error=None)
    await review_state.end_run(db, failed, "job:failed", ReviewState.FAILED, error="boom")


async def _ledger_fixed(h: History, pull_id: int, published_in: int) -> None:
    """The ledger of r1's numbers, a verify run priced at 0.10 on r1, and the next push: F1
    fixed, a repeat of F2 suppressed."""
    async with h.db.transaction() as conn:
        await ledger.write(conn, entries(pull_id, published_in, "a", range(1, 6)))
    session = await create_session(h.db, provider="claude", model="claude-x", review_id=None)
    run = NewRun("verify", None, session.id, published_in, "codex", "gpt-y", None, 0.0)
    run_id = await start_run(h.db, run, since=0.0, admit=None)
    await finish_run(h.db, run_id, {}, {}, status="ok", error=None, tool_calls=0, cost_usd=0.1)
    writes = LedgerWrites(pull_id, 0, "b" * 40, fixed=(1,), suppressed=((2, 1),))
    r2 = await h.draft(
        pull_id, "b", [(6, finding(6))], provider="claude", model="claude-x", writes=writes
    )
    await update_review(h.db, r2, suppressed=1)


@pytest.fixture
async def db(settings):
    """The server's own database (SQLite under COCKPIT_DATA_DIR, or the test's Postgres)."""
    database = await open_database(settings)
    yield database
    await database.close()


def by_model(rows: list[ModelStats]) -> dict[str, dict]:
    return {m["model"]: m for m in to_json(rows, since=None, repo=None)["models"]}


async def test_acceptance_counts_only_what_people_decided(db, backend):
    await make_history(db)
    models = by_model(summarise(await model_figures(db)))
    assert models["claude-x"] == {
        "provider": "claude",
        "model": "claude-x",
        "reviews": 2,  # the vetted draft and the push after it
        "findings_per_review": 3.0,  # 5 + 1
        "published": 2,  # F1, F5
        "dropped_by_people": 1,  # F2: the withdrawn F3 and the refuted F4 are not a person's no
        "acceptance": 0.667,
        "refuted": 1,
        "withdrawn": 1,
        "suppressed": 1,
        "fixed_after_publishing": 1,  # F1
        "usd": 0.4,  # the review's run and its verify run
        "usd_per_accepted": 0.2,
    }
    assert models["gpt-y"] == {
        "provider": "codex",
        "model": "gpt-y",
        "reviews": 2,  # the failed review made no draft
        "findings_per_review": 1.5,
        "published": 2,
        "dropped_by_people": 0,
        "acceptance": 1.0,
        "refuted": 0,
        "withdrawn": 0,
        "suppressed": 0,
        "fixed_after_publishing": 0,
        "usd": 0.5,
        "usd_per_accepted": 0.25,
    }


async def test_since_and_repo_narrow_what_is_counted(db, backend):
    await make_history(db)
    widgets = await model_figures(db, repo="octo/widgets")
    assert [(f.model, f.reviews) for f in widgets] == [("claude-x", 2)]
    recent = await model_figures(db, since=parse_since("2021-01-01"))
    assert [(f.model, f.reviews, f.findings) for f in recent] == [
        ("claude-x", 2, 6),
        ("gpt-y", 1, 2),
    ]
    assert await model_figures(db, repo="octo/none") == []


def cockpit(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m bot …` as a user runs it: from `cwd`, only the environment given."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env={**keep, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def server_env(settings, database_url: str | None) -> dict[str, str]:
    env = {"COCKPIT_DATA_DIR": str(settings.data_dir)}
    if database_url is not None:
        env["COCKPIT_DATABASE_URL"] = database_url
    return env


async def test_the_command_prints_the_figures_from_another_folder(
    db, backend, settings, database_url, tmp_path
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = server_env(settings, database_url)
    empty = cockpit(["stats"], elsewhere, **env)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout.startswith("No reviews yet in ")
    assert "a review counts once it has made a draft" in empty.stdout

    await make_history(db)
    done = cockpit(["stats", "--json", "--since", "2021-01-01"], elsewhere, **env)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert (found["since"], found["repo"]) == ("2021-01-01", None)
    assert [(m["model"], m["reviews"], m["acceptance"]) for m in found["models"]] == [
        ("claude-x", 2, 0.667),
        ("gpt-y", 1, 1.0),
    ]
    text = cockpit(["stats", "--repo", "octo/widgets"], elsewhere, **env)
    assert text.returncode == 0, text.stderr
    assert "claude · claude-x" in text.stdout and "gpt-y" not in text.stdout
    assert "acceptance               67% (2 published, 1 dropped by people)" in text.stdout
    assert "withdrawn in revisions   1" in text.stdout
    assert "$0.4000, $0.2000 per accepted finding" in text.stdout
    assert list(elsewhere.iterdir()) == []


async def test_bad_input_is_one_line_and_exit_2(db, backend, settings, database_url, tmp_path):
    env = server_env(settings, database_url)
    for args, says in (
        (["--since", "01/02/2024"], "cockpit stats: --since must be a date as YYYY-MM-DD"),
        (["--since", "2024-02-30"], "cockpit stats: --since must be a date as YYYY-MM-DD"),
        (["--repo", "widgets"], "cockpit stats: --repo must be OWNER/NAME"),
    ):
        done = cockpit(["stats", *args], tmp_path, **env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.startswith(says) and done.stderr.count("\n") == 1, done.stderr
        assert done.stdout == ""


@pytest.mark.sqlite_only("a SQLite file that is not there")
async def test_without_a_database_it_says_where_it_looked_and_creates_nothing(tmp_path, backend):
    done = cockpit(["stats"], tmp_path)
    assert done.returncode == 2
    database = tmp_path.resolve() / "data" / "cockpit.sqlite3"
    assert done.stderr.startswith(f"cockpit stats: there is no database at {database}")
    assert list(tmp_path.iterdir()) == []


async def test_metrics_show_the_figures_and_survive_a_database_that_cannot_count(
    settings, aiohttp_client, backend
):
    client = await aiohttp_client(make_app(settings, router))
    db = client.app[CONTEXT].db
    await make_history(db)
    text = await (await client.get("/metrics")).text()
    assert 'cockpit_review_acceptance{model="claude-x",provider="claude"} 0.6666' in text
    assert 'cockpit_review_findings_refuted{model="claude-x",provider="claude"} 1.0' in text
    assert 'cockpit_reviews{model="gpt-y",provider="codex"} 2.0' in text
    assert 'cockpit_review_usd_per_accepted_finding{model="gpt-y",provider="codex"} 0.25' in text

    await db.execute("DROP TABLE figure_totals")
    response = await client.get("/metrics")
    assert response.status == 200
    text = await response.text()
    assert "cockpit_jobs{" in text and "cockpit_review_acceptance{" not in text


@pytest.mark.parametrize(
    ("published", "dropped", "usd", "acceptance", "per_accepted"),
    [
        (0, 0, None, None, None),  # nobody decided anything yet
        (0, 3, 1.5, 0.0, None),  # every finding dropped: nothing accepted to divide by
        (3, 1, 0.9, 0.75, 0.3),
        (2, 0, None, 1.0, None),  # no run priced
    ],
)
def test_ratios(published, dropped, usd, acceptance, per_accepted):
    row = ModelStats(ModelFigures("claude", "m", 2, 5, published, dropped, 4, 4, 0, 0, usd, 0))
    assert row.acceptance == acceptance
    assert row.usd_per_accepted == (None if per_accepted is None else pytest.approx(per_accepted))
    shown = gauges([row])[("claude", "m")]
    assert ("acceptance" in shown) == (acceptance is not None)
    assert shown["refuted"] == 4 and shown["findings_per_review"] == 2.5


@pytest.mark.parametrize(
    ("text", "day"),
    [("2024-01-05", dt.datetime(2024, 1, 5, tzinfo=dt.UTC)), ("2000-02-29", None)],
)
def test_since_is_a_utc_day(text, day):
    expected = day or dt.datetime.fromisoformat(text).replace(tzinfo=dt.UTC)
    assert parse_since(text) == expected.timestamp()


@pytest.mark.parametrize("text", ["20240105", "2024-W01-5", "2024-1-5", "yesterday", ""])
def test_since_refuses_what_is_not_a_day(text):
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        parse_since(text)
