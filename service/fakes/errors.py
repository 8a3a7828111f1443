"""Error answers exactly as the live APIs document them, armed on any fake as a fault.

Each helper takes a `FakeProvider` and arms one `fault(...)` (or `answer(...)`) on it, so the
next matching requests (`path` substring, `times`; None = every one) get that answer instead
of the real one. Shapes and sources: ../shared/PROVIDERS-AUTH.md B (Google), D.3
(Jira/Confluence), D.4 (missing scopes); PROVIDERS.md (GitHub secondary limits, Slack).
"""

from __future__ import annotations

import time
from typing import Any

from service.fakes.base import FakeProvider, google_invalid_value
from service.fakes.server import Fault

# Google legacy `errors[]` entries per reason: (domain, message) as the docs show them.
GOOGLE_REASONS = {
    "userRateLimitExceeded": ("usageLimits", "User Rate Limit Exceeded"),
    "rateLimitExceeded": ("usageLimits", "Rate Limit Exceeded"),
    "quotaExceeded": ("usageLimits", "Calendar usage limits exceeded."),
    "dailyLimitExceeded": ("usageLimits", "Daily Limit Exceeded"),
    "insufficientPermissions": ("global", "Insufficient Permission"),
    "forbidden": ("global", "Forbidden"),
    "domainPolicy": ("global", "The domain administrators have disabled Drive apps."),
    "authError": ("global", "Invalid Credentials"),
}
GOOGLE_SERVICES = {
    "google_drive": "drive.googleapis.com",
    "gmail": "gmail.googleapis.com",
    "google_calendar": "calendar-json.googleapis.com",
}
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
GITHUB_SECONDARY = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID "
    "C0DE:1234:5678:9ABC:DEF0."
)
GITHUB_DOCS = "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"


def _service(fake: FakeProvider) -> str:
    return GOOGLE_SERVICES.get(fake.name, "drive.googleapis.com")


# ---- Google (Drive, Gmail, Calendar) --------------------------------------------------------


def google_error(
    fake: FakeProvider,
    reason: str,
    *,
    status: int = 403,
    message: str | None = None,
    headers: dict[str, str] | None = None,
    path: str = "",
    times: int | None = None,
) -> Fault:
    """The legacy body: `{"error": {"errors": [{"domain", "reason", "message"}], "code",
    "message"}}` (e.g. Drive's 403 userRateLimitExceeded)."""
    domain, default = GOOGLE_REASONS.get(reason, ("global", reason))
    text = default if message is None else message
    body = {
        "error": {
            "errors": [{"domain": domain, "reason": reason, "message": text}],
            "code": status,
            "message": text,
        }
    }
    return fake.fault(
        "status", status=status, headers=dict(headers or {}), body=body, path=path, times=times
    )


def google_quota_details(
    fake: FakeProvider,
    *,
    status: int = 429,
    retry_after: int | None = None,
    path: str = "",
    times: int | None = None,
) -> Fault:
    """The AIP-193 form: `status` RESOURCE_EXHAUSTED and a google.rpc.ErrorInfo detail with
    reason RATE_LIMIT_EXCEEDED naming the quota metric (no legacy `errors[]`)."""
    service = _service(fake)
    body = {
        "error": {
            "code": status,
            "message": (
                "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per "
                f"user' of service '{service}' for consumer 'project_number:123456789'."
            ),
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {
                    "@type": ERROR_INFO,
                    "reason": "RATE_LIMIT_EXCEEDED",
                    "domain": "googleapis.com",
                    "metadata": {
                        "service": service,
                        "consumer": "projects/123456789",
                        "quota_metric": f"{service}/default",
                        "quota_limit": "defaultPerMinutePerUser",
                    },
                }
            ],
        }
    }
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    return fake.fault("status", status=status, headers=headers, body=body, path=path, times=times)


def google_insufficient_scope(
    fake: FakeProvider, scope: str, *, path: str = "", times: int | None = None
) -> Fault:
    """403 with both shapes at once (`insufficientPermissions` and ErrorInfo
    ACCESS_TOKEN_SCOPE_INSUFFICIENT) and the `WWW-Authenticate` challenge naming `scope`."""
    body = {
        "error": {
            "code": 403,
            "message": "Request had insufficient authentication scopes.",
            "errors": [
                {
                    "message": "Insufficient Permission",
                    "domain": "global",
                    "reason": "insufficientPermissions",
                }
            ],
            "status": "PERMISSION_DENIED",
            "details": [
                {
                    "@type": ERROR_INFO,
                    "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT",
                    "domain": "googleapis.com",
                    "metadata": {"service": _service(fake), "method": "search"},
                }
            ],
        }
    }
    challenge = (
        f'Bearer realm="https://accounts.google.com/", error="insufficient_scope", scope="{scope}"'
    )
    headers = {"WWW-Authenticate": challenge}
    return fake.fault("status", status=403, headers=headers, body=body, path=path, times=times)


def google_invalid_query(
    fake: FakeProvider,
    message: str = "Invalid Value",
    *,
    location: str = "q",
    path: str = "",
    times: int | None = None,
) -> Fault:
    """Drive/Gmail/Calendar 400 for a query parameter it cannot parse."""
    body = google_invalid_value(location, message)
    return fake.fault("status", status=400, body=body, path=path, times=times)


# ---- GitHub ---------------------------------------------------------------------------------


def github_secondary_limit(
    fake: FakeProvider,
    *,
    status: int = 403,
    retry_after: int | None = None,
    path: str = "",
    times: int | None = None,
) -> Fault:
    """A secondary rate limit: 403 (or 429) with GitHub's message, requests still remaining
    in the primary window, and `Retry-After` only when given."""
    headers = {
        "x-ratelimit-limit": "30",
        "x-ratelimit-remaining": "27",
        "x-ratelimit-reset": str(int(time.time()) + 3000),
        "x-ratelimit-resource": "search",
    }
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    body = {"message": GITHUB_SECONDARY, "documentation_url": GITHUB_DOCS, "status": str(status)}
    return fake.fault("status", status=status, headers=headers, body=body, path=path, times=times)


def github_missing_scope(
    fake: FakeProvider,
    accepted: str = "repo",
    granted: str = "read:user",
    *,
    status: int = 404,
    path: str = "",
    times: int | None = None,
) -> Fault:
    """A token without the scope the endpoint checks: 404 for private resources (or 403),
    with `X-Accepted-OAuth-Scopes` and `X-OAuth-Scopes`."""
    headers = {"X-Accepted-OAuth-Scopes": accepted, "X-OAuth-Scopes": granted}
    message = "Not Found" if status == 404 else "Resource not accessible by personal access token"
    body = {
        "message": message,
        "documentation_url": "https://docs.github.com/rest",
        "status": str(status),
    }
    return fake.fault("status", status=status, headers=headers, body=body, path=path, times=times)


def github_validation_failed(
    fake: FakeProvider, message: str, *, path: str = "", times: int | None = None
) -> Fault:
    """422 Validation Failed with one `errors[].message`."""
    body = {
        "message": "Validation Failed",
        "errors": [{"message": message, "resource": "Search", "field": "q", "code": "invalid"}],
        "documentation_url": "https://docs.github.com/rest/search/search",
        "status": "422",
    }
    return fake.fault("status", status=422, body=body, path=path, times=times)


# ---- Slack (errors on HTTP 200) -------------------------------------------------------------


def slack_ratelimited(
    fake: FakeProvider,
    retry_after: int | None = 30,
    *,
    status: int = 200,
    error: str = "ratelimited",
    path: str = "",
    times: int | None = None,
) -> Fault:
    """`{"ok": false, "error": "ratelimited"}` with `Retry-After`, on HTTP 200 (or 429)."""
    headers = {} if retry_after is None else {"Retry-After": str(retry_after)}
    body = {"ok": False, "error": error}
    kind = "body" if status == 200 else "status"
    return fake.fault(kind, status=status, headers=headers, body=body, path=path, times=times)


def slack_missing_scope(
    fake: FakeProvider,
    needed: str = "search:read.public",
    provided: str = "identify,channels:history",
    *,
    path: str = "",
    times: int | None = None,
) -> Fault:
    """HTTP 200 `{"ok": false, "error": "missing_scope", "needed", "provided"}`."""
    body: dict[str, Any] = {
        "ok": False,
        "error": "missing_scope",
        "needed": needed,
        "provided": provided,
    }
    return fake.answer(body, path=path, times=times)


# ---- Atlassian (Jira, Confluence) -----------------------------------------------------------


def atlassian_scope_mismatch(
    fake: FakeProvider, *, path: str = "", times: int | None = None
) -> Fault:
    """Atlassian's 401 for a token whose scopes do not cover the API (a 401, not a 403)."""
    body = {"code": 401, "message": "Unauthorized; scope does not match"}
    return fake.fault("status", status=401, body=body, path=path, times=times)


def jira_jql_error(
    fake: FakeProvider,
    messages: list[str] | None = None,
    errors: dict[str, str] | None = None,
    *,
    path: str = "/search/jql",
    times: int | None = None,
) -> Fault:
    """Jira's 400 ErrorCollection: `{"errorMessages": [...], "errors": {field: message}}`."""
    listed = (
        [
            "Error in the JQL Query: Expecting either 'OR' or 'AND' but got 'deploy'. "
            "(line 1, character 14)"
        ]
        if messages is None
        else messages
    )
    body = {"errorMessages": listed, "errors": dict(errors or {})}
    return fake.fault("status", status=400, body=body, path=path, times=times)


def confluence_cql_error(
    fake: FakeProvider, cql: str, *, path: str = "/rest/api/search", times: int | None = None
) -> Fault:
    """Confluence's 400 for CQL it cannot parse (the query echoed in `message`)."""
    body = {
        "statusCode": 400,
        "data": {
            "authorized": False,
            "valid": True,
            "allowedInReadOnlyMode": True,
            "errors": [],
            "successful": False,
        },
        "message": f"Could not parse cql : {cql}",
        "reason": "Bad Request",
    }
    return fake.fault("status", status=400, body=body, path=path, times=times)


# ---- GitLab ---------------------------------------------------------------------------------


def gitlab_insufficient_scope(
    fake: FakeProvider, scopes: str = "api read_api", *, path: str = "", times: int | None = None
) -> Fault:
    """GitLab's 403 for a token without the needed scope (body and challenge name it)."""
    description = "The request requires higher privileges than provided by the access token."
    body = {"error": "insufficient_scope", "error_description": description, "scope": scopes}
    challenge = (
        'Bearer realm="Protected by OAuth 2.0", error="insufficient_scope", '
        f'error_description="{description}", scope="{scopes}"'
    )
    headers = {"WWW-Authenticate": challenge}
    return fake.fault("status", status=403, headers=headers, body=body, path=path, times=times)
