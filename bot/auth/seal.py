"""The key that protects people's sign-ins, and sealing with it (AES-GCM).

COCKPIT_SECRET_KEY when set; otherwise (one node, `serve --role all`) a key generated once
into the data directory (mode 0600). Separate keys are derived from it for the stored tokens,
the sign-in state and the session cookie, so one never opens what another sealed."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from bot.config import Settings

KEY_FILE = "secret.key"
NONCE_BYTES = 12
TOKENS = "user tokens"
STATE = "sign-in state"
COOKIE = "session cookie"


class Unsealable(Exception):
    """Not sealed with this key for this purpose (forged, altered, or another key's)."""


def key_file(settings: Settings) -> Path:
    return settings.data_dir / KEY_FILE


def master_key(settings: Settings) -> bytes:
    """COCKPIT_SECRET_KEY, or the data directory's generated key (made now when missing;
    another process making it at the same time wins, and both read its key)."""
    if settings.secret_key is not None:
        return settings.secret_key.reveal().encode()
    path = key_file(settings)
    with contextlib.suppress(FileNotFoundError):
        return _read_key(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = secrets.token_hex(32) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_key(path)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return text.strip().encode()


def _read_key(path: Path) -> bytes:
    key = path.read_text().strip()
    if not key:  # another process is writing it this instant: its O_EXCL won, then it writes
        raise FileNotFoundError(path)
    return key.encode()


def derived(settings: Settings, purpose: str) -> bytes:
    """A 256-bit key for `purpose` (HMAC-SHA256 of the purpose under the master key)."""
    return hmac.digest(master_key(settings), purpose.encode(), hashlib.sha256)


def seal(key: bytes, plain: bytes, context: str) -> bytes:
    """nonce ‖ AES-GCM(plain), bound to `context` (e.g. the user id the row belongs to)."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plain, context.encode())


def unseal(key: bytes, sealed: bytes, context: str) -> bytes:
    if len(sealed) <= NONCE_BYTES:
        raise Unsealable
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context.encode())
    except InvalidTag:
        raise Unsealable from None


def seal_text(key: bytes, plain: bytes, context: str) -> str:
    """`seal` as URL- and cookie-safe text."""
    return base64.urlsafe_b64encode(seal(key, plain, context)).decode().rstrip("=")


def unseal_text(key: bytes, text: str, context: str) -> bytes:
    if len(text) > 4096 or not text.isascii():
        raise Unsealable
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise Unsealable from None
    return unseal(key, raw, context)
