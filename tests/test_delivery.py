"""The inbox envelope parser: it reads only what the inbox needs, and agrees with a full parse."""

from __future__ import annotations

import json

import orjson
import pytest

from bot.delivery import Delivery, MalformedBody
from tests import deliveries

PUBLISHED = sorted(p.stem for p in deliveries.WEBHOOKS.glob("*.json"))


@pytest.mark.parametrize("name", PUBLISHED)
def test_envelope_matches_a_full_parse_for_every_published_payload(name):
    body = (deliveries.WEBHOOKS / f"{name}.json").read_bytes()
    fast = Delivery.from_body("d1", name.partition(".")[0], body)
    data = orjson.loads(body)
    holder = data.get("pull_request") or data.get("issue") or {}
    assert fast.action == data.get("action")
    assert fast.installation_id == (data.get("installation") or {}).get("id")
    assert fast.repo == (data.get("repository") or {}).get("full_name")
    assert fast.pr_number == holder.get("number")
    assert fast.repo is None or "/" in fast.repo


def test_envelope_fields_of_a_pull_request_delivery():
    data = deliveries.payload("pull_request.opened")
    delivery = Delivery.from_body("d1", "pull_request", json.dumps(data).encode())
    assert delivery.action == "opened"
    assert delivery.installation_id == data["installation"]["id"]
    assert delivery.repo == data["repository"]["full_name"]
    assert delivery.pr_number == data["pull_request"]["number"]
    assert delivery.key == f"events:{delivery.repo}#{delivery.pr_number}"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"pull_request": null, "issue": {"number": 8}}', (None, None, None, 8)),
        (b"{}", (None, None, None, None)),
        (b'{"unknown": [1, {"deep": "\\u00e9"}], "size": 1e400}', (None, None, None, None)),
        (
            b'{"action": "x", "installation": {"id": 9223372036854775807}, "issue": {}}',
            ("x", 2**63 - 1, None, None),
        ),
    ],
)
def test_odd_but_valid_objects_are_accepted(body, expected):
    delivery = Delivery.from_body("d1", "issues", body)
    assert (
        delivery.action,
        delivery.installation_id,
        delivery.repo,
        delivery.pr_number,
    ) == expected


@pytest.mark.parametrize(
    "body",
    [
        b'{"action": 5, "repository": {"full_name": "o/r"}, "issue": {"number": 3}}',
        b'{"action": "x", "installation": {"id": "7"}}',
        b'{"repository": "o/r", "issue": {"number": 4}}',
        b'{"installation": 9}',
        # ids and numbers outside GitHub's positive 64-bit range
        b'{"installation": {"id": 18446744073709551616}}',
        b'{"issue": {"number": -1}}',
        b'{"pull_request": {"number": true}}',
    ],
)
def test_fields_of_the_wrong_type_are_malformed(body):
    with pytest.raises(MalformedBody, match="not a webhook payload"):
        Delivery.from_body("d1", "issues", body)


def test_without_a_pr_the_delivery_is_its_own_key():
    delivery = Delivery.from_body("abc", "installation", b'{"action": "deleted"}')
    assert delivery.key == "delivery:abc"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[1, 2]",
        b'"a string"',
        b"null",
        b'{"action": "opened"',  # truncated
        b'{"action": "opened"} trailing',
        b'{"other": "\xff\xfe"}',  # invalid UTF-8 in a field nobody reads
        b'{"action": "\xc3"}',
        b'{"deep": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    ],
)
def test_malformed_bodies_are_refused(body):
    with pytest.raises(MalformedBody):
        Delivery.from_body("d1", "pull_request", body)
