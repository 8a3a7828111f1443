"""What a provider's error body says (reasons, scopes, its own message), made safe to show.

Bodies are read as a bounded prefix and may be anything (HTML, cut-off JSON, nothing): every
function here tolerates that and answers "nothing said" rather than failing. Text that goes
into a status message is stripped of the account's credentials and of anything that looks
like a token, bounded and freed of control characters (`clean`).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from service.workspace.model import ProviderId

__all__ = [
    "MAX_ERROR_BODY",
    "MAX_MESSAGE",
    "clean",
    "decode_error_body",
    "google_reasons",
    "provider_message",
    "safe_scopes",
    "secrets_of",
    "www_authenticate_scopes",
]

MAX_ERROR_BODY = 64 * 1024  # bytes of an error body read; the message is in the first few
MAX_MESSAGE = 300  # characters of provider text passed into a status message
REDACTED = "[redacted]"

# Token shapes worth hiding wherever they appear: bearer/basic credentials, Slack, GitHub,
# GitLab, Google (access tokens, refresh tokens, API keys), Atlassian API tokens, JWTs.
_AUTH_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+[\w.~+/=-]{6,}")
_TOKEN_SHAPES = re.compile(
    r"\b(?:xox[a-z]-[\w-]+|xapp-[\w-]+|gh[pousr]_\w{10,}|github_pat_\w{10,}|glpat-[\w-]{10,}"
    r"|ya29\.[\w.-]+|1//[\w-]{10,}|AIza[\w-]{20,}|ATATT[\w=-]{10,}"
    r"|eyJ[\w-]+\.[\w-]+\.[\w-]*)"
)
# `access_token=...`, `key=...`, `X-Amz-Signature=...` in a URL query string or in prose.
_SECRET_PARAM = re.compile(
    r"(?i)\b([\w.-]*(?:key|token|secret|signature|sig|password|passwd|auth|credential|code)"
    r"[\w.-]*=)[^&#\s\"'<>,;)]+"
)
_SPACES = re.compile(r"\s+")
_SCOPE = re.compile(r"[\w:./=-]{1,120}")
_WWW_SCOPE = re.compile(r'(?i)\bscope="([^"]*)"')


def decode_error_body(prefix: bytes) -> Any:
    """The JSON of an error body prefix; None when it is empty, cut off or not JSON."""
    if not prefix.strip():
        return None
    try:
        return json.loads(prefix)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def secrets_of(authorization: str) -> tuple[str, ...]:
    """The strings of an Authorization header value that must never be shown."""
    scheme, _, credential = authorization.partition(" ")
    found = [authorization, credential]
    if scheme.lower() == "basic":
        try:
            pair = base64.b64decode(credential, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            pair = ""
        found += [pair, pair.partition(":")[2]]
    return tuple(s for s in found if len(s) >= 4)


def clean(text: str, secrets: Iterable[str] = (), limit: int = MAX_MESSAGE) -> str:
    """Provider text fit for a status message: secrets and token shapes redacted, control
    characters dropped, whitespace collapsed, at most `limit` characters (cut at a word)."""
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in {secret, quote(secret, safe="")}:
            text = text.replace(form, REDACTED)
    text = _AUTH_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    text = _SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED, text)
    text = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    word_end = cut.rfind(" ")
    if word_end > limit // 2:
        cut = cut[:word_end]
    return cut.rstrip(" ,;:.-") + "…"


def safe_scopes(raw: str) -> list[str]:
    """Scope names from a header or body (space/comma separated), only plain scope tokens."""
    names = [part for part in re.split(r"[\s,]+", raw) if part]
    return [name for name in names if _SCOPE.fullmatch(name)][:8]


def www_authenticate_scopes(header: str) -> list[str]:
    """Scopes a `WWW-Authenticate: Bearer ... scope="..."` challenge names."""
    found = _WWW_SCOPE.search(header)
    return safe_scopes(found.group(1)) if found else []


# ---- reading bodies -------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _get(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _joined(parts: Iterable[str]) -> str:
    """Non-empty parts in order, repeats dropped, joined with '; '."""
    kept: list[str] = []
    for part in parts:
        if part and part not in kept:
            kept.append(part)
    return "; ".join(kept)


def google_reasons(data: Any) -> set[str]:
    """Every reason a Google error names: `errors[].reason`, `details[].reason`, `status`."""
    error = _get(data, "error")
    reasons = {_text(item.get("reason")) for item in _dicts(_get(error, "errors"))}
    reasons |= {_text(item.get("reason")) for item in _dicts(_get(error, "details"))}
    reasons.add(_text(_get(error, "status")))
    reasons.discard("")
    return reasons


def _google_message(data: Any) -> str:
    error = _get(data, "error")
    if isinstance(error, str):  # OAuth endpoints: {"error": "invalid_grant", ...}
        return _joined([error, _text(_get(data, "error_description"))])
    first = next(iter(_dicts(_get(error, "errors"))), {})
    return _text(_get(error, "message")) or _text(first.get("message"))


def _github_message(data: Any) -> str:
    details = []
    for item in _get(data, "errors") or []:
        details.append(item.strip() if isinstance(item, str) else _text(_get(item, "message")))
    return _joined([_text(_get(data, "message")), *details])


def _gitlab_message(data: Any) -> str:
    message = _get(data, "message")
    if isinstance(message, dict):  # {"message": {"field": ["is invalid"]}}
        parts = [
            f"{key} {', '.join(map(str, v if isinstance(v, list) else [v]))}"
            for key, v in message.items()
        ]
        return _joined(parts)
    if isinstance(message, list):
        return _joined(_text(item) for item in message)
    return _joined(
        [_text(message), _text(_get(data, "error")), _text(_get(data, "error_description"))]
    )


def _jira_message(data: Any) -> str:
    listed = [_text(item) for item in _get(data, "errorMessages") or []]
    fields = _get(data, "errors")
    if isinstance(fields, dict):
        listed += [f"{key}: {_text(value)}" for key, value in fields.items() if _text(value)]
    return _joined([*listed, _text(_get(data, "message"))])


def _confluence_message(data: Any) -> str:
    details = []
    for item in _dicts(_get(data, "data", "errors")):
        message = item.get("message")
        details.append(_text(_get(message, "translation")) or _text(message))
    return _joined([_text(_get(data, "message")), *details])


def _generic_message(data: Any) -> str:
    return _joined(
        [
            _text(_get(data, "message")),
            _text(_get(data, "error")),
            _text(_get(data, "error_description")),
        ]
    )


_MESSAGES: dict[ProviderId, Callable[[Any], str]] = {
    ProviderId.GITHUB: _github_message,
    ProviderId.GITLAB: _gitlab_message,
    ProviderId.GOOGLE_DRIVE: _google_message,
    ProviderId.GMAIL: _google_message,
    ProviderId.GOOGLE_CALENDAR: _google_message,
    ProviderId.JIRA: _jira_message,
    ProviderId.CONFLUENCE: _confluence_message,
}


def provider_message(provider: ProviderId | None, data: Any) -> str:
    """The provider's own words in an error body (raw: pass them through `clean`)."""
    if not isinstance(data, dict):
        return ""
    read = _MESSAGES.get(provider) if provider is not None else None
    return (read(data) if read else "") or _generic_message(data)
