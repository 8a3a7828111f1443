"""OAuth 2.0 refresh per provider family: the token request and the answer, as pure functions.

`build_refresh` makes the `grant_type=refresh_token` request each family expects (client
credentials in the form body, a JSON body, or HTTP Basic); `parse_refresh` turns the answer
into a `TokenGrant`, or raises the `ProviderError` the answer means (PROVIDERS-AUTH.md A):

- a refused grant or client (`invalid_grant`, GitHub's HTTP 200 `error=bad_refresh_token`,
  Slack's HTTP 200 `ok:false invalid_refresh_token`, Atlassian's 403 `invalid_grant`, a
  revoked token) is NEEDS_RECONNECT with a message that says why;
- 429 is RATE_LIMITED with the provider's wait; 5xx, 408 and the transient codes
  (`temporarily_unavailable`, `server_error`, ...) are a retryable FAILED: the account stays
  connected.

Neither the refresh token nor the client secret ever reaches a message.
"""

from __future__ import annotations

import base64
import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from service.workspace.error_bodies import clean
from service.workspace.model import ProviderError, ProviderId, QueryState
from service.workspace.statuses import rate_limited_error, retry_after_seconds

__all__ = [
    "DEFAULT_TOKEN_URLS",
    "FAMILY_OF",
    "Family",
    "OAuthClient",
    "TokenGrant",
    "TokenRequest",
    "build_refresh",
    "parse_refresh",
]

MAX_ACCESS_TOKEN = 4096


class Family(enum.StrEnum):
    """Providers that share one OAuth authorization server."""

    GOOGLE = "google"
    SLACK = "slack"
    GITHUB = "github"
    GITLAB = "gitlab"
    ATLASSIAN = "atlassian"


FAMILY_OF: Mapping[ProviderId, Family] = {
    ProviderId.GITHUB: Family.GITHUB,
    ProviderId.GITLAB: Family.GITLAB,
    ProviderId.SLACK: Family.SLACK,
    ProviderId.GOOGLE_DRIVE: Family.GOOGLE,
    ProviderId.GMAIL: Family.GOOGLE,
    ProviderId.GOOGLE_CALENDAR: Family.GOOGLE,
    ProviderId.JIRA: Family.ATLASSIAN,
    ProviderId.CONFLUENCE: Family.ATLASSIAN,
}

DEFAULT_TOKEN_URLS: Mapping[Family, str] = {
    Family.GOOGLE: "https://oauth2.googleapis.com/token",
    Family.SLACK: "https://slack.com/api/oauth.v2.access",
    Family.GITHUB: "https://github.com/login/oauth/access_token",
    Family.GITLAB: "https://gitlab.com/oauth/token",
    Family.ATLASSIAN: "https://auth.atlassian.com/oauth/token",
}

_TITLES = {
    Family.GOOGLE: "Google",
    Family.SLACK: "Slack",
    Family.GITHUB: "GitHub",
    Family.GITLAB: "GitLab",
    Family.ATLASSIAN: "Atlassian",
}
# Codes that say "try again later"; every other error code refuses the grant or the client.
_TRANSIENT_CODES = frozenset({
    "internal_failure", "server_error", "temporarily_unavailable",  # Google, RFC 6749
    "internal_error", "fatal_error", "service_unavailable", "request_timeout",  # Slack
})
_RATE_CODES = frozenset({"ratelimited", "rate_limited", "slow_down"})
# The service's own OAuth client was refused: reconnecting cannot help until an operator
# fixes the configuration, so the message says so.
_CLIENT_CODES = frozenset({
    "invalid_client", "unauthorized_client", "incorrect_client_credentials",
    "bad_client_secret", "invalid_client_id",
})


@dataclass(frozen=True)
class OAuthClient:
    """The service's OAuth client at one authorization server (from settings)."""

    family: Family
    client_id: str
    client_secret: str = field(default="", repr=False)
    token_url: str = ""
    redirect_uri: str = ""  # GitLab checks it on refresh (the one used to authorize)

    @property
    def endpoint(self) -> str:
        """The token endpoint (the override, else the provider's)."""
        return self.token_url or DEFAULT_TOKEN_URLS[self.family]


@dataclass(frozen=True)
class TokenRequest:
    """One POST to a token endpoint."""

    url: str
    headers: Mapping[str, str] = field(repr=False)
    body: bytes = field(repr=False)


@dataclass(frozen=True)
class TokenGrant:
    """A refreshed access token, and the refresh token to keep (rotated or the same)."""

    access_token: str = field(repr=False)
    refresh_token: str = field(repr=False)
    expires_at: datetime | None = None
    scopes: tuple[str, ...] = ()  # empty: the answer named none (keep the stored ones)


def _basic(client: OAuthClient) -> str:
    pair = f"{client.client_id}:{client.client_secret}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def build_refresh(client: OAuthClient, refresh_token: str) -> TokenRequest:
    """The refresh request as `client.family` expects it."""
    form: dict[str, str] = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    headers = {"Accept": "application/json"}
    if client.family is Family.ATLASSIAN:  # JSON body with the client credentials
        payload = {**form, "client_id": client.client_id, "client_secret": client.client_secret}
        headers["Content-Type"] = "application/json"
        return TokenRequest(client.endpoint, headers, json.dumps(payload).encode())
    if client.family is Family.SLACK and client.client_secret:
        headers["Authorization"] = _basic(client)  # Slack recommends Basic
    else:
        form["client_id"] = client.client_id
        if client.client_secret:  # GitHub device-flow tokens refresh without a secret
            form["client_secret"] = client.client_secret
    if client.family is Family.GITLAB and client.redirect_uri:
        form["redirect_uri"] = client.redirect_uri
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    return TokenRequest(client.endpoint, headers, urlencode(form).encode())


def _decode(body: bytes) -> dict[str, Any]:
    """JSON, or GitHub's default form encoding; {} for anything else."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        try:
            pairs = parse_qsl(body.decode("ascii"), strict_parsing=True)
        except (ValueError, UnicodeDecodeError):
            return {}
        return dict(pairs)
    return data if isinstance(data, dict) else {}


def _code_of(family: Family, data: Mapping[str, Any]) -> str:
    """The answer's error code ('' when it names none)."""
    if family is Family.SLACK and data.get("ok") is True:
        return ""
    code = data.get("error")
    return code if isinstance(code, str) else ""


def parse_refresh(
    family: Family,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    refresh_token: str,
    now: datetime,
    secrets: Iterable[str] = (),
) -> TokenGrant:
    """The grant in a token endpoint's answer; raises the ProviderError a refusal means."""
    data = _decode(body)
    hidden = (refresh_token, *secrets)
    code = clean(_code_of(family, data), hidden, limit=80)
    if code or not 200 <= status < 300:
        raise _refusal(family, status, headers, data, code, hidden, now)
    slot = data
    if family is Family.SLACK and "access_token" not in data:  # a user token may sit here
        nested = data.get("authed_user")
        slot = nested if isinstance(nested, dict) else data
    access = slot.get("access_token")
    if not isinstance(access, str) or not access or len(access) > MAX_ACCESS_TOKEN:
        raise ProviderError(
            QueryState.FAILED,
            f"{_TITLES[family]} token endpoint answered without an access token; try again",
            retryable=True,
        )
    rotated = slot.get("refresh_token")
    return TokenGrant(
        access_token=access,
        refresh_token=rotated if isinstance(rotated, str) and rotated else refresh_token,
        expires_at=_expiry(slot.get("expires_in"), now),
        scopes=_scopes(slot.get("scope")),
    )


def _expiry(value: Any, now: datetime) -> datetime | None:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not 0 < seconds < 10 * 365 * 86_400:
        return None
    return now + timedelta(seconds=seconds)


def _scopes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, str):
        return ()
    # Slack separates scopes with commas, the others with spaces.
    return tuple(dict.fromkeys(s for s in value.replace(",", " ").split() if s))


def _refusal(
    family: Family,
    status: int,
    headers: Mapping[str, str],
    data: Mapping[str, Any],
    code: str,
    hidden: tuple[str, ...],
    now: datetime,
) -> ProviderError:
    title = _TITLES[family]
    if status == 429 or code in _RATE_CODES:
        wait = retry_after_seconds(headers, now=now.timestamp())
        return rate_limited_error(f"{title} token endpoint, HTTP {status}", wait)
    if status >= 500 or status == 408 or code in _TRANSIENT_CODES:
        said = f" ({code})" if code else ""
        return ProviderError(
            QueryState.FAILED,
            f"{title} could not refresh the access token now (HTTP {status}{said}); the "
            "account stays connected, try again later",
            retryable=True,
        )
    described = data.get("error_description")
    detail = clean(described, hidden, limit=160) if isinstance(described, str) else ""
    reason = f"{code}: {detail}" if code and detail else code or detail or f"HTTP {status}"
    if code in _CLIENT_CODES:
        return ProviderError(
            QueryState.NEEDS_RECONNECT,
            f"{title} refused the service's OAuth client while refreshing the access token "
            f"({reason}); an operator must check SEARCH_OAUTH_{family.value.upper()}_*",
        )
    hint = " (check SEARCH_OAUTH_GITLAB_REDIRECT_URI)" if family is Family.GITLAB else ""
    return ProviderError(
        QueryState.NEEDS_RECONNECT,
        f"{title} refused the refresh token ({reason}): it was revoked, expired or already "
        f"used{hint}; reconnect the account",
    )
