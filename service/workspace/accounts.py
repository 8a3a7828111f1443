"""Provider accounts of a tenant: connect, list, disconnect; credentials sealed with AES-GCM.

Credentials are sealed with a key from settings and bound (as associated data) to the tenant,
account id and provider, so a sealed blob copied to another row does not open. They are never
returned, logged or put in error messages.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import httpx
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from service.errors import FieldViolation, InvalidArgument, NotFound
from service.store.base import AccountRecord, Store
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
MAX_TOKEN = 4096
MAX_USERNAME = 320
MAX_BASE_URL = 2048
MAX_SCOPES = 100
MAX_SCOPE = 200
# An RFC 6749 scope token: printable ASCII without space, double quote or backslash.
_SCOPE_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - {'"', "\\"}
_SEAL_VERSION = b"\x01"
_NONCE_BYTES = 12

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


class CredentialSealer:
    """AES-256-GCM sealing of credentials; the associated data binds a blob to its account."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("credentials key must hold at least 16 bytes")
        if len(key) not in (16, 24, 32):
            key = HKDF(hashes.SHA256(), 32, None, b"search-service credentials").derive(key)
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "CredentialSealer(key=***)"

    def seal(self, credentials: Credentials, bound_to: bytes) -> bytes:
        """Ciphertext of the credentials."""
        plain = json.dumps(
            {"t": credentials.token, "u": credentials.username, "s": list(credentials.scopes)}
        ).encode()
        nonce = os.urandom(_NONCE_BYTES)
        return _SEAL_VERSION + nonce + self._aead.encrypt(nonce, plain, bound_to)

    def open(self, sealed: bytes, bound_to: bytes) -> Credentials:
        """The credentials; ValueError when the blob was not sealed for `bound_to` by this key."""
        if sealed[:1] != _SEAL_VERSION or len(sealed) < 1 + _NONCE_BYTES + 16:
            raise ValueError("sealed credentials have an unknown format")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            data = json.loads(self._aead.decrypt(nonce, body, bound_to))
        except (InvalidTag, ValueError):
            raise ValueError("sealed credentials cannot be opened with this key") from None
        return Credentials(str(data["t"]), str(data.get("u", "")), tuple(data.get("s", ())))


def _bound_to(tenant: str, account_id: str, provider: str) -> bytes:
    return "\x1f".join((tenant, account_id, provider)).encode()


@dataclass(frozen=True)
class ConnectRequest:
    """What a caller sends to connect an account (provider None: unspecified or unknown)."""

    provider: ProviderId | None
    display_name: str
    base_url: str = ""
    credentials: Credentials | None = field(default=None, repr=False)


@dataclass(frozen=True)
class AccountView:
    """An account as listed: never its credentials."""

    account: Account
    created_at: datetime


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

    def credentials(self, account: Account) -> Credentials:
        """Open the account's credentials; ValueError when they cannot be opened."""
        record = self._records[account.account_id]
        bound = _bound_to(record.tenant, record.account_id, record.provider)
        return self._sealer.open(record.sealed_credentials, bound)


async def _system_resolve(host: str, port: int) -> Sequence[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known prefix: IPv4 in the last 32 bits
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # local-use (RFC 8215): never public


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address reaches: mapped, NAT64, 6to4 and Teredo forms."""
    found = [v4 for v4 in (ip.ipv4_mapped, ip.sixtofour) if v4 is not None]
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if ip in _NAT64:
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64_LOCAL:
            return False
        embedded = _embedded_ipv4(ip)
        # A translated address is as public as the IPv4 address it reaches.
        candidates = list(embedded) if embedded else candidates
    return all(c.is_global and not c.is_multicast for c in candidates)


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
    ) -> None:
        self._store = store
        self._sealer = CredentialSealer(key)
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

    def _order(self, account: Account) -> tuple[int, str, str, str]:
        position = list(self._registry).index(account.provider)
        return (position, account.display_name.casefold(), account.display_name,
                account.account_id)

    def _view(self, record: AccountRecord) -> AccountView | None:
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
        return AccountView(account, record.created_at)

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
        views = (await self.snapshot(tenant)).views
        return [v for v in views if provider is None or v.account.provider is provider]

    async def connect(self, tenant: str, request: ConnectRequest) -> AccountView:
        """Validate, seal the credentials and store a new account."""
        violations = self._check(request)
        base_url = ""
        if not violations and request.base_url.strip():
            assert request.provider is not None
            base_url, problem = await self._check_base_url(request.provider, request.base_url)
            if problem:
                violations.append(FieldViolation("base_url", problem))
        if violations:
            first = violations[0]
            raise InvalidArgument(f"{first.field}: {first.description}", violations=violations)
        assert request.provider is not None
        assert request.credentials is not None
        account_id = "acc_" + secrets.token_urlsafe(12)
        credentials = replace(
            request.credentials, scopes=tuple(dict.fromkeys(request.credentials.scopes))
        )
        sealed = self._sealer.seal(
            credentials, _bound_to(tenant, account_id, request.provider.value)
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
        view = self._view(record)
        assert view is not None
        return view

    async def disconnect(self, tenant: str, account_id: str) -> None:
        """Delete the account and its sealed credentials; NotFound when it is not the tenant's."""
        if not account_id or not await self._store.delete_account(tenant, account_id):
            raise NotFound("account not found", reason="ACCOUNT_NOT_FOUND")
        log.info("account disconnected: tenant=%s account=%s", tenant, account_id)

    async def mark_reconnect(self, tenant: str, account_id: str, needs: bool) -> None:
        """Record that the provider refused (or accepted again) the account's credentials."""
        await self._store.set_account_reconnect(tenant, account_id, needs)

    def _check(self, request: ConnectRequest) -> list[FieldViolation]:
        problems: list[FieldViolation] = []
        if request.provider is None or request.provider not in self._registry:
            problems.append(FieldViolation("provider", "unknown or missing provider"))
        name = request.display_name.strip()
        if not 1 <= len(name) <= MAX_DISPLAY_NAME or not name.isprintable():
            problems.append(
                FieldViolation("display_name", f"1..{MAX_DISPLAY_NAME} printable characters")
            )
        credential_problems = _check_credentials(request.credentials)
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


def _check_credentials(credentials: Credentials | None) -> list[FieldViolation]:
    if credentials is None:
        return [FieldViolation("credentials", "credentials are required")]
    token = credentials.token
    if not token or len(token) > MAX_TOKEN:
        return [FieldViolation("credentials.token", f"1..{MAX_TOKEN} characters required")]
    if not (token.isascii() and token.isprintable()) or " " in token:
        return [FieldViolation("credentials.token", "must be printable ASCII without spaces")]
    user = credentials.username
    if len(user) > MAX_USERNAME or (user and not user.isprintable()) or ":" in user:
        return [FieldViolation("credentials.username", "a printable user without ':'")]
    return _check_scopes(credentials.scopes)


def _check_scopes(scopes: Sequence[str]) -> list[FieldViolation]:
    if len(scopes) > MAX_SCOPES:
        return [FieldViolation("credentials.scopes", f"at most {MAX_SCOPES} scopes")]
    return [
        FieldViolation(
            f"credentials.scopes[{i}]",
            f"1..{MAX_SCOPE} printable ASCII characters without spaces, quotes or backslashes",
        )
        for i, scope in enumerate(scopes)
        if not 1 <= len(scope) <= MAX_SCOPE or not set(scope) <= _SCOPE_CHARS
    ]
