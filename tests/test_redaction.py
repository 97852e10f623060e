"""One redaction for logs, GitHub and the terminal: every secret masked as a whole, URL
user-info masked, and ordinary words that merely contain a short secret left alone."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from bot.redaction import ANYWHERE, MASK, SHORTEST, environment_secrets, mask, url_passwords

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)
WORD_CHARS = st.characters(categories=("L", "Nd"), codec="utf-8") | st.just("_")
NOT_WORD = st.sampled_from(list(" \n\t.,;:!?()[]{}<>\"'=/@-+`|~^&%$#"))


def whole(secret: str) -> re.Pattern[str]:
    """The secret where it is not part of a longer word."""
    return re.compile(rf"(?<!\w){re.escape(secret)}(?!\w)")


@given(
    before=TEXT,
    after=TEXT,
    secret=st.text(min_size=ANYWHERE, max_size=40).filter(lambda s: s.strip("*")),
)
def test_a_long_secret_never_survives_anywhere(before, after, secret):
    assert secret not in mask(before + secret + after, [secret])
    assert secret not in mask(before + secret + secret + after, [secret])


@given(
    before=TEXT,
    after=TEXT,
    left=NOT_WORD,
    right=NOT_WORD,
    secret=st.text(WORD_CHARS, min_size=SHORTEST, max_size=ANYWHERE - 1),
)
def test_a_short_secret_never_survives_as_a_word_of_its_own(before, after, left, right, secret):
    for text in (secret, f"{before}{left}{secret}{right}{after}", f"{secret}{right}{after}"):
        masked = mask(text, [secret])
        assert not whole(secret).search(masked)
        if not whole(secret).search(before + after):
            assert masked.count(MASK) >= 1


@given(
    head=st.text(WORD_CHARS, min_size=1, max_size=6),
    tail=st.text(WORD_CHARS, min_size=1, max_size=6),
    secret=st.text(WORD_CHARS, min_size=SHORTEST, max_size=ANYWHERE - 1),
    others=st.lists(st.text(WORD_CHARS, min_size=1, max_size=10), max_size=6),
)
def test_words_that_merely_contain_a_short_secret_survive(head, tail, secret, others):
    text = " ".join([*others, head + secret + tail, *others])
    assume(not whole(secret).search(text))  # it is nowhere a word of its own
    assume(mask(text, []) == text)  # no token shape happens to be in the words
    assert mask(text, [secret]) == text


@given(
    scheme=st.sampled_from(["http", "https", "postgresql", "git+ssh"]),
    user=st.text(st.characters(codec="ascii", categories=("L", "Nd")), min_size=1, max_size=12),
    password=st.text(
        st.characters(codec="ascii", categories=("L", "Nd", "Pd"), include_characters="/?#@+"),
        min_size=1,
        max_size=20,
    ),
    host=st.sampled_from(["127.0.0.1:8000", "gw.internal", "[::1]:5432"]),
)
def test_url_user_info_is_masked(scheme, user, password, host):
    # A port and a path (`host:8080/…`) look like a user and a password that starts with
    # digits and a `/`: such a password is masked only when it was registered.
    assume(not re.match(r"\d{1,5}(?:[/?#]|$)", password))
    url = f"{scheme}://{user}:{password}@{host}/v1"
    said = mask(f'cannot reach {url} ("{url}")', [])
    assert said == f'cannot reach {scheme}://***@{host}/v1 ("{scheme}://***@{host}/v1")'


@given(
    before=TEXT,
    secret=st.text(min_size=1, max_size=SHORTEST - 1),
    after=TEXT,
)
def test_a_value_too_short_to_be_a_secret_is_never_masked(before, secret, after):
    text = f"{before} {secret} {after}"
    assert mask(text, [secret]) == mask(text, [])


@pytest.mark.parametrize(
    ("text", "secrets", "shown"),
    [
        ("cannot reach the loadbalancer", ["balancer"], "cannot reach the loadbalancer"),
        ("key balancer refused", ["balancer"], "key *** refused"),
        ("Authorization: Bearer balancer", ["balancer"], "Authorization: Bearer ***"),
        ("key=balancer&x=1", ["balancer"], "key=***&x=1"),
        ("pw_balancer", ["balancer"], "pw_balancer"),  # a word of its own name: left as it is
        ("key gw-key-7f3a9c2e may not use tools", ["gw-key-7f3a9c2e"], "key *** may not use tools"),
        ("xgw-key-7f3a9c2e1b", ["gw-key-7f3a9c2e1b"], "x***"),  # long: wherever it is
        # The dummy keys local servers take are no secrets: the text stays as it was.
        ("add a test for this", ["test"], "add a test for this"),
        ("ollama said EMPTY, none local", ["ollama", "EMPTY", "none", "local"], None),
        ("https://alice:Gw-Pass-0042@gw/v1", [], "https://***@gw/v1"),
        ("https://ghp_token@github.com/o/r", [], "https://***@github.com/o/r"),
        ("https://alice:p@ss@gw/v1", [], "https://***@gw/v1"),  # the last @ of the host
        ("https://alice:p/ss@gw/v1", [], "https://***@gw/v1"),  # a `/` is no end
        ("postgresql://cockpit:q8/Zx+Yw3k@db:5432/x", [], "postgresql://***@db:5432/x"),
        ("http://a:b?c#d@h/x.", [], "http://***@h/x."),
        ("http://u:pw", [], "http://u:pw"),  # no `@`: no user-info
        ("http://localhost:8080/@scope/pkg", [], None),  # a port, then a path with an @
        ("https://www.npmjs.com/package/@types/node", [], None),
        ("mail alice@example.com", [], "mail alice@example.com"),
        ("fix/task-management-refactor", [], "fix/task-management-refactor"),
        ("key sk-ant-api03-abcdefghijklmnop", [], "key ***"),
        ("a", ["a"], "a"),  # too short to be anything worth hiding
    ],
)
def test_masking_by_example(text, secrets, shown):
    assert mask(text, secrets) == (text if shown is None else shown)


@pytest.mark.parametrize(
    ("url", "found"),
    [
        ("postgresql://cockpit:q8/Zx+Yw3k@db/x", {"cockpit:q8/Zx+Yw3k", "q8/Zx+Yw3k"}),
        ("postgresql://u:p%40ss@db/x", {"u:p%40ss", "u:p@ss", "p%40ss", "p@ss"}),
        ("https://alice:p@ss@gw/v1", {"alice:p@ss", "p@ss"}),
        ("https://tok3n@gw", set()),  # a user name alone: masked as user-info, no secret
        ("https://gw/v1", set()),
        ("http://gw/a:b@c", set()),  # a path, not user-info
        ("not a url", set()),
    ],
)
def test_a_urls_user_info_and_password_are_its_secrets(url, found):
    assert set(url_passwords(url)) == found


def test_the_environment_names_every_secret_it_holds():
    env = {
        "ANTHROPIC_API_KEY": "sk-ant-1",
        "OPENAI_API_KEY": "oa-key",
        "OPENAI_BASE_URL": "http://alice:Gw-Pass-0042@gw/v1",
        "ANTHROPIC_BASE_URL": "https://tok3n:x-oauth-basic@gw",
        "COCKPIT_CHAT_API_KEY": "erv",
        "GITHUB_WEBHOOK_SECRET": "hook",
        "COCKPIT_DATABASE_URL": "postgresql://u:p%40ss@db/x",
        "GITHUB_API_URL": "https://ci:q8/Zx+Yw3k@ghes.internal/api/v3",
        "COCKPIT_SECRET_KEY": "k" * 32,
        "COCKPIT_METRICS_TOKEN": "metrics-token",
        "GITHUB_CLIENT_SECRET": "client-secret",
        "COCKPIT_CHAT_MODEL": "not-a-secret",
        "COCKPIT_CHAT_CONTEXT_TOKENS": "64000",
        "GITHUB_PRIVATE_KEY_PATH": "/run/secrets/app.pem",
    }
    found = set(environment_secrets(env))
    assert {"sk-ant-1", "oa-key", "Gw-Pass-0042", "x-oauth-basic", "erv", "hook", "p@ss"} <= found
    assert {"k" * 32, "metrics-token", "client-secret"} <= found
    assert "p%40ss" in found  # as written, too
    assert {"q8/Zx+Yw3k", "ci:q8/Zx+Yw3k"} <= found  # a `/` in the password is no end
    assert "not-a-secret" not in found and "alice" not in found and "tok3n" not in found
    assert "64000" not in found and "/run/secrets/app.pem" not in found
