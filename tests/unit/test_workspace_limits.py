"""Shared rate-limit waits: which resource a request counts against, and store failures."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from service.workspace.limits import AccountLimits, RateLimits, resource_of
from service.workspace.model import ProviderError, ProviderId, QueryState

NOW = 1_800_000_000.0


class MemoryStore:
    """The two store methods, in memory."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], float] = {}
        self.writes = 0

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        self.writes += 1
        key = (account_id, resource)
        self.rows[key] = max(self.rows.get(key, 0.0), until)

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        found: dict[str, dict[str, float]] = {}
        for (a, r), u in self.rows.items():
            if a in account_ids and u > now:
                found.setdefault(a, {})[r] = u
        return found


class BrokenStore:
    """A store whose every call fails (a database outage)."""

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        raise ConnectionError("database down")

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        raise ConnectionError("database down")


def _limited(seconds: float | None) -> ProviderError:
    return ProviderError(QueryState.RATE_LIMITED, "limited", retry_after=seconds)


@pytest.mark.parametrize(
    ("provider", "path", "headers", "resource"),
    [
        (ProviderId.GITHUB, "/search/code", {}, "code_search"),
        (ProviderId.GITHUB, "/search/issues", {}, "search"),
        (ProviderId.GITHUB, "/api/v3/search/code", {}, "code_search"),
        (ProviderId.GITHUB, "/repos/a/b/issues", {}, "core"),
        (ProviderId.GITHUB, "/search/issues", {"x-ratelimit-resource": "core"}, "core"),
        (ProviderId.SLACK, "/api/assistant.search.context", {}, "api/assistant.search.context"),
        (ProviderId.GMAIL, "/gmail/v1/users/me/messages", {}, "gmail/v1"),
    ],
)
def test_resource_of(
    provider: ProviderId, path: str, headers: dict[str, str], resource: str
) -> None:
    assert resource_of(provider, path, headers) == resource


async def test_a_wait_blocks_its_resource_only_until_it_ends() -> None:
    store = MemoryStore()
    limits = (await RateLimits(store).open(["a1"], now=NOW))["a1"]
    assert not limits.blocking
    await limits.record("search", _limited(30), now=NOW)
    assert limits.wait("search", now=NOW + 10) == pytest.approx(20)
    assert limits.wait("code_search", now=NOW + 10) is None
    assert limits.wait("search", now=NOW + 30) is None
    assert store.rows == {("a1", "search"): NOW + 30}

    # Another call (or replica) opening the account sees the wait.
    other = (await RateLimits(store).open(["a1"], now=NOW + 1))["a1"]
    assert other.wait("search", now=NOW + 1) == pytest.approx(29)


async def test_the_same_wait_seen_twice_is_written_once() -> None:
    store = MemoryStore()
    limits = AccountLimits("a1", store=store)
    await limits.record("search", _limited(30), now=NOW)
    await limits.record("search", _limited(29.9), now=NOW + 0.1)  # on its way up the stack
    await limits.record("search", _limited(None), now=NOW)  # no wait named: nothing to share
    assert store.writes == 1


async def test_a_store_failure_is_logged_and_the_wait_stays_local(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="service.workspace.limits"):
        limits = (await RateLimits(BrokenStore()).open(["a1"], now=NOW))["a1"]
        await limits.record("search", _limited(30), now=NOW)
    assert limits.wait("search", now=NOW) == pytest.approx(30)
    assert [r.getMessage() for r in caplog.records] == [
        "could not read the rate limits of accounts a1",
        "could not share the rate limit of account a1",
    ]
