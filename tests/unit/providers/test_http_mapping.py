"""Status mapping of the HTTP layer (pure part)."""

from __future__ import annotations

import base64
import json

import pytest

from service.workspace.error_bodies import MAX_MESSAGE, clean, secrets_of
from service.workspace.http import AccountSession, retry_after_seconds, status_error
from service.workspace.model import Account, Credentials, ProviderError, ProviderId, QueryState
from service.workspace.statuses import DEFAULT_RETRY_AFTER

NOW = 1_700_000_000.0


@pytest.mark.parametrize("status", [200, 201, 204])
def test_success_maps_to_nothing(status: int) -> None:
    assert status_error(status, {}, now=NOW) is None


def test_429_with_retry_after_seconds() -> None:
    error = status_error(429, {"retry-after": "30"}, now=NOW)
    assert error is not None
    assert error.state is QueryState.RATE_LIMITED
    assert error.retry_after == 30.0


def test_429_with_http_date_retry_after() -> None:
    error = status_error(429, {"retry-after": "Tue, 14 Nov 2023 22:14:20 GMT"}, now=NOW)
    assert error is not None
    assert error.retry_after == pytest.approx(1_700_000_060.0 - NOW)


def test_403_with_exhausted_quota_uses_reset() -> None:
    headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 42)}
    error = status_error(403, headers, now=NOW)
    assert error is not None
    assert error.state is QueryState.RATE_LIMITED
    assert error.retry_after == 42.0


def test_403_with_retry_after_is_rate_limited() -> None:
    error = status_error(403, {"retry-after": "5"}, now=NOW)
    assert error is not None
    assert error.state is QueryState.RATE_LIMITED


def test_only_401_needs_reconnect() -> None:
    error = status_error(401, {}, now=NOW)
    assert error is not None
    assert error.state is QueryState.NEEDS_RECONNECT


@pytest.mark.parametrize("headers", [{}, {"x-ratelimit-remaining": "12"}])
def test_other_403_is_a_final_permission_failure(headers: dict[str, str]) -> None:
    error = status_error(403, headers, now=NOW)
    assert error is not None
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    assert "denied this request" in error.message


@pytest.mark.parametrize("status", [400, 422])
def test_rejected_query_failed_with_syntax_hint(status: int) -> None:
    error = status_error(status, {}, now=NOW)
    assert error is not None
    assert error.state is QueryState.FAILED
    assert error.message == (
        f"provider rejected this query; check native syntax/scope (HTTP {status})"
    )


@pytest.mark.parametrize("status", [302, 404, 500, 503])
def test_other_statuses_fail_keeping_the_code(status: int) -> None:
    error = status_error(status, {}, now=NOW)
    assert error is not None
    assert error.state is QueryState.FAILED
    assert f"HTTP {status}" in error.message


def test_retry_after_absent_or_garbage() -> None:
    assert retry_after_seconds({}, now=NOW) is None
    assert retry_after_seconds({"retry-after": "soon"}, now=NOW) is None
    assert retry_after_seconds({"x-ratelimit-reset": str(int(NOW) - 5)}, now=NOW) == 0.0


async def test_relative_paths_keep_the_base_path_and_other_origins_are_refused() -> None:
    account = Account("a", "t", ProviderId.GITLAB, "gl", "https://git.example.com/gitlab/")
    session = AccountSession(account, Credentials("secret"))
    try:
        assert str(session.resolve("/api/v4/projects")) == (
            "https://git.example.com/gitlab/api/v4/projects"
        )
        assert str(session.resolve("https://git.example.com:443/x")) == "https://git.example.com/x"
        for foreign in (
            "https://evil.example.com/x",
            "http://git.example.com/x",
            "//evil.example.com/x",
            "https://git.example.com:8443/x",
        ):
            with pytest.raises(ProviderError, match="another origin"):
                session.resolve(foreign)
    finally:
        await session.aclose()


@pytest.mark.parametrize("base", ["ftp://host", "not a url", "http://[::1"])
def test_unusable_base_urls_fail(base: str) -> None:
    account = Account("a", "t", ProviderId.GITHUB, "gh", base)
    with pytest.raises(ProviderError) as caught:
        AccountSession(account, Credentials("secret"), allow_insecure_http=True)
    assert caught.value.state is QueryState.FAILED


# ---- provider error bodies (issue 14 item 3) --------------------------------------------------

DRIVE = ProviderId.GOOGLE_DRIVE
GOOGLE = [ProviderId.GOOGLE_DRIVE, ProviderId.GMAIL, ProviderId.GOOGLE_CALENDAR]
TOKEN = "ya29.a0AfH6SMBsecretvalue"


def body(data: object) -> bytes:
    """A JSON error body as the provider sends it."""
    return json.dumps(data).encode()


def mapped(
    status: int,
    data: object = None,
    provider: ProviderId | None = DRIVE,
    headers: dict[str, str] | None = None,
    secrets: tuple[str, ...] = (),
) -> ProviderError:
    """The mapped error of a non-2xx answer."""
    raw = data if isinstance(data, bytes) else body(data) if data is not None else b""
    error = status_error(
        status, headers or {}, now=NOW, provider=provider, body=raw, secrets=secrets
    )
    assert error is not None
    return error


def legacy(reason: str, status: int = 403, message: str = "…") -> dict[str, object]:
    """Google's legacy error shape."""
    return {
        "error": {
            "errors": [{"domain": "usageLimits", "reason": reason, "message": message}],
            "code": status,
            "message": message,
        }
    }


@pytest.mark.parametrize("provider", GOOGLE)
@pytest.mark.parametrize(
    "reason", ["rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded"]
)
@pytest.mark.parametrize("status", [403, 429])
def test_google_rate_reasons_are_rate_limited_with_a_default_wait(
    provider: ProviderId, reason: str, status: int
) -> None:
    error = mapped(status, legacy(reason, status), provider)
    assert (error.state, error.retry_after, error.retryable) == (
        QueryState.RATE_LIMITED,
        DEFAULT_RETRY_AFTER,
        True,
    )
    assert reason in error.message


def test_google_daily_limit_waits_an_hour_and_retry_after_wins() -> None:
    assert mapped(403, legacy("dailyLimitExceeded")).retry_after == 3600.0
    error = mapped(403, legacy("userRateLimitExceeded"), headers={"retry-after": "7"})
    assert error.retry_after == 7.0


@pytest.mark.parametrize(
    "error_body",
    [
        {"error": {"code": 403, "status": "PERMISSION_DENIED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
             "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
             "metadata": {"quota_metric": "drive.googleapis.com/default"}}]}},
        {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": "Quota exceeded"}},
    ],
    ids=["error-info", "resource-exhausted"],
)
def test_google_newer_quota_shapes_are_rate_limited(error_body: dict[str, object]) -> None:
    status = error_body["error"]["code"]  # type: ignore[index]
    assert mapped(status, error_body).state is QueryState.RATE_LIMITED


def test_google_missing_scope_names_the_scope_from_the_challenge() -> None:
    challenge = (
        'Bearer realm="https://accounts.google.com/", error="insufficient_scope", '
        'scope="https://www.googleapis.com/auth/drive.readonly"'
    )
    error = mapped(403, legacy("insufficientPermissions"), headers={"www-authenticate": challenge})
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    assert "lacks the scope https://www.googleapis.com/auth/drive.readonly" in error.message


def test_google_scope_reason_in_error_info_alone_is_a_permission_failure() -> None:
    data = {"error": {"code": 403, "status": "PERMISSION_DENIED", "details": [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo",
         "reason": "ACCESS_TOKEN_SCOPE_INSUFFICIENT"}]}}
    error = mapped(403, data, ProviderId.GMAIL)
    assert error.state is QueryState.FAILED
    assert "lacks a scope this search needs" in error.message


@pytest.mark.parametrize(
    ("reason", "message"),
    [("forbidden", "Forbidden"), ("domainPolicy", "The domain administrators have disabled "
                                                  "Drive apps.")],
)
def test_google_other_403_fails_with_the_provider_message(reason: str, message: str) -> None:
    error = mapped(403, legacy(reason, message=message))
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    assert error.message == f"provider denied this request: {message} (HTTP 403)"


def test_google_401_needs_reconnect() -> None:
    data = {"error": {"code": 401, "status": "UNAUTHENTICATED", "errors": [
        {"reason": "authError", "message": "Invalid Credentials"}]}}
    assert mapped(401, data).state is QueryState.NEEDS_RECONNECT


GH = ProviderId.GITHUB
SECONDARY = {"message": "You have exceeded a secondary rate limit. Please wait a few minutes."}


@pytest.mark.parametrize(
    ("status", "headers", "wait"),
    [
        (403, {}, DEFAULT_RETRY_AFTER),
        (429, {"retry-after": "90"}, 90.0),
        (403, {"x-ratelimit-remaining": "5", "x-ratelimit-reset": str(int(NOW) + 900)},
         DEFAULT_RETRY_AFTER),
        (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(int(NOW) + 42)}, 42.0),
    ],
)
def test_github_secondary_limit_waits(status: int, headers: dict[str, str], wait: float) -> None:
    error = mapped(status, SECONDARY, GH, headers)
    assert (error.state, error.retry_after) == (QueryState.RATE_LIMITED, wait)
    assert "secondary rate limit" in error.message


def test_github_missing_scope_from_the_scope_headers() -> None:
    headers = {"x-accepted-oauth-scopes": "repo", "x-oauth-scopes": "read:user, gist"}
    for status in (403, 404):
        error = mapped(status, {"message": "Not Found"}, GH, headers)
        assert (error.state, error.retryable) == (QueryState.FAILED, False)
        assert "lacks the scope repo" in error.message
    granted = {"x-accepted-oauth-scopes": "repo", "x-oauth-scopes": "repo, gist"}
    assert "scope" not in mapped(404, {"message": "Not Found"}, GH, granted).message


def test_github_app_permission_is_named() -> None:
    headers = {"x-accepted-github-permissions": "issues=read; pull_requests=read"}
    error = mapped(403, {"message": "Resource not accessible by integration"}, GH, headers)
    assert "lacks the permission issues=read, pull_requests=read" in error.message


def test_github_401_needs_reconnect() -> None:
    assert mapped(401, {"message": "Bad credentials"}, GH).state is QueryState.NEEDS_RECONNECT


@pytest.mark.parametrize("provider", [ProviderId.JIRA, ProviderId.CONFLUENCE])
def test_atlassian_401_scope_mismatch_is_a_permission_failure(provider: ProviderId) -> None:
    error = mapped(401, {"code": 401, "message": "Unauthorized; scope does not match"}, provider)
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    scope = "read:jira-work" if provider is ProviderId.JIRA else "search:confluence"
    assert f"lacks the scope {scope}" in error.message
    assert not error.refresh  # a missing scope, not an expired token: no refresh
    plain = mapped(401, {"code": 401, "message": "Unauthorized"}, provider)
    assert plain.state is QueryState.NEEDS_RECONNECT
    assert plain.refresh


def test_atlassian_scope_mismatch_names_the_scopes_the_answer_names() -> None:
    body = {"code": 401, "message": "Unauthorized; scope does not match: read:jira-user"}
    assert "lacks the scope read:jira-user" in mapped(401, body, ProviderId.JIRA).message
    challenge = {"www-authenticate": 'Bearer scope="read:page:confluence read:space:confluence"'}
    named = mapped(401, {"message": "Unauthorized; scope does not match"},
                   ProviderId.CONFLUENCE, challenge)
    assert "one of the scopes read:page:confluence, read:space:confluence" in named.message


def test_atlassian_403_and_429() -> None:
    denied = mapped(403, {"errorMessages": ["You do not have permission."]}, ProviderId.JIRA)
    assert denied.message == "provider denied this request: You do not have permission. (HTTP 403)"
    limited = mapped(429, {}, ProviderId.CONFLUENCE, {"retry-after": "11"})
    assert (limited.state, limited.retry_after) == (QueryState.RATE_LIMITED, 11.0)


def test_gitlab_insufficient_scope_names_the_scopes() -> None:
    data = {"error": "insufficient_scope", "error_description": "higher privileges",
            "scope": "api read_api"}
    error = mapped(403, data, ProviderId.GITLAB)
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    assert "one of the scopes api, read_api" in error.message


@pytest.mark.parametrize(
    ("provider", "status", "data", "said"),
    [
        (ProviderId.JIRA, 400,
         {"errorMessages": ["Error in the JQL Query: Expecting ')' (line 1, character 9)"],
          "errors": {"jql": "Field 'x' does not exist."}},
         "Error in the JQL Query: Expecting ')' (line 1, character 9); jql: Field 'x' does not "
         "exist."),
        (ProviderId.CONFLUENCE, 400,
         {"statusCode": 400, "data": {"errors": [{"message": {"key": "k",
          "translation": "Unexpected token"}}]}, "message": "Could not parse cql : a ~",
          "reason": "Bad Request"},
         "Could not parse cql : a ~; Unexpected token"),
        (DRIVE, 400, legacy("invalid", 400, "Invalid Value"), "Invalid Value"),
        (ProviderId.GMAIL, 400, {"error": {"code": 400, "message": "Invalid pageToken"}},
         "Invalid pageToken"),
        (GH, 422, {"message": "Validation Failed", "errors": [
            {"message": "The search is longer than 256 characters.", "code": "invalid"}]},
         "Validation Failed; The search is longer than 256 characters."),
        (ProviderId.GITLAB, 400, {"error": "scope does not have a valid value"},
         "scope does not have a valid value"),
        (ProviderId.GITLAB, 400, {"message": {"search": ["is missing"]}}, "search is missing"),
    ],
)
def test_syntax_errors_carry_the_provider_message(
    provider: ProviderId, status: int, data: object, said: str
) -> None:
    error = mapped(status, data, provider)
    assert (error.state, error.retryable) == (QueryState.FAILED, False)
    assert error.message == (
        f"provider rejected this query: {said}; check native syntax/scope (HTTP {status})"
    )


@pytest.mark.parametrize(
    "raw", [b"<html><body>400 Bad Request</body></html>", b'{"error": {"mess', b"", b"[1, 2]"]
)
def test_bodies_that_say_nothing_keep_the_plain_wording(raw: bytes) -> None:
    error = mapped(400, raw, ProviderId.CONFLUENCE)
    assert error.message == "provider rejected this query; check native syntax/scope (HTTP 400)"


def test_provider_text_is_redacted_cleaned_and_bounded() -> None:
    secrets = secrets_of(f"Bearer {TOKEN}")
    echoed = (
        f"Invalid Value {TOKEN} near Bearer abcdefghijkl, xoxp-1234-5678-abcdef, "
        "ghp_abcdefghijklmnopqrstu https://www.googleapis.com/drive/v3/files?key=AIzaSyAbc&"
        "access_token=zzz\x1b[31m\u202e\n" + "word " * 100
    )
    error = mapped(400, legacy("invalid", 400, echoed), secrets=secrets)
    said = error.message.removeprefix("provider rejected this query: ")
    said = said.removesuffix("; check native syntax/scope (HTTP 400)")
    for secret in (TOKEN, "abcdefghijkl", "xoxp-", "ghp_", "AIzaSyAbc", "zzz"):
        assert secret not in error.message
    assert not any(ch in error.message for ch in "\x1b\u202e\n")
    assert len(said) <= MAX_MESSAGE
    assert said.endswith("word…")
    assert "Invalid Value [redacted]" in said


def test_basic_auth_secrets_cover_the_pair_and_the_token() -> None:
    header = "Basic " + base64.b64encode(b"jane@example.com:atl-token-123").decode()
    found = secrets_of(header)
    assert "atl-token-123" in found
    assert clean("echo atl-token-123", found) == "echo [redacted]"


@pytest.mark.parametrize(
    ("status", "retryable"),
    [(500, True), (502, True), (503, True), (408, True), (404, False), (409, False),
     (302, False), (400, False), (422, False)],
)
def test_retryable_only_for_transient_failures(status: int, retryable: bool) -> None:
    error = mapped(status, {}, GH)
    assert error.state is QueryState.FAILED
    assert error.retryable is retryable
