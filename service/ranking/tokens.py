"""Self-contained, signed page tokens and cursors (HMAC-SHA256), bound to their request.

A token is `base64url(json payload) + "." + base64url(hmac)`. The payload carries a
`kind`, a `binding` (a digest of everything the token must not be replayed with: tenant,
request fingerprint) and the resume state. Any replica holding the same key honours it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from service.errors import InvalidPageToken

MAX_TOKEN_CHARS = 16_384
_VERSION = 1


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """Strict, canonical unpadded base64url: junk characters, padding or non-zero trailing
    bits (which the lenient decoder ignores) make a token malformed, so each token has
    exactly one spelling."""
    data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    if _b64(data) != text:
        raise ValueError("not canonical base64url")
    return data


def fingerprint(*parts: Any) -> str:
    """A stable digest of JSON-serialisable request parts (what a token is bound to)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class TokenSigner:
    """Signs and verifies tokens with one secret key shared by every replica."""

    def __init__(self, key: bytes, previous: tuple[bytes, ...] = ()) -> None:
        """Signs with `key`; also accepts tokens signed with a `previous` key (rotation)."""
        if any(len(k) < 16 for k in (key, *previous)):
            raise ValueError("page token key must be at least 16 bytes")
        self._keys = (key, *previous)  # the first signs; any verifies

    def __repr__(self) -> str:
        return "TokenSigner(key=***)"

    def _signed(self, body: bytes, mac: bytes) -> bool:
        return any(
            hmac.compare_digest(mac, hmac.digest(key, body, "sha256")) for key in self._keys
        )

    def sign(self, kind: str, binding: str, state: Mapping[str, Any]) -> str:
        """A token of `kind` bound to `binding` that resumes from `state`."""
        payload = {"v": _VERSION, "k": kind, "b": binding, "s": state}
        body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        return f"{_b64(body)}.{_b64(hmac.digest(self._keys[0], body, 'sha256'))}"

    def peek(self, token: str) -> dict[str, Any]:
        """The state of a token, NOT verified (a hint of which binding to verify it with);
        {} when it cannot be read."""
        try:
            payload = json.loads(_unb64(token.partition(".")[0]))
        except (ValueError, UnicodeError):
            return {}
        state = payload.get("s") if isinstance(payload, dict) else None
        return state if isinstance(state, dict) else {}

    def verify(
        self, token: str, kind: str, binding: str, *, field: str, limit: int = MAX_TOKEN_CHARS
    ) -> dict[str, Any]:
        """The state of a valid token of at most `limit` characters bound to `binding`;
        InvalidPageToken naming `field` otherwise."""
        if len(token) > limit:
            raise InvalidPageToken.field(field, "token is too long")
        body_part, _, mac_part = token.partition(".")
        try:
            body = _unb64(body_part)
            mac = _unb64(mac_part)
        except (ValueError, UnicodeError):
            raise InvalidPageToken.field(field, "token is malformed") from None
        if not mac_part or not self._signed(body, mac):
            raise InvalidPageToken.field(field, "token signature is invalid")
        try:
            payload = json.loads(body)
        except ValueError:
            raise InvalidPageToken.field(field, "token is malformed") from None
        if not isinstance(payload, dict) or payload.get("v") != _VERSION:
            raise InvalidPageToken.field(field, "token version is not supported")
        if payload.get("k") != kind or not hmac.compare_digest(str(payload.get("b")), binding):
            raise InvalidPageToken.field(
                field, "token belongs to another request; restart without a token"
            )
        state = payload.get("s")
        if not isinstance(state, dict):
            raise InvalidPageToken.field(field, "token is malformed")
        return state
