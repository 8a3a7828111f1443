"""Provider credentials at rest: AES-GCM sealing and the checks every caller's credentials pass.

A sealed blob is bound (as associated data) to the tenant, account id and provider, so a blob
copied to another row does not open. Its plaintext is JSON: `t` token, `u` username, `s`
scopes, and (when set) `r` refresh token and `e` access-token expiry (ISO 8601, UTC); blobs
sealed before refresh tokens existed simply lack `r` and `e`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from service.errors import FieldViolation
from service.workspace.model import Credentials

__all__ = [
    "EARLIEST_EXPIRY",
    "MAX_EXPIRY_AHEAD",
    "MAX_SCOPE",
    "MAX_SCOPES",
    "MAX_TOKEN",
    "MAX_USERNAME",
    "SEALED",
    "CredentialSealer",
    "bound_to",
    "check_credentials",
]

MAX_TOKEN = 4096
MAX_USERNAME = 320
MAX_SCOPES = 100
MAX_SCOPE = 200
# An expiry before this is an `expires_in` (seconds) sent where an absolute time belongs.
EARLIEST_EXPIRY = datetime(2000, 1, 1, tzinfo=UTC)
# No provider issues access tokens near this long (the longest, GitHub OAuth apps, never expire
# and carry no expiry at all); a later time is a unit mistake (milliseconds as seconds).
MAX_EXPIRY_AHEAD = timedelta(days=3653)
# An RFC 6749 scope token: printable ASCII without space, double quote or backslash.
_SCOPE_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\"}
# A query's status when this server cannot open an account's stored credentials: a key that
# changed, so the account is not flagged NEEDS_RECONNECT in the store (a replica with the
# right key opens them; the operator can list the old key).
SEALED = ("stored credentials cannot be opened with this server's SEARCH_CREDENTIALS_KEY: "
          "reconnect the account, or list the key that sealed them in "
          "SEARCH_CREDENTIALS_PREVIOUS_KEYS")
_SEAL_VERSION = b"\x01"
_NONCE_BYTES = 12
# Blobs opened lately, by (blob, associated data): every search opens each of its accounts'
# blobs, and an AES-GCM open plus JSON and ISO-date parsing cost ~25 us each. A blob is
# sealed with a fresh random nonce, so equal blobs are one sealing of one plaintext.
_OPENED_MAX = 1024


def _aead(key: bytes) -> AESGCM:
    if len(key) < 16:
        raise ValueError("credentials key must hold at least 16 bytes")
    if len(key) not in (16, 24, 32):
        key = HKDF(hashes.SHA256(), 32, None, b"search-service credentials").derive(key)
    return AESGCM(key)


class CredentialSealer:
    """AES-256-GCM sealing of credentials; the associated data binds a blob to its account.

    Seals with `key`; opens blobs sealed with it or with any of `previous` (keys being
    rotated out: `reseal` moves a blob to `key`).
    """

    def __init__(self, key: bytes, previous: Sequence[bytes] = ()) -> None:
        self._aeads = tuple(_aead(each) for each in (key, *previous))
        self._opened: dict[tuple[bytes, bytes], Credentials] = {}

    def __repr__(self) -> str:
        return "CredentialSealer(key=***)"

    def seal(self, credentials: Credentials, bound_to: bytes) -> bytes:
        """Ciphertext of the credentials."""
        data: dict[str, Any] = {
            "t": credentials.token, "u": credentials.username, "s": list(credentials.scopes)
        }
        if credentials.refresh_token:
            data["r"] = credentials.refresh_token
        if credentials.expires_at is not None:
            data["e"] = credentials.expires_at.astimezone(UTC).isoformat()
        nonce = os.urandom(_NONCE_BYTES)
        plain = json.dumps(data).encode()
        return _SEAL_VERSION + nonce + self._aeads[0].encrypt(nonce, plain, bound_to)

    def reseal(self, sealed: bytes, bound_to: bytes) -> bytes | None:
        """The blob sealed anew with the current key when a previous key sealed it; None when
        the current key did; ValueError when no key opens it."""
        plain, by_current = self._decrypt(sealed, bound_to)
        return None if by_current else self.seal(_credentials(plain), bound_to)

    def open(self, sealed: bytes, bound_to: bytes) -> Credentials:
        """The credentials; ValueError when the blob was not sealed for `bound_to` by this key."""
        cached = self._opened.get((sealed, bound_to))
        if cached is not None:
            return cached
        credentials = self._open(sealed, bound_to)
        if len(self._opened) >= _OPENED_MAX:
            del self._opened[next(iter(self._opened))]  # the oldest
        self._opened[sealed, bound_to] = credentials
        return credentials

    def _open(self, sealed: bytes, bound_to: bytes) -> Credentials:
        return _credentials(self._decrypt(sealed, bound_to)[0])

    def _decrypt(self, sealed: bytes, bound_to: bytes) -> tuple[bytes, bool]:
        """The plaintext, and whether the current key (not a previous one) opened it."""
        if sealed[:1] != _SEAL_VERSION or len(sealed) < 1 + _NONCE_BYTES + 16:
            raise ValueError("sealed credentials have an unknown format")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        for index, aead in enumerate(self._aeads):
            try:
                return aead.decrypt(nonce, body, bound_to), index == 0
            except InvalidTag:
                continue
        raise ValueError("sealed credentials cannot be opened with this key")


def _credentials(plain: bytes) -> Credentials:
    try:
        data = json.loads(plain)
    except ValueError:
        raise ValueError("sealed credentials cannot be opened with this key") from None
    expiry = data.get("e")
    return Credentials(
        str(data["t"]),
        str(data.get("u", "")),
        tuple(data.get("s", ())),
        refresh_token=str(data.get("r", "")),
        expires_at=datetime.fromisoformat(expiry) if expiry else None,
    )


def bound_to(tenant: str, account_id: str, provider: str) -> bytes:
    """The associated data that ties a sealed blob to one account of one tenant."""
    return "\x1f".join((tenant, account_id, provider)).encode()


def check_credentials(
    credentials: Credentials | None, now: datetime | None = None
) -> list[FieldViolation]:
    """Problems with the credentials a caller sent, fields named `credentials.<field>`."""
    if credentials is None:
        return [FieldViolation("credentials", "credentials are required")]
    problem = _token_problem(credentials.token, required=True)
    if problem:
        return [FieldViolation("credentials.token", problem)]
    user = credentials.username
    if len(user) > MAX_USERNAME or (user and not user.isprintable()) or ":" in user:
        return [FieldViolation("credentials.username", "a printable user without ':'")]
    problems = _check_scopes(credentials.scopes)
    problem = _token_problem(credentials.refresh_token, required=False)
    if not problem and credentials.refresh_token and user:
        problem = "basic auth (a username) takes no refresh token"
    if problem:
        problems.append(FieldViolation("credentials.refresh_token", problem))
    problem = _expiry_problem(credentials.expires_at, now or datetime.now(UTC))
    if problem:
        problems.append(FieldViolation("credentials.expire_time", problem))
    return problems


def _token_problem(token: str, *, required: bool) -> str:
    if not token and not required:
        return ""
    if not token or len(token) > MAX_TOKEN:
        return f"1..{MAX_TOKEN} characters required"
    if not (token.isascii() and token.isprintable()) or " " in token:
        return "must be printable ASCII without spaces"
    return ""


def _expiry_problem(expires_at: datetime | None, now: datetime) -> str:
    if expires_at is None:
        return ""
    if expires_at.tzinfo is None:
        return "must carry a time zone"
    if expires_at < EARLIEST_EXPIRY:
        return "an absolute time after 2000-01-01T00:00:00Z (not a lifetime in seconds)"
    if expires_at > now + MAX_EXPIRY_AHEAD:
        return "at most 10 years ahead"
    return ""


def _check_scopes(scopes: Sequence[str]) -> list[FieldViolation]:
    if len(scopes) > MAX_SCOPES:
        return [FieldViolation("credentials.scopes", f"at most {MAX_SCOPES} scopes")]
    return [
        FieldViolation(
            f"credentials.scopes[{i}]",
            f"1..{MAX_SCOPE} printable ASCII characters without spaces, quotes or backslashes",
        )
        for i, scope in enumerate(scopes)
        if not 1 <= len(scope) <= MAX_SCOPE or not set(scope) <= _SCOPE_CHARS
    ]
