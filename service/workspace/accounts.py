"""Provider accounts of a tenant: connect, list, replace credentials, disconnect.

Credentials are sealed with a key from settings (see `service.workspace.credentials`). They are
never returned, logged or put in error messages; a listing says only when the access token
expires and whether a refresh token is stored.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import httpx

from service.errors import FieldViolation, InvalidArgument, NotFound
from service.store.base import AccountRecord, Store
from service.workspace.addresses import is_public as _is_public
from service.workspace.credentials import CredentialSealer, bound_to, check_credentials
from service.workspace.model import Account, Credentials, ProviderId
from service.workspace.pool import BASIC_AUTH_PROVIDERS
from service.workspace.providers import ProviderSpec

__all__ = [
    "SELF_HOSTED",
    "AccountManager",
    "AccountSnapshot",
    "AccountView",
    "ConnectRequest",
    "CredentialSealer",
    "Resolver",
]

log = logging.getLogger(__name__)

SELF_HOSTED = frozenset(
    {ProviderId.GITHUB, ProviderId.GITLAB, ProviderId.JIRA, ProviderId.CONFLUENCE}
)
MAX_DISPLAY_NAME = 200
MAX_BASE_URL = 2048

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


@dataclass(frozen=True)
class ConnectRequest:
    """What a caller sends to connect an account (provider None: unspecified or unknown)."""

    provider: ProviderId | None
    display_name: str
    base_url: str = ""
    credentials: Credentials | None = field(default=None, repr=False)


@dataclass(frozen=True)
class AccountView:
    """An account as listed: never its credentials, only when they expire and if they renew.

    Views in an `AccountSnapshot` leave `expires_at`, `refreshable` and `scopes` unset (a search
    does not open every blob); `list_accounts`, `connect` and `replace_credentials` fill them.
    """

    account: Account
    created_at: datetime
    expires_at: datetime | None = None  # when the access token expires; None: unknown or never
    refreshable: bool = False  # a refresh token is stored
    scopes: tuple[str, ...] = ()  # the granted scopes stored (empty: unknown or unset)


class AccountSnapshot:
    """A tenant's accounts at the start of a call, able to open their credentials."""

    def __init__(
        self, views: Sequence[AccountView], records: Mapping[str, AccountRecord],
        sealer: CredentialSealer,
    ) -> None:
        self.views = tuple(views)
        self.accounts = tuple(view.account for view in views)
        self._records = dict(records)
        self._sealer = sealer

    def __repr__(self) -> str:
        return f"AccountSnapshot(accounts={len(self.accounts)})"

    def sealed(self, account: Account) -> bytes:
        """The account's sealed credentials as the call read them."""
        return self._records[account.account_id].sealed_credentials

    def credentials(self, account: Account) -> Credentials:
        """Open the account's credentials; ValueError when they cannot be opened."""
        record = self._records[account.account_id]
        bound = bound_to(record.tenant, record.account_id, record.provider)
        return self._sealer.open(record.sealed_credentials, bound)


async def _system_resolve(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]



class AccountManager:
    """Connects, lists and disconnects a tenant's provider accounts."""

    def __init__(
        self,
        store: Store,
        key: bytes,
        registry: Mapping[ProviderId, ProviderSpec],
        *,
        allow_private_base_urls: bool = False,
        allow_insecure_http: bool = False,
        base_url_overrides: Mapping[ProviderId, str] | None = None,
        resolver: Resolver | None = None,
        previous_keys: Sequence[bytes] = (),
    ) -> None:
        self._store = store
        self._sealer = CredentialSealer(key, previous_keys)
        self._registry = registry
        self._allow_private = allow_private_base_urls
        self._allow_http = allow_insecure_http
        self._overrides = dict(base_url_overrides or {})
        self._resolve = resolver or _system_resolve

    def __repr__(self) -> str:
        return "AccountManager()"

    def default_base_url(self, provider: ProviderId) -> str:
        """The API origin used when an account has no base URL of its own."""
        return self._overrides.get(provider) or self._registry[provider].default_base_url

    def checks_addresses(self, account: Account) -> bool:
        """Whether the account's base URL is the caller's, to be kept off private addresses
        at every request too (not an operator's origin, nor SEARCH_ALLOW_PRIVATE_BASE_URLS)."""
        return not self._allow_private and account.base_url != self.default_base_url(
            account.provider
        )

    def _order(self, account: Account) -> tuple[int, str, str, str]:
        position = list(self._registry).index(account.provider)
        return (position, account.display_name.casefold(), account.display_name,
                account.account_id)

    def _view(
        self, record: AccountRecord, credentials: Credentials | None = None
    ) -> AccountView | None:
        try:
            provider = ProviderId(record.provider)
        except ValueError:
            return None  # a provider this build no longer knows
        account = Account(
            account_id=record.account_id,
            tenant=record.tenant,
            provider=provider,
            display_name=record.display_name,
            base_url=record.base_url or self.default_base_url(provider),
            needs_reconnect=record.needs_reconnect,
        )
        if credentials is None:
            return AccountView(account, record.created_at)
        return AccountView(
            account, record.created_at, credentials.expires_at, credentials.refreshable,
            credentials.scopes,
        )

    async def snapshot(self, tenant: str) -> AccountSnapshot:
        """The tenant's accounts in display order (registry order, name, id)."""
        records = await self._store.list_accounts(tenant)
        views = [v for v in map(self._view, records) if v is not None]
        views.sort(key=lambda view: self._order(view.account))
        return AccountSnapshot(views, {r.account_id: r for r in records}, self._sealer)

    async def list_accounts(
        self, tenant: str, provider: ProviderId | None = None
    ) -> list[AccountView]:
        """The tenant's accounts (of one provider when given), in display order."""
        snapshot = await self.snapshot(tenant)
        return [
            _with_lifetime(snapshot, view)
            for view in snapshot.views
            if provider is None or view.account.provider is provider
        ]

    async def connect(self, tenant: str, request: ConnectRequest) -> AccountView:
        """Validate, seal the credentials and store a new account."""
        violations = self._check(request)
        base_url = ""
        if not violations and request.base_url.strip():
            assert request.provider is not None
            base_url, problem = await self._check_base_url(request.provider, request.base_url)
            if problem:
                violations.append(FieldViolation("base_url", problem))
        _raise_invalid(violations)
        assert request.provider is not None
        assert request.credentials is not None
        account_id = "acc_" + secrets.token_urlsafe(12)
        credentials = replace(
            request.credentials, scopes=tuple(dict.fromkeys(request.credentials.scopes))
        )
        sealed = self._sealer.seal(
            credentials, bound_to(tenant, account_id, request.provider.value)
        )
        record = AccountRecord(
            account_id=account_id,
            tenant=tenant,
            provider=request.provider.value,
            display_name=request.display_name.strip(),
            base_url=base_url,
            sealed_credentials=sealed,
            created_at=datetime.now(UTC),
        )
        await self._store.create_account(record)
        log.info("account connected: tenant=%s account=%s provider=%s", tenant, account_id,
                 request.provider.value)
        view = self._view(record, credentials)
        assert view is not None
        return view

    async def replace_credentials(
        self, tenant: str, account_id: str, credentials: Credentials,
        *, clear_reconnect: bool = True,
    ) -> AccountView:
        """Seal and store new credentials for an account in place, keeping its id.

        Raises InvalidArgument for bad credentials and NotFound when the tenant has no such
        account. `clear_reconnect` also clears NEEDS_RECONNECT (the caller vouches for them).
        """
        violations = check_credentials(credentials)
        if not account_id:
            violations.insert(0, FieldViolation("account_id", "required"))
        _raise_invalid(violations)
        record = await self._record(tenant, account_id)
        if credentials.username and record.provider in BASIC_AUTH_PROVIDERS and not record.base_url:
            _raise_invalid([FieldViolation(
                "credentials.username",
                "basic auth (a username) talks to a site, and this account has no base_url: "
                "connect a new account with base_url https://<site>.atlassian.net",
            )])
        credentials = replace(credentials, scopes=tuple(dict.fromkeys(credentials.scopes)))
        sealed = self._sealer.seal(credentials, bound_to(tenant, account_id, record.provider))
        needs = False if clear_reconnect else None
        if not await self._store.replace_account_credentials(
            tenant, account_id, sealed, needs_reconnect=needs
        ):
            raise _account_not_found()  # disconnected meanwhile
        log.info("account credentials replaced: tenant=%s account=%s provider=%s", tenant,
                 account_id, record.provider)
        stored = replace(
            record, sealed_credentials=sealed,
            needs_reconnect=record.needs_reconnect and not clear_reconnect,
        )
        view = self._view(stored, credentials)
        assert view is not None  # _record only returns accounts of known providers
        return view

    async def refresh_credentials(
        self, account: Account,
        refresh: Callable[[Credentials], Awaitable[Credentials | None]],
    ) -> Credentials:
        """Run `refresh(stored credentials)` under the store's account lock (shared by every
        replica) and commit what it returns (None: keep them); the credentials stored at the end.

        Raises NotFound when the account is gone, ValueError when the stored blob does not open
        and InvalidArgument when `refresh` returns credentials that cannot be stored.
        """
        bound = bound_to(account.tenant, account.account_id, account.provider.value)

        async def sealed_refresh(sealed: bytes) -> bytes | None:
            fresh = await refresh(self._sealer.open(sealed, bound))
            if fresh is None:
                return None
            _raise_invalid(check_credentials(fresh))
            fresh = replace(fresh, scopes=tuple(dict.fromkeys(fresh.scopes)))
            return self._sealer.seal(fresh, bound)

        stored = await self._store.refresh_account_credentials(
            account.tenant, account.account_id, sealed_refresh
        )
        if stored is None:
            raise _account_not_found()
        return self._sealer.open(stored, bound)

    async def _record(self, tenant: str, account_id: str) -> AccountRecord:
        """The tenant's account of a provider this build knows; NotFound otherwise."""
        for record in await self._store.list_accounts(tenant):
            if record.account_id == account_id and self._view(record) is not None:
                return record
        raise _account_not_found()

    async def disconnect(self, tenant: str, account_id: str) -> None:
        """Delete the account and its sealed credentials; NotFound when it is not the tenant's."""
        if not account_id or not await self._store.delete_account(tenant, account_id):
            raise _account_not_found()
        log.info("account disconnected: tenant=%s account=%s", tenant, account_id)

    async def mark_reconnect(
        self, tenant: str, account_id: str, needs: bool, *, sealed: bytes | None = None
    ) -> None:
        """Record that the provider refused (or accepted again) the account's credentials;
        with `sealed` (the credentials refused), only if the account still holds them."""
        await self._store.set_account_reconnect(tenant, account_id, needs, sealed=sealed)

    def _check(self, request: ConnectRequest) -> list[FieldViolation]:
        problems: list[FieldViolation] = []
        if request.provider is None or request.provider not in self._registry:
            problems.append(FieldViolation("provider", "unknown or missing provider"))
        name = request.display_name.strip()
        if not 1 <= len(name) <= MAX_DISPLAY_NAME or not name.isprintable():
            problems.append(
                FieldViolation("display_name", f"1..{MAX_DISPLAY_NAME} printable characters")
            )
        credential_problems = check_credentials(request.credentials)
        problems.extend(credential_problems)
        if request.base_url.strip() and request.provider not in SELF_HOSTED:
            problems.append(
                FieldViolation("base_url", "only GitHub, GitLab, Jira and Confluence take one")
            )
        elif not credential_problems and _basic_auth_without_site(request):
            problems.append(FieldViolation(
                "base_url",
                "basic auth (a username) talks to the site itself: set base_url to "
                "https://<site>.atlassian.net (api.atlassian.com takes OAuth tokens only)",
            ))
        return problems

    async def _check_base_url(self, provider: ProviderId, raw: str) -> tuple[str, str]:
        """(normalised URL, problem); problem is '' when the URL is acceptable."""
        text = raw.strip()
        try:
            url = httpx.URL(text)
        except (httpx.InvalidURL, ValueError):
            return "", "not a valid URL"
        schemes = ("https", "http") if self._allow_http else ("https",)
        if len(text) > MAX_BASE_URL or url.scheme not in schemes or not url.host:
            return "", "must be an https URL with a host"
        if url.userinfo or url.query or url.fragment:
            return "", "must not carry credentials, a query or a fragment"
        if url.port is not None and not 1 <= url.port <= 65535:
            return "", "port must be 1..65535"
        if not self._allow_private:
            problem = await self._check_addresses(url.host, url.port or 443)
            if problem:
                return "", problem
        return str(url).rstrip("/"), ""

    async def _check_addresses(self, host: str, port: int) -> str:
        try:
            addresses = await self._resolve(host, port)
        except (OSError, UnicodeError):
            return "host does not resolve"
        if not addresses:
            return "host does not resolve"
        try:
            public = all(_is_public(address) for address in addresses)
        except ValueError:
            return "host does not resolve to an IP address"
        return "" if public else "private, loopback and link-local addresses are not allowed"


def _basic_auth_without_site(request: ConnectRequest) -> bool:
    """Jira/Confluence basic auth without a site URL (api.atlassian.com takes only OAuth)."""
    user = request.credentials.username if request.credentials is not None else ""
    return bool(user) and request.provider in BASIC_AUTH_PROVIDERS and not request.base_url.strip()


def _raise_invalid(violations: Sequence[FieldViolation]) -> None:
    """InvalidArgument naming the first violation, when there is any."""
    if violations:
        first = violations[0]
        raise InvalidArgument(f"{first.field}: {first.description}", violations=violations)


def _account_not_found() -> NotFound:
    return NotFound("account not found", reason="ACCOUNT_NOT_FOUND")


def _with_lifetime(snapshot: AccountSnapshot, view: AccountView) -> AccountView:
    """The view with its credentials' expiry and refreshability (unset when they do not open)."""
    try:
        credentials = snapshot.credentials(view.account)
    except ValueError:
        return view
    return replace(
        view, expires_at=credentials.expires_at, refreshable=credentials.refreshable,
        scopes=credentials.scopes,
    )
