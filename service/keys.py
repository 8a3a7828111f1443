"""Secret keys: from settings, or created once in the data directory (mode 0600)."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path

from service.ranking.tokens import TokenSigner
from service.secret import Secret
from service.settings import Settings, SettingsError


def _decoded(raw: str, setting: str) -> bytes:
    try:
        decoded = base64.b64decode(raw, validate=True)
    except ValueError:
        decoded = raw.encode()
    if len(decoded) < 16:
        raise SettingsError(f"{setting} must hold at least 16 bytes (base64 or text)")
    return decoded


def load_key(configured: Secret, data_dir: Path, name: str, *, setting: str) -> bytes:
    """32 key bytes: the configured base64 (or raw >= 16 chars) value, else a key file."""
    if configured:
        return _decoded(configured.reveal(), setting)
    path = data_dir / f"{name}.key"
    if path.exists():
        return base64.b64decode(path.read_text().strip())
    data_dir.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.b64encode(key).decode())
    return key


def _previous(listed: Secret, setting: str) -> tuple[bytes, ...]:
    return tuple(_decoded(raw.strip(), setting)
                 for raw in listed.reveal().split(",") if raw.strip())


def page_token_signer(settings: Settings) -> TokenSigner:
    """The signer of page tokens and cursors: signs with SEARCH_PAGE_TOKEN_KEY (or the data
    directory's key), and also accepts tokens signed with SEARCH_PAGE_TOKEN_PREVIOUS_KEYS."""
    key = load_key(settings.page_token_key, settings.data_dir, "page_token",
                   setting="SEARCH_PAGE_TOKEN_KEY")
    previous = _previous(settings.page_token_previous_keys, "SEARCH_PAGE_TOKEN_PREVIOUS_KEYS")
    return TokenSigner(key, previous)


def credential_keys(settings: Settings) -> tuple[bytes, tuple[bytes, ...]]:
    """The key that seals account credentials (SEARCH_CREDENTIALS_KEY, or the data
    directory's), and the keys they still open with (SEARCH_CREDENTIALS_PREVIOUS_KEYS)."""
    key = load_key(settings.credentials_key, settings.data_dir, "credentials",
                   setting="SEARCH_CREDENTIALS_KEY")
    return key, _previous(settings.credentials_previous_keys, "SEARCH_CREDENTIALS_PREVIOUS_KEYS")
