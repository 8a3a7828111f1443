"""Provider rate-limit waits shared by every replica through the store.

When a provider answers RATE_LIMITED with a wait, the account's resource is blocked until the
wait is over: in the session at once, and in the store for every other call and replica. A
call reads the active waits of all its accounts in one store read before its first request;
a request to a blocked resource fails at once with the remaining delay, without reaching the
provider.
A store failure never fails a search: it is logged and the wait stays local.

Times are unix seconds (`time.time()`): replicas compare them across hosts, so their clocks
must agree (NTP) to within a small part of a provider's wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from service.workspace.model import ProviderError, ProviderId

__all__ = ["AccountLimits", "LimitStore", "RateLimits", "resource_of"]

log = logging.getLogger(__name__)

# GitHub's rate-limit resources, by path prefix (its `x-ratelimit-resource` names them).
_GITHUB_RESOURCES = (("search/code", "code_search"), ("search/", "search"), ("graphql", "graphql"))
# A wait ending within this of a known one is that wait (seen again on its way up the stack).
_SAME_WAIT = 1.0


class LimitStore(Protocol):
    """The store methods the waits need (service.store.base.Store has them)."""

    async def record_rate_limit(
        self, account_id: str, resource: str, until: float, *, now: float
    ) -> None:
        """Remember a wait (the later one wins); drop the waits over by `now`."""
        ...

    async def rate_limits(
        self, account_ids: Sequence[str], *, now: float
    ) -> dict[str, dict[str, float]]:
        """The accounts' waits still running at `now`: account -> resource -> until."""
        ...


def resource_of(
    provider: ProviderId, path: str, headers: Mapping[str, str] | None = None
) -> str:
    """What a provider rate-limits a request under: GitHub's resource (`search`,
    `code_search`, `core`, ...), else the first two segments of the URL path."""
    relative = path.lstrip("/")
    if provider is ProviderId.GITHUB:
        named = (headers or {}).get("x-ratelimit-resource", "").strip()
        if named:
            return named
        # A GitHub Enterprise base URL carries `/api/v3` before the API path.
        relative = relative.removeprefix("api/v3/")
        for prefix, resource in _GITHUB_RESOURCES:
            if relative.startswith(prefix):
                return resource
        return "core"
    return "/".join(relative.split("/")[:2])


class AccountLimits:
    """One account's waits within a call: read once from the store, written on a limit."""

    def __init__(
        self, account_id: str, until: Mapping[str, float] | None = None,
        store: LimitStore | None = None,
    ) -> None:
        self.account_id = account_id
        self._until = dict(until or {})
        self._store = store

    @property
    def blocking(self) -> bool:
        """True when some resource of the account has (or had, in this call) a wait."""
        return bool(self._until)

    def wait(self, resource: str, *, now: float) -> float | None:
        """Seconds before `resource` may be called again; None when it may be now."""
        left = self._until.get(resource, 0.0) - now
        return left if left > 0 else None

    async def record(self, resource: str, error: ProviderError, *, now: float) -> None:
        """Block `resource` for the error's wait, here and in the store (when there is one)."""
        if error.retry_after is None or error.retry_after <= 0:
            return
        until = now + error.retry_after
        if until <= self._until.get(resource, 0.0) + _SAME_WAIT:
            return
        self._until[resource] = until
        if self._store is None:
            return
        try:
            await self._store.record_rate_limit(self.account_id, resource, until, now=now)
        except Exception:
            log.warning("could not share the rate limit of account %s", self.account_id,
                        exc_info=True)


class RateLimits:
    """Opens each account's waits from the store (None: waits stay within a session)."""

    def __init__(self, store: LimitStore | None) -> None:
        self._store = store

    async def open(self, account_ids: Sequence[str], *, now: float) -> dict[str, AccountLimits]:
        """Each account's active waits, in one store read (none when it cannot be read)."""
        if self._store is None:
            return {account_id: AccountLimits(account_id) for account_id in account_ids}
        try:
            until = await self._store.rate_limits(account_ids, now=now)
        except Exception:
            log.warning("could not read the rate limits of accounts %s",
                        ", ".join(account_ids), exc_info=True)
            until = {}
        return {account_id: AccountLimits(account_id, until.get(account_id), self._store)
                for account_id in account_ids}
