"""`.github/cockpit.toml`: one table of keys, and everything derived from it — parsing (bad keys
reported, the rest applies), gitignore-style globs, the JSON Schema for editors, the README's
reference table — held together by table tests and a property test."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import PROVIDERS
from bot.inputs import reference_rows
from bot.repo_config import (
    KEYS,
    Keys,
    PathRule,
    Provider,
    RepoConfig,
    default_of,
    effective,
    from_data,
    json_schema,
    parse_repo_config,
    reference_table,
    schema_text,
)

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "templates" / "cockpit.schema.json"
CHOICES = ", ".join(f'"{p}"' for p in PROVIDERS)


def readme_config_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("### Per-repository rules: `.github/cockpit.toml`")
    return text[start : text.index("\n## ", start)]


# -- the derived forms agree with the table ----------------------------------------------------


def test_the_readme_reference_table_is_generated_from_the_keys():
    section = readme_config_section()
    assert reference_table() in section, (
        "README's table of keys is out of date: paste `python -m bot.repo_config table`"
    )


def test_the_shipped_json_schema_is_generated_from_the_keys():
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "templates/cockpit.schema.json is out of date: "
        "python -m bot.repo_config schema > templates/cockpit.schema.json"
    )
    jsonschema.Draft7Validator.check_schema(json.loads(SCHEMA_FILE.read_text()))


def test_the_readme_example_is_marked_and_parses_cleanly():
    section = readme_config_section()
    assert "An example (not the defaults" in section
    example = re.search(r"```toml\n(.*?)```", section, re.S).group(1)
    config = parse_repo_config(example)
    assert config.problems == ()
    assert config != RepoConfig()  # it shows changes, and says it is not the defaults
    assert not jsonschema_errors(tomllib.loads(example))


def test_every_field_of_a_key_has_its_meaning_and_a_default_the_parser_accepts():
    for row in reference_rows(Keys):
        assert row.meaning and row.type
        name, default = row.name, default_of(row.name)
        if default is not None and default != "" and default != ():
            written = {name: list(default) if isinstance(default, tuple) else default}
            assert parse_repo_config(json_to_toml(written)).problems == (), name
    assert {"instructions", "paths", "min_severity", "max_findings"} <= set(KEYS)


def test_the_provider_choices_come_from_the_server_config():
    types = {row.name: row.type for row in reference_rows(Keys)}
    assert tuple(Provider) == PROVIDERS and types["provider"] == types["verify_provider"]


# -- parsing: what applies, what is reported ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "applied", "problems"),
    [
        ("", {}, []),
        ("max_files = 10\n", {"max_files": 10}, []),
        (
            'max_files = 10\ncolour = "blue"\n',
            {"max_files": 10},
            ["unknown key `colour` (ignored)"],
        ),
        (
            "verify = true\nmax_files = 0\n",
            {"verify": True},
            ["`max_files` must be at least 1 (the default applies)"],
        ),
        (
            'auto_review = "yes"\nreview_drafts = true\n',
            {"review_drafts": True},
            ["`auto_review` must be true or false (the default applies)"],
        ),
        ("max_files = true\n", {}, ["`max_files` must be an integer (the default applies)"]),
        (
            'provider = "gemini"\n',
            {},
            [f"`provider` must be one of {CHOICES} (the default applies)"],
        ),
        ("[review]\nverify = true\nmax_files = 5\n", {"verify": True, "max_files": 5}, []),
        (
            "[review]\nwhatever = 1\n",
            {},
            ["unknown key `review.whatever` (ignored)"],
        ),
        (
            "max_files = 5\n[review]\nmax_files = 7\n",
            {"max_files": 7},
            ["`max_files` is set twice (the last one applies)"],
        ),
        ('"$schema" = "./cockpit.schema.json"\nverify = true\n', {"verify": True}, []),
        ('ignore = ["docs/**", "*.svg"]\n', {"ignore": ("docs/**", "*.svg")}, []),
        (
            'ignore = ["docs/**", 3]\nverify = true\n',
            {"verify": True},
            ["`ignore` entry 2 (3) is not a non-empty string (the default applies)"],
        ),
        (
            'ignore = ["#notes"]\n',
            {},
            [
                "`ignore` entry 1 (\"#notes\") starts with `#`, which gitignore reads as a "
                "comment (write `\\#`) (the default applies)"
            ],
        ),
        (
            'ignore = "docs/*"\n',
            {},
            ["`ignore` must be a list of glob strings (the default applies)"],
        ),
        (
            '[[review.paths]]\nglob = "src/api/**"\ninstructions = "Check auth."\n',
            {"paths": (PathRule("src/api/**", "Check auth."),)},
            [],
        ),
        (
            '[[review.paths]]\nglob = "src/**"\n',
            {},
            ["`review.paths` table 1 needs both `glob` and `instructions` (the default applies)"],
        ),
        (
            '[[review.paths]]\nglob = "!src/**"\ninstructions = "x"\n',
            {},
            [
                '`review.paths` table 1: `glob` ("!src/**") cannot be negated here '
                "(the default applies)"
            ],
        ),
        (
            '[[review.paths]]\nglob = "a"\ninstructions = "x"\nscope = 1\n',
            {},
            ["`review.paths` table 1 has unknown key(s) `scope` (the default applies)"],
        ),
        (
            'min_severity = "major"\nmax_findings = 10\n',
            {"min_severity": "major", "max_findings": 10},
            [],
        ),
        (
            'min_severity = "blocker"\n',
            {},
            [
                '`min_severity` must be one of "critical", "major", "minor", "nit" '
                "(the default applies)"
            ],
        ),
        (
            'instructions = "Prefer small functions."\n',
            {"instructions": "Prefer small functions."},
            [],
        ),
        ("instructions = 3\n", {}, ["`instructions` must be a string (the default applies)"]),
    ],
)  # fmt: skip
def test_each_key_is_checked_and_the_rest_applies(text, applied, problems):
    config = parse_repo_config(text)
    assert list(config.problems) == problems
    assert config.unusable is False
    assert config.set_keys == frozenset(applied)
    for name in KEYS:
        assert getattr(config, name) == applied.get(name, default_of(name)), name
    assert (config.error is None) == (not problems)
    if problems:
        assert config.error.endswith("The rest of the file applies")


def test_a_file_that_is_not_toml_gives_the_defaults_and_says_why():
    config = parse_repo_config("auto_review = maybe\n")
    assert config.unusable and config == RepoConfig()
    assert config.error.startswith("`.github/cockpit.toml` was not used: it is not valid TOML")
    assert config.error.endswith("The defaults apply")


def test_a_config_survives_the_job_payload():
    config = parse_repo_config(
        'ignore = ["a/**"]\nmax_findings = 3\ncolour = 1\n'
        '[[review.paths]]\nglob = "x/*"\ninstructions = "y"\n'
    )
    again = RepoConfig.from_payload(json.loads(json.dumps(config.to_payload())))
    assert again == config
    assert (again.problems, again.set_keys, again.source) == (
        config.problems,
        config.set_keys,
        config.source,
    )


def test_an_older_payload_still_loads():
    old = {"auto_review": True, "ignore": ["docs/*"], "max_files": 60, "error": None}
    assert RepoConfig.from_payload(old).ignore == ("docs/*",)


def test_effective_values_say_which_came_from_the_file():
    shown = {s.key: s for s in effective(parse_repo_config('max_files = 9\nignore = ["*.md"]\n'))}
    assert (shown["max_files"].value, shown["max_files"].from_file) == ("9", True)
    assert (shown["ignore"].value, shown["ignore"].from_file) == ('["*.md"]', True)
    assert (shown["verify"].value, shown["verify"].from_file) == ("false", False)
    assert shown["provider"].value == "" and "COCKPIT_PROVIDER" in shown["provider"].unset


# -- globs: gitignore rules, not fnmatch -------------------------------------------------------


@pytest.mark.parametrize(
    ("globs", "path", "ignored"),
    [
        (["*.svg"], "logo.svg", True),
        (["*.svg"], "assets/img/logo.svg", True),  # no slash: any depth
        (["docs/*"], "docs/guide.md", True),
        (["docs/*"], "src/docs/guide.md", False),  # a slash in it: anchored at the root
        (["docs/*.md"], "docs/api/guide.md", False),  # `*` does not cross `/` (fnmatch's did)
        (["docs/**"], "docs/api/v2/guide.md", True),
        (["**/fixtures/*.json"], "tests/unit/fixtures/a.json", True),
        (["**/fixtures/*.json"], "fixtures/a.json", True),
        (["**/fixtures/*.json"], "fixtures/deep/a.json", False),
        (["/build"], "build/out.js", True),
        (["/build"], "src/build/out.js", False),
        (["vendor/"], "vendor/lib/x.go", True),
        (["vendor/"], "src/vendor/lib/x.go", True),
        (["vendor/"], "vendor", False),  # a file named vendor is not a folder
        (["generated"], "api/generated/x.py", True),
        (["*.lock", "!poetry.lock"], "poetry.lock", False),
        (["*.lock", "!poetry.lock"], "Cargo.lock", True),
        (["docs/**", "!docs/api/**"], "docs/api/x.md", False),
        (["docs/**", "!docs/api/**"], "docs/guide.md", True),
        (["\\#notes"], "#notes", True),
        (["src/*.py"], "src/app.py", True),
        (["src/*.py"], "src/sub/app.py", False),
        ([], "anything", False),
    ],
)
def test_ignore_globs_follow_gitignore_rules(globs, path, ignored):
    config = parse_repo_config(json_to_toml({"ignore": globs}))
    assert config.problems == ()
    assert config.ignores(path) is ignored


@pytest.mark.parametrize("glob", ["[z-a]", "[@-!]x", "src/[9-0]*.py"])
def test_a_glob_whose_bracket_cannot_match_is_a_problem_not_a_crash(glob):
    # pathspec turns `[z-a]` into a regex Python refuses (re.error, not a ValueError); a test of
    # every template with hostile text found it as a crash while reading the config
    ignore = f"ignore = [{json.dumps(glob)}]\n"
    paths = f"[[review.paths]]\nglob = {json.dumps(glob)}\ninstructions = 'x'\n"
    for config in (ignore, paths):
        problems = parse_repo_config(config).problems
        assert len(problems) == 1 and "is not a gitignore-style glob" in problems[0], problems


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("src/api/**", "src/api/v1/users.py", True),
        ("src/api/**", "src/apikeys.py", False),
        ("*.sql", "db/migrations/001.sql", True),
        ("tests/", "tests/unit/test_x.py", True),
        ("*", "\n", True),  # git's `*` takes a newline as any character
        ("*.py", "a.py\n", False),  # and a name ending in one is not a .py file
    ],
)
def test_path_rules_match_like_ignore_globs(glob, path, matches):
    assert PathRule(glob, "x").matches(path) is matches


# -- the schema and the parser agree -----------------------------------------------------------


def jsonschema_errors(data: dict) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(json_schema()).iter_errors(data)]


def json_to_toml(data: dict) -> str:
    """Simple values only (enough for these tests): JSON literals are TOML literals."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in data.items())


GOOD_VALUES = {
    "boolean": st.booleans(),
    "integer": st.integers(min_value=1, max_value=10**9),
    "text": st.text(max_size=50),
    "globs": st.lists(st.sampled_from(["docs/**", "*.svg", "!a.svg", "/build", "vendor/"])),
}
# TOML tells `1.0` from `1`, JSON Schema does not (1.0 is an integer there): whole floats
# are refused by the parser and let through by an editor, the one known difference.
BAD_VALUES = st.one_of(
    st.floats(allow_nan=False).filter(lambda f: not f.is_integer()),
    st.lists(st.integers(), min_size=1),
)


GOOD_BY_KEY = {
    "auto_review": GOOD_VALUES["boolean"],
    "review_drafts": GOOD_VALUES["boolean"],
    "verify": GOOD_VALUES["boolean"],
    "provider": st.sampled_from(PROVIDERS),
    "verify_provider": st.sampled_from(PROVIDERS),
    "ignore": GOOD_VALUES["globs"],
    "max_files": GOOD_VALUES["integer"],
    "max_diff_bytes": GOOD_VALUES["integer"],
    "max_findings": GOOD_VALUES["integer"],
    "approve_permission": st.sampled_from(["write", "maintain", "admin"]),
    "outside_prs": st.sampled_from(["review", "on-command"]),
    "instructions": GOOD_VALUES["text"],
    "min_severity": st.sampled_from(["critical", "major", "minor", "nit"]),
    "verify_publish": st.sampled_from(["not_refuted", "confirmed"]),
    "min_confidence": st.integers(min_value=0, max_value=100),
    "passes": st.integers(min_value=1, max_value=5),
}


@st.composite
def files(draw) -> tuple[dict, bool]:
    """A file's keys (some unknown, some with values of the wrong type) and whether the parser
    and the schema should both accept it."""
    data, clean = {}, True
    for name in draw(st.lists(st.sampled_from(sorted(KEYS)), unique=True, max_size=6)):
        if draw(st.booleans()) and name != "paths":
            data[name] = draw(BAD_VALUES)
            clean = False
        elif name == "paths":
            data[name] = [{"glob": "src/**", "instructions": draw(st.text(max_size=20))}]
        else:
            data[name] = draw(GOOD_BY_KEY[name])
    if draw(st.booleans()):
        data[draw(st.sampled_from(["colour", "max_file", "Verify"]))] = 1
        clean = False
    return data, clean


@given(files())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_schema_accepts_exactly_what_the_parser_applies_whole(case):
    data, clean = case
    config = from_data(data)
    assert (config.problems == ()) is clean
    assert (jsonschema_errors(data) == []) is clean
    assert config.set_keys <= set(data)  # what was refused or unknown keeps its default
