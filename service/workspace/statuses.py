"""How a provider's answer maps to a query state (PROVIDERS.md "Status mapping").

`status_error` reads the HTTP status, the headers and a bounded prefix of a non-2xx body,
per provider family: a rate or quota reason in the body is RATE_LIMITED whatever the status,
a missing OAuth scope is a permission failure that names the scope, and only a refused
credential (401) is NEEDS_RECONNECT. Slack reports its errors inside HTTP 200 and is mapped
in its adapter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from service.workspace.error_bodies import (
    clean,
    decode_error_body,
    google_reasons,
    provider_message,
    safe_scopes,
    www_authenticate_scopes,
)
from service.workspace.model import ProviderError, ProviderId, QueryState

__all__ = [
    "DEFAULT_RETRY_AFTER",
    "MAX_RETRY_AFTER",
    "clamp_wait",
    "missing_scope_error",
    "rate_limited_error",
    "retry_after_seconds",
    "status_error",
]

# A provider's wait is passed on as at most a day: `Retry-After: inf` or a reset time in the
# year 5000 is a provider bug, and a google.protobuf.Duration cannot hold every float.
MAX_RETRY_AFTER = 86_400.0
# The wait when a rate-limited answer names none: GitHub documents "at least one minute" for
# secondary limits; Google quotas are per-minute windows (PROVIDERS-AUTH.md B.3).
DEFAULT_RETRY_AFTER = 60.0
# Google's daily project quota: retrying within the hour is pointless.
DAILY_RETRY_AFTER = 3_600.0

# In the order a message names them: the legacy `errors[].reason` first.
GOOGLE_RATE_REASONS = (
    "userRateLimitExceeded",
    "rateLimitExceeded",
    "quotaExceeded",
    "dailyLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
    "RESOURCE_EXHAUSTED",
)
GOOGLE_SCOPE_REASONS = frozenset({"insufficientPermissions", "ACCESS_TOKEN_SCOPE_INSUFFICIENT"})
# The classic scope each Atlassian search needs (Jira enhanced JQL search, Confluence CQL).
ATLASSIAN_SEARCH_SCOPES = {
    ProviderId.JIRA: "read:jira-work",
    ProviderId.CONFLUENCE: "search:confluence",
}
# An Atlassian scope named in a body: classic `read:jira-work`, granular `read:issue:jira`.
ATLASSIAN_SCOPE = re.compile(r"\b(?:read|write|manage|delete|search|admin):[\w.-]+(?::[\w.-]+)*")
# GitHub's words for a secondary limit (older answers say "abuse detection mechanism").
GITHUB_SECONDARY_LIMIT = ("secondary rate limit", "abuse detection")


def clamp_wait(seconds: float) -> float | None:
    """`seconds` within [0, MAX_RETRY_AFTER]; None for NaN (no usable wait)."""
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER)


def retry_after_seconds(headers: Mapping[str, str], *, now: float) -> float | None:
    """Seconds to wait: `Retry-After` (seconds or HTTP date), else `x-ratelimit-reset` - now;
    clamped to [0, MAX_RETRY_AFTER] whatever the provider sent."""
    raw = headers.get("retry-after", "").strip()
    if raw:
        try:
            return clamp_wait(float(raw))
        except ValueError:
            pass
        try:
            return clamp_wait(parsedate_to_datetime(raw).timestamp() - now)
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    reset = headers.get("x-ratelimit-reset", "").strip()
    if reset:
        try:
            return clamp_wait(float(reset) - now)
        except ValueError:
            return None
    return None


def rate_limited_error(status: str, wait: float | None) -> ProviderError:
    """RATE_LIMITED with the provider's wait, or DEFAULT_RETRY_AFTER when it named none."""
    seconds = DEFAULT_RETRY_AFTER if wait is None else wait
    return ProviderError(
        QueryState.RATE_LIMITED,
        f"provider rate limit reached ({status}); retry in {seconds:.0f} s",
        retry_after=seconds,
    )


def missing_scope_error(scopes: Sequence[str], where: str) -> ProviderError:
    """A permission failure (final) naming the scope(s) the token lacks."""
    if len(scopes) == 1:
        need = f"the scope {scopes[0]}"
    elif scopes:
        need = f"one of the scopes {', '.join(scopes)}"
    else:
        need = "a scope this search needs"
    return ProviderError(
        QueryState.FAILED,
        f"provider denied this request: the account's token lacks {need}; reconnect the "
        f"account granting it ({where})",
        retryable=False,
    )


@dataclass(frozen=True)
class _Answer:
    """A non-2xx answer as the mapping sees it."""

    provider: ProviderId | None
    status: int
    headers: Mapping[str, str]
    data: Any  # the decoded JSON body, None when there is none
    said: str  # the provider's own message, cleaned ("" when it said nothing)
    now: float

    @property
    def where(self) -> str:
        return f"HTTP {self.status}"


def status_error(
    status: int,
    headers: Mapping[str, str],
    *,
    now: float,
    provider: ProviderId | None = None,
    body: bytes = b"",
    secrets: Iterable[str] = (),
) -> ProviderError | None:
    """Map a non-2xx answer (status, headers, body prefix) to the per-query state; None for
    2xx. `secrets` (the account's credential) never reach the message."""
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return _final(f"provider redirected (HTTP {status}); redirects are not followed")
    data = decode_error_body(body)
    said = clean(provider_message(provider, data), secrets)
    answer = _Answer(provider, status, headers, data, said, now)
    family = _FAMILIES.get(provider) if provider is not None else None
    return (family(answer) if family is not None else None) or _by_status(answer)


def _final(message: str) -> ProviderError:
    return ProviderError(QueryState.FAILED, message, retryable=False)


def _quoting(said: str) -> str:
    return f": {said}" if said else ""


def _by_status(answer: _Answer) -> ProviderError:
    """What the status alone says, with the provider's message where it gave one."""
    status, headers, said = answer.status, answer.headers, answer.said
    limited_403 = status == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining", "").strip() == "0"
    )
    if status == 429 or limited_403:
        return rate_limited_error(answer.where, retry_after_seconds(headers, now=answer.now))
    if status == 401:
        # Even GitLab's "revoked" may be a token another query's refresh just replaced: the
        # refresher re-reads the stored one first, and a dead grant fails the refresh itself.
        return ProviderError(
            QueryState.NEEDS_RECONNECT,
            "provider refused the credentials; reconnect the account (HTTP 401)",
            refresh=True,
        )
    if status == 403:
        detail = _quoting(said) or "; the account may lack access or a permission"
        return _final(f"provider denied this request{detail} (HTTP 403)")
    if status in (400, 422):
        return _final(
            f"provider rejected this query{_quoting(said)}; check native syntax/scope "
            f"(HTTP {status})"
        )
    transient = status >= 500 or status == 408
    return ProviderError(
        QueryState.FAILED,
        f"provider request failed{_quoting(said)} (HTTP {status})",
        retryable=transient,
    )


# ---- families -------------------------------------------------------------------------------


def _google(answer: _Answer) -> ProviderError | None:
    """Drive, Gmail, Calendar: the reason in `errors[]` / `details[]` / `status` decides."""
    reasons = google_reasons(answer.data)
    limit = next((reason for reason in GOOGLE_RATE_REASONS if reason in reasons), None)
    if answer.status in (403, 429) and limit is not None:
        wait = retry_after_seconds(answer.headers, now=answer.now)
        if wait is None and limit == "dailyLimitExceeded":
            wait = DAILY_RETRY_AFTER
        return rate_limited_error(f"{answer.where} {limit}", wait)
    challenge = answer.headers.get("www-authenticate", "")
    scope_denied = bool(reasons & GOOGLE_SCOPE_REASONS) or "insufficient_scope" in challenge
    if answer.status == 403 and scope_denied:
        return missing_scope_error(www_authenticate_scopes(challenge), answer.where)
    return None


def _github(answer: _Answer) -> ProviderError | None:
    """Primary and secondary rate limits first; then a missing scope (`X-Accepted-OAuth-Scopes`
    against `X-OAuth-Scopes`) or App permission (`X-Accepted-GitHub-Permissions`)."""
    headers = answer.headers
    lowered = answer.said.lower()
    secondary = any(words in lowered for words in GITHUB_SECONDARY_LIMIT)
    hinted = bool(headers.get("retry-after", "").strip()) or (
        headers.get("x-ratelimit-remaining", "").strip() == "0"
    )
    if answer.status == 429 or (answer.status == 403 and (secondary or hinted)):
        # GitHub: wait `retry-after`, else until `x-ratelimit-reset` when nothing remains,
        # else at least a minute (a reset with requests remaining is the primary window's).
        wait = retry_after_seconds(headers, now=answer.now) if hinted else None
        label = f"{answer.where} secondary rate limit" if secondary else answer.where
        return rate_limited_error(label, wait)
    if answer.status not in (403, 404):
        return None
    accepted = safe_scopes(headers.get("x-accepted-oauth-scopes", ""))
    if accepted and "x-oauth-scopes" in headers:
        granted = set(safe_scopes(headers.get("x-oauth-scopes", "")))
        if not granted.intersection(accepted):
            return missing_scope_error(accepted, answer.where)
    permission = safe_scopes(headers.get("x-accepted-github-permissions", "").replace(";", " "))
    if answer.status == 403 and permission:
        return _final(
            "provider denied this request: the GitHub App token lacks the permission "
            f"{', '.join(permission)} (HTTP 403)"
        )
    return None


def _gitlab(answer: _Answer) -> ProviderError | None:
    """403 `insufficient_scope` names the scopes in the body (or the challenge)."""
    data = answer.data
    error = data.get("error") if isinstance(data, dict) else None
    if answer.status != 403 or error != "insufficient_scope":
        return None
    scope = data.get("scope") if isinstance(data, dict) else None
    scopes = safe_scopes(scope) if isinstance(scope, str) else []
    challenge = answer.headers.get("www-authenticate", "")
    return missing_scope_error(scopes or www_authenticate_scopes(challenge), answer.where)


def _atlassian(answer: _Answer) -> ProviderError | None:
    """401 "scope does not match" is a missing scope (Atlassian sends it as a 401), never an
    expired token: no refresh. It names the scopes the body or challenge names, else the
    scope the search needs."""
    if answer.status != 401 or "scope does not match" not in answer.said.lower():
        return None
    named = ATLASSIAN_SCOPE.findall(answer.said)
    named += www_authenticate_scopes(answer.headers.get("www-authenticate", ""))
    if not named:
        scope = ATLASSIAN_SEARCH_SCOPES.get(answer.provider) if answer.provider else None
        named = [scope] if scope else []
    return missing_scope_error(list(dict.fromkeys(named))[:8], answer.where)


_FAMILIES: dict[ProviderId, Callable[[_Answer], ProviderError | None]] = {
    ProviderId.GITHUB: _github,
    ProviderId.GITLAB: _gitlab,
    ProviderId.GOOGLE_DRIVE: _google,
    ProviderId.GMAIL: _google,
    ProviderId.GOOGLE_CALENDAR: _google,
    ProviderId.JIRA: _atlassian,
    ProviderId.CONFLUENCE: _atlassian,
}
