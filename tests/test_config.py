"""Configuration from the environment: fail fast, name the variable, never show secrets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bot.config import ConfigError, check_settings, load_settings


def pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


RSA_KEY = pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))
EC_KEY = pem(ec.generate_private_key(ec.SECP256R1()))
GOOD = {"GITHUB_APP_ID": "12", "GITHUB_PRIVATE_KEY": RSA_KEY, "GITHUB_WEBHOOK_SECRET": "s3cret!"}
CHAT = {"COCKPIT_CHAT_BASE_URL": "http://localhost:11434/v1", "COCKPIT_CHAT_MODEL": "qwen3:32b"}


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"GITHUB_APP_ID": ""}, "GITHUB_APP_ID"),
        ({"GITHUB_WEBHOOK_SECRET": ""}, "GITHUB_WEBHOOK_SECRET"),
        ({"GITHUB_PRIVATE_KEY": ""}, "GITHUB_PRIVATE_KEY"),
        ({"GITHUB_PRIVATE_KEY": "not a key"}, "GITHUB_PRIVATE_KEY"),
        ({"GITHUB_PRIVATE_KEY": EC_KEY}, "GITHUB_PRIVATE_KEY"),
        (
            {"GITHUB_PRIVATE_KEY": "", "GITHUB_PRIVATE_KEY_PATH": "/no/such.pem"},
            "GITHUB_PRIVATE_KEY_PATH",
        ),
        ({"COCKPIT_PORT": "eighty"}, "COCKPIT_PORT"),
        ({"COCKPIT_PORT": "70000"}, "COCKPIT_PORT"),
        ({"COCKPIT_MAX_CONCURRENT_REVIEWS": "0"}, "COCKPIT_MAX_CONCURRENT_REVIEWS"),
        ({"COCKPIT_REVIEW_MAX_USD": "lots"}, "COCKPIT_REVIEW_MAX_USD"),
        ({"COCKPIT_REVIEW_MAX_USD": "-1"}, "COCKPIT_REVIEW_MAX_USD"),
        ({"COCKPIT_DAILY_MAX_USD": "0"}, "COCKPIT_DAILY_MAX_USD"),
        ({"COCKPIT_DAILY_MAX_RUNS": "1.5"}, "COCKPIT_DAILY_MAX_RUNS"),
        ({"COCKPIT_MIN_FREE_MB": "-1"}, "COCKPIT_MIN_FREE_MB"),
        ({"COCKPIT_SHUTDOWN_GRACE_SECONDS": "soon"}, "COCKPIT_SHUTDOWN_GRACE_SECONDS"),
        ({"COCKPIT_PROVIDER": "gemini"}, "COCKPIT_PROVIDER"),
        ({"GITHUB_API_URL": "ftp://example"}, "GITHUB_API_URL"),
        ({"COCKPIT_COMMAND_PREFIX": "/two words"}, "COCKPIT_COMMAND_PREFIX"),
        ({"COCKPIT_DATABASE_URL": "mysql://u:pw@h/db"}, "COCKPIT_DATABASE_URL"),
        ({"COCKPIT_WORKER_TIMEOUT": "1"}, "COCKPIT_WORKER_TIMEOUT"),
        ({"COCKPIT_PROVIDER": "chat"}, "COCKPIT_CHAT_BASE_URL"),
        ({"COCKPIT_CHAT_MODEL": "qwen3:32b"}, "COCKPIT_CHAT_BASE_URL"),
        ({"COCKPIT_CHAT_BASE_URL": "http://localhost:8000/v1"}, "COCKPIT_CHAT_MODEL"),
        ({**CHAT, "COCKPIT_CHAT_BASE_URL": "localhost:8000/v1"}, "COCKPIT_CHAT_BASE_URL"),
        ({**CHAT, "COCKPIT_CHAT_CONTEXT_TOKENS": "8k"}, "COCKPIT_CHAT_CONTEXT_TOKENS"),
        ({**CHAT, "COCKPIT_CHAT_CONTEXT_TOKENS": "512"}, "COCKPIT_CHAT_CONTEXT_TOKENS"),
        ({**CHAT, "COCKPIT_CHAT_RATES": "0.2"}, "COCKPIT_CHAT_RATES"),
        ({**CHAT, "COCKPIT_CHAT_RATES": "cheap,free"}, "COCKPIT_CHAT_RATES"),
        ({**CHAT, "COCKPIT_CHAT_RATES": "-1,2"}, "COCKPIT_CHAT_RATES"),
        ({**CHAT, "COCKPIT_CHAT_RATES": "nan,1"}, "COCKPIT_CHAT_RATES"),
    ],
)
def test_bad_value_names_the_variable(overrides, variable):
    with pytest.raises(ConfigError) as caught:
        load_settings({**GOOD, **overrides})
    assert caught.value.variable == variable
    assert str(caught.value).startswith(variable)


def test_money_limits_have_defaults_and_can_be_switched_off():
    defaults = load_settings(GOOD)
    assert (defaults.review_max_usd, defaults.daily_max_usd, defaults.daily_max_runs) == (
        None,  # unset: no cap per run, as the operators' contract says
        25.0,
        200,
    )
    assert load_settings({**GOOD, "COCKPIT_REVIEW_MAX_USD": "2"}).review_max_usd == 2.0
    assert (defaults.min_free_mb, defaults.shutdown_grace) == (1024, 20.0)
    off = load_settings(
        {
            **GOOD,
            "COCKPIT_REVIEW_MAX_USD": "none",
            "COCKPIT_DAILY_MAX_USD": "off",
            "COCKPIT_DAILY_MAX_RUNS": "None",
        }
    )
    assert (off.review_max_usd, off.daily_max_usd, off.daily_max_runs) == (None, None, None)
    assert load_settings({**GOOD, "COCKPIT_DAILY_MAX_RUNS": "50"}).daily_max_runs == 50


def test_key_from_file_and_escaped_newlines(tmp_path):
    path = tmp_path / "key.pem"
    path.write_text(RSA_KEY)
    from_file = load_settings(
        {**GOOD, "GITHUB_PRIVATE_KEY": "", "GITHUB_PRIVATE_KEY_PATH": str(path)}
    )
    escaped = load_settings({**GOOD, "GITHUB_PRIVATE_KEY": RSA_KEY.replace("\n", "\\n")})
    assert from_file.private_key == escaped.private_key


def test_secrets_never_appear_in_repr():
    settings = load_settings(GOOD)
    text = repr(settings) + str(settings.private_key) + repr(settings.webhook_secret)
    assert "s3cret!" not in text and "PRIVATE KEY" not in text


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("COCKPIT_DAILY_MAX_RUNS", "0", "a whole number of at least 1 (or 'none' for no limit)"),
        ("COCKPIT_DAILY_MAX_USD", "1e16", "a number above 0 up to 1e+15 (or 'none' for no limit)"),
        ("COCKPIT_PORT", "70000", "a whole number from 0 to 65535, got 70000"),
        ("COCKPIT_SHUTDOWN_GRACE_SECONDS", "9999", "a number from 0 to 3600, got 9999"),
    ],
)
def test_a_number_out_of_bounds_is_told_the_bounds_it_has(variable, value, says):
    """Whatever bounds a setting declares (a floor only, a ceiling above an open floor, both),
    the problem names them: the #29 review found 'from 1 to  (or …)' for a floor alone."""
    with pytest.raises(ConfigError) as caught:
        load_settings({**GOOD, variable: value})
    assert says in str(caught.value) and "  " not in str(caught.value)


def test_check_settings_lists_every_problem():
    problems = check_settings({"COCKPIT_PORT": "x"})
    assert {p.variable for p in problems} == {
        "COCKPIT_PORT",
        "GITHUB_APP_ID",
        "GITHUB_PRIVATE_KEY",
        "GITHUB_WEBHOOK_SECRET",
    }


def run_cli(*args, env):
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_serve_refuses_to_start_without_webhook_secret(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin",
        **GOOD,
        "GITHUB_WEBHOOK_SECRET": "",
        "COCKPIT_DATA_DIR": str(tmp_path),
        "COCKPIT_PORT": "0",
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }
    result = run_cli("serve", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "✗ GITHUB_WEBHOOK_SECRET: not set; the server refuses unsigned webhooks"
    assert lines[-1].startswith("cockpit serve: not started: 1 problem(s) above.")


def shipped_webhook_secrets() -> set[str]:
    """The webhook secrets the project's examples ship (deploy/kubernetes, compose.yaml)."""
    import yaml

    root = Path(__file__).resolve().parent.parent
    found = set()
    for path in [*sorted((root / "deploy").rglob("*.yaml")), root / "compose.yaml"]:
        for doc in yaml.safe_load_all(path.read_text()):
            values = (doc or {}).get("stringData") or {}
            for service in ((doc or {}).get("services") or {}).values():
                environment = service.get("environment") or {}
                values = {**values, **(environment if isinstance(environment, dict) else {})}
            if values.get("GITHUB_WEBHOOK_SECRET"):
                found.add(values["GITHUB_WEBHOOK_SECRET"])
    return found


@pytest.mark.parametrize("placeholder", sorted(shipped_webhook_secrets() | {"change-me"}))
def test_serve_refuses_a_shipped_placeholder_as_the_webhook_secret(tmp_path, placeholder):
    """deploy/kubernetes/secret.yaml ships `change-me`: a server left with it would take
    deliveries anyone who read the example can sign."""
    env = {
        "PATH": "/usr/bin:/bin",
        **GOOD,
        "GITHUB_WEBHOOK_SECRET": placeholder,
        "COCKPIT_DATA_DIR": str(tmp_path),
        "COCKPIT_PORT": "0",
        "ANTHROPIC_API_KEY": "sk-ant-test",
    }
    result = run_cli("serve", env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("✗ GITHUB_WEBHOOK_SECRET: is a placeholder from an example")
    assert lines[-1].startswith("cockpit serve: not started: 1 problem(s) above.")
    assert placeholder not in result.stderr  # a secret's value is never shown
    checked = run_cli("check-config", "--offline", env=env)
    assert checked.returncode == 2 and "GITHUB_WEBHOOK_SECRET: is a placeholder" in checked.stdout


def test_check_config_exit_codes(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "COCKPIT_DATA_DIR": str(tmp_path), "ANTHROPIC_API_KEY": "k"}
    bad = run_cli("check-config", "--offline", env=env)
    assert bad.returncode == 2 and "GITHUB_APP_ID" in bad.stdout
    good = run_cli("check-config", "--offline", env={**env, **GOOD})
    assert good.returncode == 0, good.stdout
    assert "s3cret!" not in good.stdout + bad.stdout


def test_the_database_url_is_a_secret_and_its_password_is_redacted():
    url = "postgresql://cockpit:pg-pass-42@db:5432/cockpit"
    settings = load_settings({**GOOD, "COCKPIT_DATABASE_URL": url})
    assert "pg-pass-42" not in repr(settings)
    assert {url, "pg-pass-42"} <= set(settings.secrets())
    with pytest.raises(ConfigError) as refused:
        load_settings({**GOOD, "COCKPIT_DATABASE_URL": "mysql://u:pg-pass-42@h/db"})
    assert "pg-pass-42" not in str(refused.value)


@pytest.mark.parametrize("role", ["web", "worker"])
def test_separate_roles_need_postgres(tmp_path, role):
    env = {"PATH": "/usr/bin:/bin", **GOOD, "COCKPIT_DATA_DIR": str(tmp_path)}
    result = run_cli("serve", "--role", role, env=env)
    assert result.returncode == 2
    assert "COCKPIT_DATABASE_URL" in result.stderr and f"--role {role}" in result.stderr


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "{cwd}/data"),  # the default, ./data
        ("", "{cwd}/data"),
        ("data", "{cwd}/data"),
        ("./var/../cockpit", "{cwd}/cockpit"),
        ("~/cockpit-data", "{home}/cockpit-data"),
        ("/srv/cockpit", "/srv/cockpit"),
    ],
)
def test_the_data_dir_is_made_absolute_when_settings_load(tmp_path, monkeypatch, value, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = dict(GOOD) if value is None else {**GOOD, "COCKPIT_DATA_DIR": value}
    settings = load_settings(env)
    cwd, home = tmp_path.resolve(), (tmp_path / "home").resolve()
    assert settings.data_dir == Path(expected.format(cwd=cwd, home=home))
    assert settings.db_path.is_absolute()


def test_a_key_path_may_start_with_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "app.pem").write_text(RSA_KEY)
    settings = load_settings(
        {**GOOD, "GITHUB_PRIVATE_KEY": "", "GITHUB_PRIVATE_KEY_PATH": "~/app.pem"}
    )
    assert settings.private_key is not None and "PRIVATE KEY" in settings.private_key.reveal()


def test_the_chat_provider_is_configured_by_its_variables_alone():
    assert load_settings(GOOD).chat is None  # unset: no chat provider
    settings = load_settings(
        {
            **GOOD,
            **CHAT,
            "COCKPIT_PROVIDER": "chat",
            "COCKPIT_CHAT_API_KEY": "sk-litellm-master-123",
            "COCKPIT_CHAT_CONTEXT_TOKENS": "32768",
            "COCKPIT_CHAT_RATES": "0.20, 0.60",
        }
    )
    assert settings.provider == "chat"
    chat = settings.chat
    assert (chat.base_url, chat.model, chat.context_tokens, chat.rates) == (
        "http://localhost:11434/v1",
        "qwen3:32b",
        32768,
        (0.2, 0.6),
    )
    assert chat.api_key.reveal() == "sk-litellm-master-123"
    assert "sk-litellm-master-123" not in repr(settings)
    assert "sk-litellm-master-123" in settings.secrets()  # redacted from logs


def test_a_password_in_the_chat_url_is_redacted_and_never_named():
    url = "https://proxy:hunter2-gateway@llm.example.com/v1"
    settings = load_settings({**GOOD, **CHAT, "COCKPIT_CHAT_BASE_URL": url})
    assert "hunter2-gateway" in settings.secrets()
    with pytest.raises(ConfigError) as caught:
        load_settings({**GOOD, **CHAT, "COCKPIT_CHAT_BASE_URL": "ftp://u:hunter2@x/v1"})
    assert "hunter2" not in str(caught.value)
