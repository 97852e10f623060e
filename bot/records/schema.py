"""The schema's versioned steps (`STEPS`), one text for both backends but for their triggers."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from bot.texts import OPERATOR, say

# Step 1 of the schema (below): the tables as the last release without versioned steps made
# them, with its columns added later (ADDED_COLUMNS) and what came after them (AFTER_COLUMNS).
# Frozen: a change to the schema is a new step in STEPS, never an edit here. (Its type words
# became BIGINT and DOUBLE PRECISION, which Postgres needs: SQLite reads them with the same
# affinities, INTEGER and REAL.)
SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    action TEXT,
    installation_id BIGINT,
    repo TEXT,
    body {bytes} NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    outcome TEXT,
    attempts BIGINT NOT NULL DEFAULT 0,
    processed_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS deliveries_status ON deliveries(status);

CREATE TABLE IF NOT EXISTS jobs (
    id {id},
    kind TEXT NOT NULL,
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'queued',
    attempts BIGINT NOT NULL DEFAULT 0,
    max_attempts BIGINT NOT NULL DEFAULT 3,
    run_after DOUBLE PRECISION NOT NULL,
    lease_until DOUBLE PRECISION,
    error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    started_at DOUBLE PRECISION,
    finished_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(queue, state, run_after);
CREATE INDEX IF NOT EXISTS jobs_key ON jobs(key, state);

CREATE TABLE IF NOT EXISTS pulls (
    id {id},
    installation_id BIGINT,
    repo TEXT NOT NULL,
    number BIGINT NOT NULL,
    head_sha TEXT,
    base_ref TEXT,
    clone_url TEXT,
    html_url TEXT,
    title TEXT,
    body TEXT,
    author TEXT,
    state TEXT NOT NULL DEFAULT 'open',
    draft BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION,
    UNIQUE (repo, number)
);

CREATE TABLE IF NOT EXISTS skill_versions (
    id {id},
    name TEXT NOT NULL,
    sha256 TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
    id {id},
    kind TEXT NOT NULL,
    subkind TEXT,
    session_id BIGINT,
    review_id BIGINT,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    skill_version_id BIGINT,
    status TEXT NOT NULL DEFAULT 'running',
    error TEXT,
    tool_calls BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION,
    started_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION
);

CREATE TABLE IF NOT EXISTS run_usage (
    run_id BIGINT NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION,
    PRIMARY KEY (run_id, model)
);

CREATE TABLE IF NOT EXISTS reviews (
    id {id},
    pull_id BIGINT NOT NULL,
    head_sha TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'queued',
    stale BIGINT NOT NULL DEFAULT 0,
    provider TEXT,
    verdict TEXT,
    summary TEXT,
    error TEXT,
    progress TEXT,
    pending_review_id BIGINT,
    check_run_id BIGINT,
    status_comment_id BIGINT,
    skill_version_id BIGINT,
    run_id BIGINT,
    posted_by TEXT,
    posted_event TEXT,
    not_reviewed TEXT NOT NULL DEFAULT '[]',
    config_error TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    posted_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS reviews_pull ON reviews(pull_id, id);

CREATE TABLE IF NOT EXISTS findings (
    id {id},
    review_id BIGINT NOT NULL,
    ordinal BIGINT NOT NULL,
    path TEXT NOT NULL,
    line BIGINT,
    end_line BIGINT,
    side TEXT NOT NULL DEFAULT 'RIGHT',
    severity TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL DEFAULT '',
    suggestion TEXT,
    in_diff BIGINT NOT NULL DEFAULT 0,
    verify_status TEXT,
    verify_note TEXT,
    state TEXT NOT NULL DEFAULT 'kept',
    checked_by TEXT,
    UNIQUE (review_id, ordinal)
);

CREATE TABLE IF NOT EXISTS sessions (
    id {id},
    pull_id BIGINT,
    review_id BIGINT,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    role TEXT NOT NULL DEFAULT 'primary',
    status TEXT NOT NULL DEFAULT 'active',
    parent_session_id BIGINT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);

CREATE TABLE IF NOT EXISTS messages (
    session_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    id TEXT NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    github_comment_id BIGINT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE IF NOT EXISTS session_reviews (
    id {id},
    parent_session_id BIGINT NOT NULL,
    child_session_id BIGINT NOT NULL,
    child_adapter TEXT NOT NULL,
    anchor_message_id TEXT,
    anchor_comment_id BIGINT,
    review_prompt TEXT,
    review_title TEXT,
    message_count BIGINT NOT NULL DEFAULT 0,
    started_at DOUBLE PRECISION NOT NULL,
    ended_at DOUBLE PRECISION
);

CREATE UNIQUE INDEX IF NOT EXISTS session_reviews_one_active
    ON session_reviews(parent_session_id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS sessions_pull ON sessions(pull_id, status);
CREATE UNIQUE INDEX IF NOT EXISTS messages_id ON messages(session_id, id);

CREATE TABLE IF NOT EXISTS eval_runs (
    id {id},
    golden TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    verify BIGINT NOT NULL DEFAULT 0,
    precision DOUBLE PRECISION, recall DOUBLE PRECISION, f1 DOUBLE PRECISION,
    cost_usd DOUBLE PRECISION,
    wall_seconds DOUBLE PRECISION,
    started_at DOUBLE PRECISION NOT NULL,
    finished_at DOUBLE PRECISION
);

CREATE TABLE IF NOT EXISTS eval_cases (
    id {id},
    eval_run_id BIGINT NOT NULL,
    pr BIGINT NOT NULL,
    head_sha TEXT NOT NULL,
    true_positives BIGINT, false_positives BIGINT, false_negatives BIGINT,
    precision DOUBLE PRECISION, recall DOUBLE PRECISION, f1 DOUBLE PRECISION,
    cost_usd DOUBLE PRECISION, wall_seconds DOUBLE PRECISION,
    error TEXT
);

CREATE TABLE IF NOT EXISTS eval_findings (
    id {id},
    eval_case_id BIGINT NOT NULL,
    path TEXT, line BIGINT, severity TEXT, title TEXT, body TEXT,
    matched_label BIGINT,
    verify_status TEXT
);
CREATE INDEX IF NOT EXISTS eval_cases_run ON eval_cases(eval_run_id);
CREATE INDEX IF NOT EXISTS eval_findings_case ON eval_findings(eval_case_id);

-- An LLM judge's answer for one (finding, label) pair, so scoring again costs nothing.
CREATE TABLE IF NOT EXISTS eval_judgements (
    judge TEXT NOT NULL,
    model TEXT NOT NULL,
    finding_key TEXT NOT NULL,
    label_key TEXT NOT NULL,
    match BIGINT NOT NULL,
    confidence DOUBLE PRECISION,
    reasoning TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (judge, model, finding_key, label_key)
);
"""

# Columns added after their table first shipped (part of step 1): added where missing, so a
# database older still upgrades in place. (table, column, declaration)
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("reviews", "revision", "BIGINT NOT NULL DEFAULT 1"),
    ("reviews", "revision_note", "TEXT"),
    ("session_reviews", "pull_id", "BIGINT"),
    ("session_reviews", "review_id", "BIGINT"),
    ("sessions", "error", "TEXT"),
    ("messages", "source", "TEXT"),  # the command (comment:line) a person's message came from
    ("reviews", "base_sha", "TEXT"),
    ("reviews", "verify_provider", "TEXT"),
    ("reviews", "verify_error", "TEXT"),
    ("eval_runs", "batch", "BIGINT"),
    ("eval_runs", "judge", "TEXT"),
    ("eval_runs", "status", "TEXT NOT NULL DEFAULT 'running'"),
    ("eval_runs", "options", "TEXT NOT NULL DEFAULT '{}'"),
    ("eval_runs", "verify_provider", "TEXT"),
    ("eval_runs", "tokens", "BIGINT"),
    ("eval_runs", "scores", "TEXT"),
    ("eval_cases", "case_id", "TEXT"),
    ("eval_cases", "status", "TEXT NOT NULL DEFAULT 'running'"),
    ("eval_cases", "tokens", "BIGINT"),
    ("eval_cases", "scores", "TEXT"),
    ("eval_findings", "ordinal", "BIGINT"),
    ("eval_findings", "end_line", "BIGINT"),
    ("eval_findings", "verify_note", "TEXT"),
    ("pulls", "repo_id", "BIGINT"),  # GitHub's id: a renamed repository keeps it
    ("reviews", "reason", "TEXT"),  # what started it: opened, synchronize, command …
    ("reviews", "requested_by", "TEXT"),  # the person who asked, for command reviews
    ("runs", "installation_id", "BIGINT"),  # the daily budget's runs outlive the PRs
)
# The SQLite queue's lines (on Postgres, jobs live in procrastinate's tables; SQLite also
# repairs the lines at every start: bot.records.jobs.REPAIR_LINES), and the run charge.
SQLITE_ONLY = """
-- A key runs its jobs one at a time, in order. Only its oldest unfinished job is 'queued' or
-- 'running'; the ones behind it are 'waiting', so a claim never scans a long line of jobs
-- stuck behind a busy key. These triggers keep that true whoever inserts or finishes a job
-- (the queue, the inbox, an older database after an upgrade).
CREATE TRIGGER IF NOT EXISTS jobs_wait_behind_key AFTER INSERT ON jobs
WHEN NEW.state = 'queued' AND EXISTS (
    SELECT 1 FROM jobs r WHERE r.key = NEW.key
    AND r.state IN ('queued', 'running', 'waiting') AND r.id < NEW.id)
BEGIN
    UPDATE jobs SET state = 'waiting' WHERE id = NEW.id;
END;
CREATE TRIGGER IF NOT EXISTS jobs_next_of_key AFTER UPDATE OF state ON jobs
WHEN OLD.state IN ('queued', 'running') AND NEW.state NOT IN ('queued', 'running')
BEGIN
    UPDATE jobs SET state = 'queued'
    WHERE id = (SELECT MIN(id) FROM jobs WHERE key = NEW.key AND state = 'waiting')
    AND NOT EXISTS (
        SELECT 1 FROM jobs WHERE key = NEW.key AND state IN ('queued', 'running'));
END;
-- Every run is charged to its PR's installation as it starts (whichever code starts it),
-- so the daily budget is one indexed query and survives the PR's conversation being pruned.
CREATE TRIGGER IF NOT EXISTS runs_charge_installation AFTER INSERT ON runs
WHEN NEW.installation_id IS NULL
BEGIN
    UPDATE runs SET installation_id = (
        SELECT p.installation_id FROM pulls p WHERE p.id = COALESCE(
            (SELECT pull_id FROM sessions WHERE id = NEW.session_id),
            (SELECT pull_id FROM reviews WHERE id = NEW.review_id)))
    WHERE id = NEW.id;
END;
"""
AFTER_COLUMNS = """
CREATE UNIQUE INDEX IF NOT EXISTS pulls_repo_id ON pulls(repo_id, number)
    WHERE repo_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_installation ON runs(installation_id, started_at);
CREATE INDEX IF NOT EXISTS reviews_created ON reviews(created_at);
-- One row per notice that must not repeat too often (e.g. "not allowed" per person and PR).
CREATE TABLE IF NOT EXISTS notices (
    key TEXT PRIMARY KEY,
    sent_at DOUBLE PRECISION NOT NULL
);
"""

# Every write a review's figures depend on marks its PR stale (bot.records.stats counts them
# again): its state, suppressed repeats, provider and day; its findings' states and verdicts;
# the ledger's fixes; its runs and their cost; its primary session (the model). Each trigger:
# (name, event, table, whose pull_id: the row's own or its review's, condition).
_WITH_REVIEW = "NEW.review_id IS NOT NULL"
_FIGURES = (
    (
        "figures_of_review",
        "UPDATE OF state, suppressed, provider, created_at",
        "reviews",
        "pull",
        "",
    ),
    ("figures_of_new_finding", "INSERT", "findings", "review", ""),
    ("figures_of_finding", "UPDATE OF state, checked_by, verify_status", "findings", "review", ""),
    ("figures_of_fix", "UPDATE OF fixed_in", "ledger", "pull", ""),
    ("figures_of_new_run", "INSERT", "runs", "review", _WITH_REVIEW),
    ("figures_of_run", "UPDATE OF cost_usd", "runs", "review", _WITH_REVIEW),
    ("figures_of_session", "INSERT", "sessions", "review", _WITH_REVIEW),
)
_STALE_PULL = {
    "pull": "VALUES (NEW.pull_id)",
    "review": "SELECT pull_id FROM reviews WHERE id = NEW.review_id",
}
FIGURE_TRIGGERS = "".join(
    f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {event} ON {table}"
    + (f" WHEN ({when})" if when else "")
    + f"\nBEGIN\n    INSERT INTO figures_stale (pull_id) {_STALE_PULL[by]};\nEND;\n"
    for name, event, table, by, when in _FIGURES
)

# Step 1's run charge as Postgres writes it (by trigger name).
PG_CHARGE = {
    "runs_charge_installation": """
CREATE OR REPLACE FUNCTION runs_charge_installation() RETURNS trigger AS $$
BEGIN
    IF NEW.installation_id IS NULL THEN
        NEW.installation_id := (SELECT p.installation_id FROM pulls p WHERE p.id = COALESCE(
            (SELECT pull_id FROM sessions WHERE id = NEW.session_id),
            (SELECT pull_id FROM reviews WHERE id = NEW.review_id)));
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS runs_charge_installation ON runs;
CREATE TRIGGER runs_charge_installation BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION runs_charge_installation();
""",
}
# The two ways a trigger finds the PR whose figures it marks stale, as Postgres functions.
_FIGURES_STALE = "".join(
    f"CREATE OR REPLACE FUNCTION figures_stale_by_{by}() RETURNS trigger AS $$\nBEGIN\n"
    f"    INSERT INTO figures_stale (pull_id) {pull};\n    RETURN NULL;\nEND $$ LANGUAGE plpgsql;\n"
    for by, pull in _STALE_PULL.items()
)
PG_FIGURE_TRIGGERS = {
    name: f"{_FIGURES_STALE}DROP TRIGGER IF EXISTS {name} ON {table};\n"
    f"CREATE TRIGGER {name} AFTER {event} ON {table} FOR EACH ROW"
    + (f" WHEN ({when})" if when else "")
    + f" EXECUTE FUNCTION figures_stale_by_{by}();\n"
    for name, event, table, by, when in _FIGURES
}


@dataclass(frozen=True)
class Step:
    """One versioned change of the schema: tables and indexes (`CREATE … IF NOT EXISTS`),
    then added columns, then what needs them, in the words both backends accept (`ddl` fills
    in the two that differ); then its triggers, which each backend writes its own way. Every
    statement is safe to run again, so SQLite applies every step at every start; Postgres
    applies each once (`cockpit migrate`)."""

    version: int
    name: str
    schema: str = ""
    columns: tuple[tuple[str, str, str], ...] = ()
    after: str = ""
    sqlite: str = ""
    postgres: dict[str, str] = field(default_factory=dict)  # trigger name -> its statements


# In SQLite only `INTEGER PRIMARY KEY` is the rowid (an integer, never NULL): a given key too.
SQLITE = {
    "{id}": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "{key}": "INTEGER PRIMARY KEY",
    "{bytes}": "BLOB",
}
POSTGRES = {
    "{id}": "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    "{key}": "BIGINT PRIMARY KEY",
    "{bytes}": "BYTEA",
}


def ddl(text: str, words: dict[str, str]) -> str:
    """`text` for one backend (`SQLITE`, `POSTGRES`): its key columns and byte type."""
    for word, meaning in words.items():
        text = text.replace(word, meaning)
    return text


def statements(script: str) -> list[str]:
    """A script's statements one by one (a trigger's body is part of its statement)."""
    found, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            found.append(pending.strip())
            pending = ""
    return [statement for statement in found if statement.strip("; \n")]


STEPS: tuple[Step, ...] = (
    Step(
        1,
        "the schema of the last release before versioned steps",
        SCHEMA,
        ADDED_COLUMNS,
        AFTER_COLUMNS,
        sqlite=SQLITE_ONLY,
        postgres=PG_CHARGE,
    ),
    Step(
        2,
        "command rate limits in the database; review runs owned by one job attempt",
        schema="""
-- One row per model-starting command, so every process counts the same window.
CREATE TABLE IF NOT EXISTS command_uses (
    key TEXT NOT NULL,
    used_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS command_uses_key ON command_uses(key, used_at);
""",
        # The job attempt that runs a review: a late one (a paused worker) changes nothing.
        columns=(("reviews", "run_owner", "TEXT"),),
    ),
    Step(
        3,
        "the rules a draft was made under (instructions used, severity gate, noise left out)",
        columns=(("reviews", "rules", "TEXT"),),  # JSON, see bot.records.types.DraftRules
    ),
    Step(
        4,
        "the finding ledger: a PR's findings keep their number and fingerprint across pushes",
        schema="""
-- One row per `F` number of a PR, for the PR's life: what identifies the finding across
-- pushes (never its line), when a push fixed it, and how often a repeat was suppressed. What
-- people did with it (published, dropped and why) is read from the findings of its reviews.
CREATE TABLE IF NOT EXISTS ledger (
    pull_id BIGINT NOT NULL,
    ordinal BIGINT NOT NULL,
    fingerprint TEXT NOT NULL,
    path TEXT NOT NULL,
    code_key TEXT NOT NULL,
    title_key TEXT NOT NULL,
    first_review_id BIGINT NOT NULL,
    fixed_in TEXT,
    fixed_review_id BIGINT,
    suppressed BIGINT NOT NULL DEFAULT 0,
    updated_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (pull_id, ordinal)
);
""",
        columns=(
            ("findings", "why", "TEXT"),  # a person's reason for dropping it
            ("reviews", "ledger", "TEXT"),  # JSON: what the push did to the ledger (the status)
            ("reviews", "suppressed", "BIGINT NOT NULL DEFAULT 0"),  # repeats of dropped ones
        ),
    ),
    Step(
        5,
        "who dropped a finding (the person's login, kept with their reason)",
        columns=(("findings", "dropped_by", "TEXT"),),
    ),
    Step(
        6,
        "review figures kept as reviews change; indexes of runs and sessions by review",
        schema="""
-- What each review that made a draft counts for in `cockpit stats` and /metrics (see
-- bot.records.stats), kept after the review itself is pruned: the figures outlive the
-- conversation.
CREATE TABLE IF NOT EXISTS review_figures (
    review_id {key},
    pull_id BIGINT NOT NULL,
    repo TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    findings BIGINT NOT NULL,
    published BIGINT NOT NULL,
    dropped_by_people BIGINT NOT NULL,
    refuted BIGINT NOT NULL,
    withdrawn BIGINT NOT NULL,
    suppressed BIGINT NOT NULL,
    fixed_after_publishing BIGINT NOT NULL,
    usd DOUBLE PRECISION,
    priced_runs BIGINT NOT NULL,
    unpriced_runs BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS review_figures_pull ON review_figures(pull_id);
-- Their sums per provider and model (USD in nano-dollars: sums taken back stay exact), so a
-- scrape reads a row per model whatever the history.
CREATE TABLE IF NOT EXISTS figure_totals (
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    reviews BIGINT NOT NULL DEFAULT 0,
    findings BIGINT NOT NULL DEFAULT 0,
    published BIGINT NOT NULL DEFAULT 0,
    dropped_by_people BIGINT NOT NULL DEFAULT 0,
    refuted BIGINT NOT NULL DEFAULT 0,
    withdrawn BIGINT NOT NULL DEFAULT 0,
    suppressed BIGINT NOT NULL DEFAULT 0,
    fixed_after_publishing BIGINT NOT NULL DEFAULT 0,
    usd_nanos BIGINT NOT NULL DEFAULT 0,
    priced_runs BIGINT NOT NULL DEFAULT 0,
    unpriced_runs BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, model)
);
-- PRs whose reviews' figures must be counted again: the triggers below add one row per
-- change (never one per PR, so a change made while its PR is being counted is not lost).
CREATE TABLE IF NOT EXISTS figures_stale (
    id {id},
    pull_id BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS figures_stale_pull ON figures_stale(pull_id);
CREATE INDEX IF NOT EXISTS runs_review ON runs(review_id);
CREATE INDEX IF NOT EXISTS runs_session ON runs(session_id);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_at);
CREATE INDEX IF NOT EXISTS sessions_review ON sessions(review_id, role, id);
""",
        sqlite=FIGURE_TRIGGERS,
        postgres=PG_FIGURE_TRIGGERS,
    ),
    Step(
        7,
        "a finding's evidence and the reviewer's confidence (NULL: drafted before they were asked)",
        columns=(("findings", "evidence", "TEXT"), ("findings", "confidence", "BIGINT")),
    ),
    Step(
        8,
        "an eval finding's confidence, so a resumed eval folds by min_confidence as production did",
        columns=(("eval_findings", "confidence", "BIGINT"),),
    ),
    Step(
        9,
        "people's GitHub sign-ins: their user tokens (encrypted) and used sign-in states",
        schema="""
-- One row per GitHub user who signed in: the access and refresh tokens and their expiry
-- times, sealed with AES-GCM (bot/auth/seal.py); never a token in plain text.
CREATE TABLE IF NOT EXISTS user_tokens (
    user_id {key},
    login TEXT NOT NULL,
    sealed {bytes} NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL
);
-- Sign-in states already used (each works once), kept until they would have expired.
CREATE TABLE IF NOT EXISTS sign_in_states (
    nonce TEXT PRIMARY KEY,
    expires_at DOUBLE PRECISION NOT NULL
);
""",
    ),
    Step(
        10,
        "the vetter's pending review: who holds a draft, what was put in it, what they published",
        columns=(
            ("reviews", "vetter", "TEXT"),  # the login whose pending review holds the draft
            ("reviews", "vetter_review_id", "BIGINT"),  # that pending review (GitHub's id)
            ("findings", "vetted_text", "TEXT"),  # the comment put in the vetter's review
            ("findings", "published_text", "TEXT"),  # as that person published it
            ("findings", "edited", "BIGINT"),  # 1: they changed it before publishing
        ),
    ),
    Step(
        11,
        "the drafts a person holds as their pending review, found by index (the page's inbox)",
        schema="""
CREATE INDEX IF NOT EXISTS reviews_vetter ON reviews(vetter) WHERE vetter IS NOT NULL;
""",
    ),
)
SCHEMA_VERSION = STEPS[-1].version
# Which steps a database has, and when they came (both backends).
VERSIONS = """
CREATE TABLE IF NOT EXISTS schema_versions (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL
);
"""


class SchemaBehind(RuntimeError):
    """The database's schema is older than this release's (the message says what to run)."""


def behind(version: int, *, missing: int = 0, on_start: bool = False) -> SchemaBehind | None:
    """SchemaBehind when a database at `version` (and `missing` procrastinate migrations)
    lacks what this release needs; None when it has it (a newer schema is fine: steps only
    add, so a rollout may run both). `on_start`: COCKPIT_MIGRATE_ON_START would apply it."""
    if version >= SCHEMA_VERSION and not missing:
        return None
    said = say(
        OPERATOR,
        "schema_behind",
        version=version,
        needed=SCHEMA_VERSION,
        missing=missing,
        on_start=on_start,
    )
    return SchemaBehind(said)


@dataclass
class Migrated:
    """What a migration did: the schema's version before and after it, our steps recorded
    now, and (Postgres) procrastinate's migrations applied now."""

    before: int
    version: int = 0
    steps: list[int] = field(default_factory=list)
    procrastinate: list[str] = field(default_factory=list)
    procrastinate_schema: str = ""  # "created" (a new database) or "recorded" (an older one)
