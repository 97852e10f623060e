"""Log lines are JSON with context, and never carry secrets."""

from __future__ import annotations

import json
import logging

import pytest

from bot.logs import JsonFormatter, log_context
from bot.redaction import redact, register


@pytest.mark.parametrize(
    "secret_text",
    [
        "ghs_16C7e42F292c6912E7710c838347Ae178B4a",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
        "Authorization: token ghu_abcdefghijklmnopqrstuvwxyz0123",
        "Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiIxMiJ9.c2lnbmF0dXJl",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_token_shapes_are_redacted(secret_text):
    out = redact(f"request failed: {secret_text} (retrying)")
    assert "***" in out
    assert secret_text.split()[-1][-12:] not in out


def test_registered_secret_is_redacted_from_formatted_records():
    register("plain-webhook-secret")
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "secret is %s", ("plain-webhook-secret",), None
    )
    with log_context(delivery="abc", repo="o/r", pr=5, job=9):
        line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "secret is ***"
    assert (line["delivery"], line["repo"], line["pr"], line["job"]) == ("abc", "o/r", 5, 9)


@pytest.mark.parametrize(
    "secret", ['pa"ss-word-123', "back\\slash-secret", "wörd-sécret-123", "line\nbreak-secret"]
)
def test_registered_secrets_are_redacted_after_json_escaping(secret):
    register(secret)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "got %s", (secret,), None)
    line = JsonFormatter().format(record)
    assert json.loads(line)["msg"] == "got ***"
    for form in (secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]):
        assert form not in line


def test_a_short_secret_after_a_newline_is_redacted_from_log_lines():
    """JSON writes a newline as `\\n`: the secret would follow a letter there."""
    register("ervkey01")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "server said\nervkey01", (), None)
    line = JsonFormatter().format(record)
    assert json.loads(line)["msg"] == "server said\n***"
