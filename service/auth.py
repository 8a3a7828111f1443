"""Bearer-token authentication: configured token hashes map to a tenant and a role."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from service.context import DEFAULT_TENANT
from service.errors import PermissionDenied, Unauthenticated
from service.settings import SettingsError

ROLES = ("read", "write", "admin")  # each role may do what the ones before it may

# The least role each method needs; methods not listed (health, reflection) are open.
METHOD_ROLES: Mapping[str, str] = {
    "/search.v1.ProjectSearchService/SearchProjects": "read",
    "/search.v1.WorkspaceSearchService/SearchWorkspace": "read",
    "/search.v1.WorkspaceSearchService/ListAccounts": "read",
    "/search.v1.IndexService/ListProjects": "read",
    "/search.v1.IndexService/GetIndexStatus": "read",
    "/search.v1.IndexService/CreateProject": "write",
    "/search.v1.IndexService/DeleteProject": "write",
    "/search.v1.IndexService/UpsertDocuments": "write",
    "/search.v1.IndexService/DeleteDocuments": "write",
    "/search.v1.AccountService/ConnectAccount": "admin",
    "/search.v1.AccountService/UpdateAccountCredentials": "admin",
    "/search.v1.AccountService/DisconnectAccount": "admin",
}


@dataclass(frozen=True)
class Principal:
    """Who a token belongs to."""

    tenant: str
    role: str


ANONYMOUS = Principal(tenant=DEFAULT_TENANT, role="admin")


class Authenticator:
    """Checks `authorization: Bearer <token>` against sha256 hashes, in constant time."""

    def __init__(self, spec: str) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        for raw in filter(None, (part.strip() for part in spec.split(","))):
            digest, tenant, role = _split_entry(raw)
            self._entries.append((bytes.fromhex(digest), Principal(tenant, role)))

    @property
    def enabled(self) -> bool:
        """False when no tokens are configured (loopback-only mode)."""
        return bool(self._entries)

    def authenticate(self, method: str, metadata: Mapping[str, str]) -> Principal:
        """The caller's principal; raises Unauthenticated / PermissionDenied."""
        needed = METHOD_ROLES.get(method)
        if needed is None or not self._entries:
            return ANONYMOUS
        header = metadata.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer token in the authorization metadata")
        digest = hashlib.sha256(token.strip().encode()).digest()
        found: Principal | None = None
        for expected, principal in self._entries:  # no early exit: constant time per table
            if hmac.compare_digest(expected, digest):
                found = principal
        if found is None:
            raise Unauthenticated("invalid bearer token")
        if ROLES.index(found.role) < ROLES.index(needed):
            raise PermissionDenied(
                f"role {found.role!r} may not call {method}",
                metadata={"requiredRole": needed, "role": found.role},
            )
        return found


def _split_entry(raw: str) -> tuple[str, str, str]:
    parts = raw.split(":")
    if len(parts) != 3:
        raise SettingsError("SEARCH_AUTH_TOKENS entries must be sha256hex:tenant:role")
    digest, tenant, role = parts
    if len(digest) != 64 or any(c not in "0123456789abcdefABCDEF" for c in digest):
        raise SettingsError("SEARCH_AUTH_TOKENS: token hash must be 64 hex characters")
    if role not in ROLES or not tenant:
        raise SettingsError(f"SEARCH_AUTH_TOKENS: bad tenant or role in entry for {tenant!r}")
    return digest, tenant, role
