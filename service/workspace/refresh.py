"""Access-token refresh for accounts with a refresh token: single-flight per account, across
processes.

A session asks `TokenRefresher.renew` ahead of expiry (`due`) or after the provider refused the
access token. Under one lock per account in this process, and then the store's account lock
that every replica sharing the database respects (a row lock on PostgreSQL, a file lock on
SQLite), the refresher re-reads the stored credentials (another query or replica may have
refreshed already), calls the family's token endpoint (service.workspace.oauth), and commits
the new credentials (a rotated refresh token included) before the lock is released and anyone
uses them. The exchange and the write run in their own task, so a query cancelled meanwhile
(its deadline) never loses a rotated refresh token. A failed refresh is remembered for a few
seconds (or the provider's wait), so the queries queued behind it get its answer without
another request.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

import httpx

from service.errors import InvalidArgument, NotFound
from service.workspace.credentials import SEALED
from service.workspace.model import Account, Credentials, ProviderError, QueryState
from service.workspace.oauth import (
    FAMILY_OF,
    OAuthClient,
    TokenGrant,
    TokenRequest,
    build_refresh,
    parse_refresh,
)

__all__ = [
    "REFRESH_MARGIN",
    "CredentialStore",
    "ManagerStore",
    "RefreshObserver",
    "TokenRefresher",
]

log = logging.getLogger(__name__)

# Refresh this long before the stored expiry. A token checked now must still be valid when the
# provider reads it: a search call lasts 20 s by default (a provider request at most 10 s), and
# provider clocks may differ from ours by some seconds. 120 s covers both with room, and is
# under 4 % of the shortest lifetime (Google and Atlassian, 1 h), so refreshes stay hourly.
REFRESH_MARGIN = 120.0
# How long a failed refresh answers the queries waiting behind it (unless the provider named a
# wait): long enough for one burst of concurrent queries, short enough to retry soon.
FAILURE_HOLD = 5.0
MAX_TOKEN_RESPONSE = 64 * 1024

RefreshObserver = Callable[[str, str], None]  # (provider, outcome)


def _ignore(provider: str, outcome: str) -> None:
    del provider, outcome


class CredentialStore(Protocol):
    """Where the account's current credentials are read and written."""

    async def stored(self, account: Account) -> Credentials:
        """The credentials stored now (raise ProviderError when they cannot be read)."""
        ...

    async def exclusive(
        self, account: Account,
        refresh: Callable[[Credentials], Awaitable[Credentials | None]],
    ) -> Credentials:
        """Run `refresh(stored)` under the account's lock shared by every replica, commit what
        it returns (None: keep them) before releasing it; the credentials stored at the end."""
        ...


class _Manager(Protocol):
    async def snapshot(self, tenant: str) -> _Snapshot: ...

    async def refresh_credentials(
        self, account: Account,
        refresh: Callable[[Credentials], Awaitable[Credentials | None]],
    ) -> Credentials: ...


class _Snapshot(Protocol):
    def credentials(self, account: Account) -> Credentials: ...


class ManagerStore:
    """`CredentialStore` over the AccountManager (sealed credentials in the service's store)."""

    def __init__(self, manager: _Manager) -> None:
        self._manager = manager

    async def stored(self, account: Account) -> Credentials:
        """The account's credentials as stored now."""
        snapshot = await self._manager.snapshot(account.tenant)
        try:
            return snapshot.credentials(account)
        except KeyError:
            raise ProviderError(QueryState.FAILED, "the account was disconnected") from None
        except ValueError:
            raise ProviderError(QueryState.NEEDS_RECONNECT, SEALED) from None

    async def exclusive(
        self, account: Account,
        refresh: Callable[[Credentials], Awaitable[Credentials | None]],
    ) -> Credentials:
        """`refresh` under the store's account lock; NEEDS_RECONNECT is left to the search."""
        try:
            return await self._manager.refresh_credentials(account, refresh)
        except NotFound:
            raise ProviderError(QueryState.FAILED, "the account was disconnected") from None
        except ValueError:
            raise ProviderError(QueryState.NEEDS_RECONNECT, SEALED) from None
        except InvalidArgument as error:
            log.warning("refreshed credentials of account %s were refused: %s",
                        account.account_id, error)
            raise ProviderError(
                QueryState.NEEDS_RECONNECT,
                "the provider's refreshed credentials could not be stored; reconnect the account",
            ) from None


@dataclass(frozen=True)
class _Failure:
    error: ProviderError
    refresh_digest: str
    until: float  # time.monotonic(); inf for a refused refresh token


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRefresher:
    """Renews access tokens with each family's OAuth client; `aclose` at exit."""

    def __init__(
        self,
        clients: Iterable[OAuthClient],
        store: CredentialStore,
        *,
        margin: float = REFRESH_MARGIN,
        timeout: float = 10.0,
        observer: RefreshObserver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._clients = {client.family: client for client in clients}
        self._store = store
        self._margin = timedelta(seconds=margin)
        self._timeout = timeout
        self._observe = observer or _ignore
        self._transport = transport
        self._http: httpx.AsyncClient | None = None
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._failures: dict[str, _Failure] = {}
        self._tasks: set[asyncio.Task[Credentials]] = set()

    def __repr__(self) -> str:
        return f"TokenRefresher(families={sorted(self._clients)})"

    def due(self, credentials: Credentials) -> bool:
        """True when the access token expires within the margin (or has expired)."""
        expires = credentials.expires_at
        if expires is None:
            return False
        if expires.tzinfo is None:  # stored as UTC
            expires = expires.replace(tzinfo=UTC)
        return expires - datetime.now(UTC) <= self._margin

    async def renew(
        self, account: Account, credentials: Credentials, *, refused: bool
    ) -> Credentials:
        """Credentials to use instead of `credentials` (refreshed, or stored by another query).

        `refused`: the provider refused `credentials.token`; else the token is merely due.
        Raises ProviderError: NEEDS_RECONNECT when the refresh token was refused, RATE_LIMITED
        or a retryable FAILED when the token endpoint cannot answer now.
        """
        task = asyncio.create_task(self._renew(account, credentials, refused))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(task)

    async def aclose(self) -> None:
        """Let refreshes in flight finish (they store rotated tokens), then close the client."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self._timeout)
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    async def _renew(self, account: Account, seen: Credentials, refused: bool) -> Credentials:
        key = f"{account.tenant}\x1f{account.account_id}"
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            stored = await self._store.stored(account)
            if stored.token != seen.token and not self.due(stored):
                return stored  # another query refreshed while this one waited
            if not stored.refreshable or not (refused or self.due(stored)):
                return stored
            client = self._clients.get(FAMILY_OF[account.provider])
            if client is None:
                if not refused:
                    return stored  # cannot refresh: try the token while it lasts
                family = FAMILY_OF[account.provider].value
                raise ProviderError(
                    QueryState.NEEDS_RECONNECT,
                    f"the access token was refused and this service has no {family} OAuth "
                    f"client to refresh it (SEARCH_OAUTH_{family.upper()}_CLIENT_ID); "
                    "reconnect the account",
                )
            return await self._refresh_shared(key, account, client, stored)

    async def _refresh_shared(
        self, key: str, account: Account, client: OAuthClient, seen: Credentials
    ) -> Credentials:
        """Refresh under the store's account lock, unless another replica already did."""
        refreshed: list[Credentials] = []

        async def refresh(stored: Credentials) -> Credentials | None:
            if (stored.token, stored.refresh_token) != (seen.token, seen.refresh_token):
                return None  # replaced (by another replica) since this process read them
            if not stored.refreshable:
                return None
            refreshed.append(await self._refresh(key, account, client, stored))
            return refreshed[-1]

        provider = account.provider.value
        try:
            current = await self._store.exclusive(account, refresh)
        except ProviderError as error:
            if refreshed:  # the provider answered but the new credentials were not stored
                self._observe(provider, error.state.value)
            raise
        if refreshed:
            self._observe(provider, "ok")
            log.info("access token refreshed: account=%s provider=%s rotated=%s",
                     account.account_id, provider,
                     refreshed[-1].refresh_token != seen.refresh_token)
        return current

    async def _refresh(
        self, key: str, account: Account, client: OAuthClient, stored: Credentials
    ) -> Credentials:
        digest = _digest(stored.refresh_token)
        failure = self._failures.get(key)
        if failure and failure.refresh_digest == digest and time.monotonic() < failure.until:
            raise failure.error
        provider = account.provider.value
        try:
            grant = await self._exchange(client, stored.refresh_token)
        except ProviderError as error:
            hold = float("inf") if error.state is QueryState.NEEDS_RECONNECT else (
                error.retry_after or FAILURE_HOLD
            )
            self._failures[key] = _Failure(error, digest, time.monotonic() + hold)
            self._observe(provider, error.state.value)
            log.warning("access token refresh failed: account=%s provider=%s: %s",
                        account.account_id, provider, error.message)
            raise
        self._failures.pop(key, None)
        return replace(
            stored,
            token=grant.access_token,
            refresh_token=grant.refresh_token,
            expires_at=grant.expires_at,
            scopes=grant.scopes or stored.scopes,
        )

    async def _exchange(self, client: OAuthClient, refresh_token: str) -> TokenGrant:
        request = build_refresh(client, refresh_token)
        title = client.family.value
        try:
            status, headers, body = await self._post(request)
        except httpx.TimeoutException:
            raise _transient(f"the {title} token endpoint timed out") from None
        except httpx.HTTPError as exc:
            raise _transient(
                f"could not reach the {title} token endpoint ({type(exc).__name__})"
            ) from None
        return parse_refresh(
            client.family, status, headers, body, refresh_token=refresh_token,
            now=datetime.now(UTC), secrets=(client.client_secret,),
        )

    async def _post(
        self, request: TokenRequest, *, resend: bool = True
    ) -> tuple[int, httpx.Headers, bytes]:
        """The token endpoint's status, headers and body (bounded) for `request`. A kept-alive
        connection the endpoint closed as the request went out ends before the answer
        begins: the request is then sent once more, on a new connection (resending cannot
        cost a grant: the tokens of a grant that was never answered are lost either way)."""
        answered = False
        try:
            async with self._client().stream(
                "POST", request.url, content=request.body, headers=dict(request.headers)
            ) as response:
                answered = True
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_TOKEN_RESPONSE:
                        break
                return response.status_code, response.headers, bytes(body)
        except _UNANSWERED:
            if answered or not resend:
                raise
        return await self._post(request, resend=False)

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=self._timeout, follow_redirects=False, trust_env=False,
                transport=self._transport,
            )
        return self._http


# What a connection that ended before the token endpoint answered raises.
_UNANSWERED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


def _transient(message: str) -> ProviderError:
    return ProviderError(
        QueryState.FAILED, f"{message}; the account stays connected, try again later",
        retryable=True,
    )
