"""Fake OAuth 2.0 token endpoints (refresh grant) speaking each authorization server's format.

One issuer per family (Google, Slack, GitHub, GitLab, Atlassian) on its own loopback port. It
issues access tokens that expire (`lifetime`), rotates refresh tokens as PROVIDERS-AUTH.md A
says (Google: never; Slack, GitHub, GitLab: single use; Atlassian: a reuse window, and a late
reuse revokes the whole token family), and fails on demand: `revoke()`, or the server faults
(`fail_status(503)`, `rate_limit(30)`). Provider fakes linked to an issuer accept its live
access tokens and answer expired ones with their provider's expired-token shape.
"""

from __future__ import annotations

import base64
import itertools
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode

from service.fakes.base import FakeProvider
from service.fakes.server import Request, Response

__all__ = ["FakeTokenIssuer", "Grant"]

TOKEN_PATHS = {
    "google": "/token",
    "slack": "/api/oauth.v2.access",
    "github": "/login/oauth/access_token",
    "gitlab": "/oauth/token",
    "atlassian": "/oauth/token",
}
ROTATES = frozenset({"slack", "github", "gitlab", "atlassian"})
# GitHub and GitLab invalidate the previous access token when its refresh token is used.
REVOKES_OLD_ACCESS = frozenset({"github", "gitlab"})
_COUNTER = itertools.count(1)


@dataclass(frozen=True)
class Grant:
    """Tokens an issuer handed out (what a test connects an account with)."""

    access_token: str
    refresh_token: str
    expires_at: datetime


@dataclass
class _Refresh:
    lineage: int  # the token family (one authorization)
    used_at: float | None = None  # when it was rotated away


class FakeTokenIssuer(FakeProvider):
    """The token endpoint of one authorization server."""

    def __init__(self, family: str, *, lifetime: float = 3600.0) -> None:
        self.name = f"oauth_{family}"
        super().__init__()
        self.family = family
        self.path = TOKEN_PATHS[family]
        self.client_id = f"client-{family}"
        self.client_secret = f"client-secret-{family}-shh"
        self.default_lifetime = lifetime
        self.route("POST", self.path.replace(".", r"\."), self._token)
        self.reset()

    @property
    def token_url(self) -> str:
        """The endpoint's URL (for `SEARCH_OAUTH_<FAMILY>_TOKEN_URL`)."""
        return self.base_url + self.path

    def reset(self) -> None:
        """Forget every token, fault and count; default lifetime and reuse window."""
        super().reset()
        self.lifetime = self.default_lifetime
        self.reuse_window = 600.0 if self.family == "atlassian" else 0.0
        self.scopes: tuple[str, ...] = ()
        self.refreshes = 0  # successful refresh grants
        self._access: dict[str, tuple[float, int]] = {}  # token -> (expires, lineage)
        self._revoked_access: set[str] = set()
        self._refresh: dict[str, _Refresh] = {}
        self._dead_lineages: set[int] = set()

    def authorized(self, request: Request) -> bool:
        """The token endpoint checks client credentials itself."""
        del request
        return True

    # ---- knobs ----------------------------------------------------------------------------
    def grant(self, *, lifetime: float | None = None) -> Grant:
        """A fresh authorization: an access token (expiring) and a refresh token."""
        return self._mint(next(_COUNTER), lifetime)

    def expire_all(self) -> None:
        """Every access token issued so far expires now."""
        self._access = {token: (0.0, lineage) for token, (_, lineage) in self._access.items()}

    def revoke(self) -> None:
        """Every refresh token stops working (the user revoked the app)."""
        self._dead_lineages.update(r.lineage for r in self._refresh.values())

    def issued(self) -> set[str]:
        """Every access and refresh token handed out since the last reset (tests grep for
        them where no token may appear)."""
        return set(self._access) | set(self._refresh) | self._revoked_access

    def state(self, access_token: str) -> str:
        """live, expired, revoked or unknown."""
        if access_token in self._revoked_access:
            return "revoked"
        found = self._access.get(access_token)
        if found is None:
            return "unknown"
        if found[1] in self._dead_lineages:
            return "revoked"
        return "live" if found[0] > time.time() else "expired"

    # ---- the endpoint ---------------------------------------------------------------------
    def _mint(self, lineage: int, lifetime: float | None) -> Grant:
        seconds = self.lifetime if lifetime is None else lifetime
        number = next(_COUNTER)
        access = f"at-{self.family}-{number}-{'x' * 8}"
        refresh = f"rt-{self.family}-{number}-{'y' * 8}"
        expires = time.time() + seconds
        self._access[access] = (expires, lineage)
        self._refresh[refresh] = _Refresh(lineage)
        return Grant(access, refresh, datetime.fromtimestamp(expires, UTC))

    def _form(self, request: Request) -> dict[str, str] | None:
        """The grant's parameters as each server takes them (PROVIDERS-AUTH.md A); None for a
        body it does not read. Atlassian: JSON. Google, GitLab: a form (RFC 6749). Slack:
        either. GitHub: its docs show query parameters; a form body (what the service
        sends) or JSON is read too, since which bodies it takes is unconfirmed."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        fields: dict[str, str] = {}
        if self.family == "github":
            fields.update({k: v[0] for k, v in request.query.items()})
        json_ok = self.family in ("atlassian", "slack", "github")
        form_ok = self.family != "atlassian"
        if kind == "application/json" and json_ok:
            data = request.json()
            if not isinstance(data, dict):
                return None
            fields.update({str(k): str(v) for k, v in data.items()})
        elif kind == "application/x-www-form-urlencoded" and form_ok:
            fields.update({k: v[0] for k, v in parse_qs(request.body.decode()).items()})
        elif request.body or not fields:
            return None
        return fields

    def _client_ok(self, request: Request, form: dict[str, str]) -> bool:
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            pair = base64.b64decode(header[6:]).decode()
            client_id, _, secret = pair.partition(":")
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        return client_id == self.client_id and secret == self.client_secret

    def _token(self, request: Request, _match: object) -> Response:
        form = self._form(request)
        if form is None:
            return self._error(request, "invalid_request", "Unsupported request body.", 400)
        if not self._client_ok(request, form):
            return self._error(request, "invalid_client", "Client authentication failed.", 401)
        if form.get("grant_type") != "refresh_token":
            return self._error(request, "unsupported_grant_type", "Only refresh_token.", 400)
        used = form.get("refresh_token", "")
        entry = self._refresh.get(used)
        if entry is None or entry.lineage in self._dead_lineages or not self._reusable(entry):
            return self._refused(request)
        if self.family not in ROTATES:
            grant = self._reissue(entry.lineage, used)
        else:
            if entry.used_at is None:
                entry.used_at = time.time()
            if self.family in REVOKES_OLD_ACCESS:
                self._revoked_access.update(
                    t for t, (_, lineage) in self._access.items() if lineage == entry.lineage
                )
            grant = self._mint(entry.lineage, None)
        self.refreshes += 1
        return self._success(request, grant)

    def _reusable(self, entry: _Refresh) -> bool:
        """A rotated token works again only within the reuse window; later, the family dies."""
        if entry.used_at is None:
            return True
        if time.time() - entry.used_at <= self.reuse_window:
            return True
        self._dead_lineages.add(entry.lineage)
        return False

    def _reissue(self, lineage: int, refresh: str) -> Grant:
        """Google: a new access token, the same refresh token."""
        minted = self._mint(lineage, None)
        del self._refresh[minted.refresh_token]
        return Grant(minted.access_token, refresh, minted.expires_at)

    def _success(self, request: Request, grant: Grant) -> Response:
        lifetime = max(1, round(grant.expires_at.timestamp() - time.time()))
        body: dict[str, Any] = {
            "access_token": grant.access_token, "expires_in": lifetime, "token_type": "Bearer",
        }
        if self.family != "google":
            body["refresh_token"] = grant.refresh_token
        separator = "," if self.family == "slack" else " "
        body["scope"] = separator.join(self.scopes)
        if self.family == "slack":
            body = {"ok": True, **body, "token_type": "user", "team": {"id": "T1"}}
        elif self.family == "gitlab":
            body["created_at"] = int(time.time())
        elif self.family == "github":
            body["refresh_token_expires_in"] = 15_897_600
        return self._answer(request, body, 200)

    def _refused(self, request: Request) -> Response:
        if self.family == "google":
            return self._error(request, "invalid_grant", "Token has been expired or revoked.", 400)
        if self.family == "slack":
            return Response.json({"ok": False, "error": "invalid_refresh_token"})
        if self.family == "github":  # HTTP 200, as GitHub answers
            return self._error(
                request, "bad_refresh_token",
                "The refresh token passed is incorrect or expired.", 200,
            )
        if self.family == "atlassian":
            return self._error(request, "invalid_grant", "Unknown or invalid refresh token.", 403)
        return self._error(
            request, "invalid_grant",
            "The provided authorization grant is invalid, expired, revoked, does not match the "
            "redirection URI used in the authorization request, or was issued to another client.",
            400,
        )

    def _error(self, request: Request, code: str, description: str, status: int) -> Response:
        if self.family == "slack":
            return Response.json({"ok": False, "error": code})
        return self._answer(request, {"error": code, "error_description": description}, status)

    def _answer(self, request: Request, body: dict[str, Any], status: int) -> Response:
        """JSON, except GitHub without `Accept: application/json` (form-encoded)."""
        wants_json = "application/json" in request.headers.get("accept", "")
        if self.family == "github" and not wants_json:
            flat = {k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in body.items()}
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            return Response(status, urlencode(flat).encode(), headers)
        return Response.json(body, status)
