"""Provider connections kept between calls: one connection pool per account, and its memo.

An `AccountPool` holds an account's keep-alive connections (service.workspace.http1) and the memo
of answers its queries share (site lists, member projects, calendar lists), so later calls
skip TCP (and TLS) set-up and those round trips. `PoolRegistry` keeps one per (account,
origin, credential) for an engine; close it with `aclose`. An engine dropped without closing
drops its connections when collected (no unclosed-resource warnings).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import ssl
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx

from service.workspace.addresses import is_reachable
from service.workspace.http1 import OriginPool
from service.workspace.model import Account, Credentials, ProviderId

__all__ = [
    "BASIC_AUTH_PROVIDERS",
    "AccountPool",
    "PoolRegistry",
    "auth_header",
]

BASIC_AUTH_PROVIDERS = frozenset({ProviderId.JIRA, ProviderId.CONFLUENCE})
_USER_AGENT = "search-service/0.1 (+workspace search)"
_MEMO_TTL_SECONDS = 300.0
_CONNECTIONS_PER_ACCOUNT = 64
_KEEPALIVE_SECONDS = 10.0  # below common server idle timeouts, so few pooled sockets go stale
_MAX_POOLS = 1024  # accounts whose connections an engine keeps (least recently used go)


def auth_header(provider: ProviderId, credentials: Credentials) -> str:
    """The Authorization header value for the account's credentials."""
    if credentials.username and provider in BASIC_AUTH_PROVIDERS:
        pair = f"{credentials.username}:{credentials.token}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")
    return f"Bearer {credentials.token}"


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every session (loading the CA bundle costs ~20 ms)."""
    return httpx.create_ssl_context()


Origin = tuple[str, str, int | None]  # scheme, host, port


def _close_all(origins: dict[Origin, OriginPool]) -> None:
    """Drop idle connections without awaiting (garbage collection, shutdown, eviction)."""
    for pool in list(origins.values()):
        with contextlib.suppress(RuntimeError):  # a closed event loop: the sockets go with it
            pool.close()
    origins.clear()


MEMO_MAX_ENTRIES = 16  # memoised answers per account pool


def _empty_listing(data: Any) -> bool:
    """True for an answer that lists nothing: `[]`, or an object whose lists are all empty."""
    if isinstance(data, list):
        return not data
    if isinstance(data, dict):
        lists = [value for value in data.values() if isinstance(value, list)]
        return bool(lists) and not any(lists)
    return data is None


class AccountPool:
    """What may outlive one call for one account: its connections and memoised answers."""

    def __init__(self, *, public_only: bool = False) -> None:
        # A caller's base URL: every resolution is checked (DNS rebinding), connections go
        # only to the addresses checked.
        self._public_only = public_only
        self._origins: dict[Origin, OriginPool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Bounded in count and age: keys can come from callers (GitLab's `project`), values
        # are decoded provider answers.
        self._memo: OrderedDict[str, tuple[float, Any]] = OrderedDict()
        self._memo_locks: dict[str, asyncio.Lock] = {}
        weakref.finalize(self, _close_all, self._origins)

    def origin(self, origin: Origin) -> OriginPool:
        """The account's keep-alive connections to `origin` on the running loop."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections and locks belong to one event loop
            _close_all(self._origins)
            self._memo_locks.clear()
            self._loop = loop
        found = self._origins.get(origin)
        if found is None:
            scheme, host, port = origin
            found = self._origins[origin] = OriginPool(
                scheme, host, port, ssl_context=_shared_ssl_context, user_agent=_USER_AGENT,
                limit=_CONNECTIONS_PER_ACCOUNT, keepalive=_KEEPALIVE_SECONDS,
                address_check=is_reachable if self._public_only else None,
            )
        return found

    async def aclose(self) -> None:
        """Close every connection."""
        _close_all(self._origins)

    def close(self) -> None:
        """Close every connection now (eviction)."""
        _close_all(self._origins)

    def memo_get(self, key: str) -> Any | None:
        """A cached answer younger than the memo TTL, or None."""
        hit = self._memo.get(key)
        if hit is None:
            return None
        if time.monotonic() - hit[0] > _MEMO_TTL_SECONDS:
            del self._memo[key]
            return None
        self._memo.move_to_end(key)
        return hit[1]

    def memo_put(self, key: str, value: Any) -> None:
        """Remember an answer for the memo TTL; past MEMO_MAX_ENTRIES the least recently used
        answers (and every expired one) are forgotten. An empty listing is not remembered:
        a repository or calendar list that is empty now may fill soon."""
        now = time.monotonic()
        if _empty_listing(value):
            return
        self._memo[key] = (now, value)
        self._memo.move_to_end(key)
        for stale in [k for k, (at, _) in self._memo.items() if now - at > _MEMO_TTL_SECONDS]:
            del self._memo[stale]
        while len(self._memo) > MEMO_MAX_ENTRIES:
            self._memo.popitem(last=False)
        # A lock is needed only while its key is being fetched or remembered.
        for idle in [k for k, lock in self._memo_locks.items()
                     if k not in self._memo and not lock.locked()]:
            del self._memo_locks[idle]

    def memo_size(self) -> tuple[int, int]:
        """(answers, locks) held now."""
        return len(self._memo), len(self._memo_locks)

    def memo_lock(self, key: str) -> asyncio.Lock:
        """One lock per memo key, so concurrent queries fetch a shared answer once."""
        return self._memo_locks.setdefault(key, asyncio.Lock())


class PoolRegistry:
    """One AccountPool per (account, origin, credential), kept across calls; `aclose` at exit."""

    def __init__(
        self, max_pools: int = _MAX_POOLS, *, public_only: Callable[[Account], bool] | None = None
    ) -> None:
        self._pools: OrderedDict[str, AccountPool] = OrderedDict()
        self._max = max_pools
        self._public_only = public_only

    def pool(self, account: Account, credentials: Credentials) -> AccountPool:
        """The account's pool (a new credential or base URL gets a new one)."""
        secret = auth_header(account.provider, credentials).encode()
        key = "\x1f".join((
            account.account_id, account.base_url, hashlib.sha256(secret).hexdigest()
        ))
        found = self._pools.get(key)
        if found is not None:
            self._pools.move_to_end(key)
            return found
        checked = self._public_only is not None and self._public_only(account)
        created = self._pools[key] = AccountPool(public_only=checked)
        while len(self._pools) > self._max:
            _, evicted = self._pools.popitem(last=False)
            evicted.close()
        return created

    async def aclose(self) -> None:
        """Close every pool."""
        pools = list(self._pools.values())
        self._pools.clear()
        await asyncio.gather(*(p.aclose() for p in pools), return_exceptions=True)
