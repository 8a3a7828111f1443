"""Status mapping of the HTTP layer (pure part)."""

from __future__ import annotations

import pytest

from service.workspace.http import AccountSession, retry_after_seconds, status_error
from service.workspace.model import Account, Credentials, ProviderError, ProviderId, QueryState

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


@pytest.mark.parametrize(
    ("status", "headers"), [(401, {}), (403, {}), (403, {"x-ratelimit-remaining": "12"})]
)
def test_denied_needs_reconnect(status: int, headers: dict[str, str]) -> None:
    error = status_error(status, headers, now=NOW)
    assert error is not None
    assert error.state is QueryState.NEEDS_RECONNECT


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
