"""The words two findings are compared by, and how alike two sets of them are: by table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.review.identity import STOP_WORDS, likeness, pair, same, words

# The words the ledger left out of a finding's title before there was one list.
LEDGER_STOP = "a an the is are was be been of in on at to for with and or not no this that it its"
LEDGER_STOP += " by as from"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", set()),
        ("The searchItems query is built with user_text",
         {"search", "item", "query", "built", "user", "text"}),
        ("SQL injection in search_items", {"sql", "injection", "search", "item"}),
        ("HTTPServer getURL", {"httpserver", "get", "url"}),  # only lower→Upper splits
        ("Off-by-one: page 1 skips the first page", {"off", "one", "page", "skip", "first"}),
        ("Leaked file handles", {"leak", "file", "handl"}),  # crude stems, as the judge had
        ("uses used using use", set()),  # stop words go before stemming
        ("x = y + 1", set()),  # one-letter words and digits say nothing
        ("Caching is ENABLED", {"cach", "enabl"}),  # casefolded
        ("naïve café", {"na", "ve", "caf"}),  # ASCII words only
        ("ignores bus, gas, yes", {"ignor", "bus", "gas", "yes"}),  # short words keep their ending
    ],
)  # fmt: skip
def test_words(text, expected):
    assert words(text) == expected


def test_one_stop_list_holds_every_word_the_ledger_left_out():
    assert set(LEDGER_STOP.split()) <= STOP_WORDS
    assert words(LEDGER_STOP) == set()


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("", "", 0.0),  # nothing said: not alike at all
        ("sql injection", "", 0.0),
        ("sql injection", "SQL injection", 1.0),
        ("sql injection", "bare except", 0.0),
        ("sql injection search", "sql injection", 0.8),  # 2·2 / (3 + 2)
        ("leaked file handle", "file handle leaks", 1.0),  # order and endings do not matter
        ("race in the cache", "cache race condition", 0.8),
    ],
)
def test_likeness(a, b, expected):
    assert likeness(words(a), words(b)) == pytest.approx(expected)


@given(a=st.text(max_size=80), b=st.text(max_size=80))
def test_likeness_is_symmetric_and_between_0_and_1(a, b):
    value = likeness(words(a), words(b))
    assert 0.0 <= value <= 1.0 and value == likeness(words(b), words(a))
    assert likeness(words(a), words(a)) == (1.0 if words(a) else 0.0)


def test_one_rule_for_the_same_finding_at_its_place_or_after_its_code_moved_on():
    reworded = words("SQL query built with an f-string"), words("f-string SQL injection")
    assert same(*reworded, placed=True) is not None  # some of the same words, same place
    assert same(*reworded, placed=False, moved=True) is None  # moved on: not enough words
    again = words("SQL query built with an f-string"), words("SQL query is built with f-string")
    assert same(*again, placed=False, moved=True) == 1.0
    assert same(*again, placed=False, moved=False) is None  # its code stands: another one


def test_pairs_are_one_to_one_exact_first_and_a_shared_claim_absorbs_every_repeat():
    def exact(o, n):
        return 0.0 if (o, n) in {(0, 1), (1, 1)} else None

    def near(o, n):
        return {(0, 0): -0.5, (1, 0): -0.9, (0, 2): -0.4}.get((o, n))

    assert pair(2, 3, (exact, near)) == {1: 0, 0: 1}  # exact first; near, most alike first
    assert pair(2, 3, (exact, near), shared={0}) == {1: 0, 0: 1, 2: 0}
