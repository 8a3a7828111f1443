"""HTTP for provider adapters: one pooled session per account, per-query budgets and deadlines.

Every provider answer that is not a usable 2xx JSON body becomes a `ProviderError` here, as
PROVIDERS.md "Status mapping" says. Credentials go only to the account's own origin, redirects
are never followed, bodies are capped, and tokens never appear in messages or logs.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json as jsonlib
import logging
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from service.workspace.model import Account, Credentials, ProviderError, ProviderId, QueryState

__all__ = [
    "AccountSession",
    "HttpClient",
    "JsonResponse",
    "Params",
    "retry_after_seconds",
    "status_error",
]

logger = logging.getLogger(__name__)

Params = Mapping[str, str | int | Sequence[str]]

BUDGET_MESSAGE = "request budget reached; narrow the query"
TIMEOUT_MESSAGE = "provider search timed out; narrow the query"
_BASIC_AUTH_PROVIDERS = frozenset({ProviderId.JIRA, ProviderId.CONFLUENCE})
_USER_AGENT = "search-service/0.1 (+workspace search)"
_MEMO_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class JsonResponse:
    """A successful provider answer: status, headers (case-insensitive) and decoded JSON."""

    status: int
    headers: httpx.Headers
    data: Any


def retry_after_seconds(headers: Mapping[str, str], *, now: float) -> float | None:
    """Seconds to wait: `Retry-After` (seconds or HTTP date), else `x-ratelimit-reset` - now."""
    raw = headers.get("retry-after", "").strip()
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
        try:
            return max(0.0, parsedate_to_datetime(raw).timestamp() - now)
        except (TypeError, ValueError, IndexError):
            pass
    reset = headers.get("x-ratelimit-reset", "").strip()
    if reset:
        try:
            return max(0.0, float(reset) - now)
        except ValueError:
            return None
    return None


def status_error(status: int, headers: Mapping[str, str], *, now: float) -> ProviderError | None:
    """Map a non-2xx HTTP status to the per-query state; None for 2xx."""
    if 200 <= status < 300:
        return None
    limited_403 = status == 403 and (
        "retry-after" in headers or headers.get("x-ratelimit-remaining", "").strip() == "0"
    )
    if status == 429 or limited_403:
        wait = retry_after_seconds(headers, now=now)
        hint = f"; retry in {wait:.0f} s" if wait is not None else "; retry later"
        return ProviderError(
            QueryState.RATE_LIMITED,
            f"provider rate limit reached (HTTP {status}){hint}",
            retry_after=wait,
        )
    if status in (401, 403):
        return ProviderError(
            QueryState.NEEDS_RECONNECT,
            f"provider denied access; reconnect with search and read permissions (HTTP {status})",
        )
    if status in (400, 422):
        return ProviderError(
            QueryState.FAILED,
            f"provider rejected this query; check native syntax/scope (HTTP {status})",
        )
    if 300 <= status < 400:
        return ProviderError(
            QueryState.FAILED, f"provider redirected (HTTP {status}); redirects are not followed"
        )
    return ProviderError(QueryState.FAILED, f"provider request failed (HTTP {status})")


def _auth_header(provider: ProviderId, credentials: Credentials) -> str:
    if credentials.username and provider in _BASIC_AUTH_PROVIDERS:
        pair = f"{credentials.username}:{credentials.token}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")
    return f"Bearer {credentials.token}"


def _failed(message: str) -> ProviderError:
    return ProviderError(QueryState.FAILED, message)


def _query_params(params: Params | None) -> httpx.QueryParams:
    pairs: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in (params or {}).items():
        if isinstance(value, str | int):
            pairs.append((key, str(value)))
        else:
            pairs.extend((key, str(item)) for item in value)
    return httpx.QueryParams(pairs)


def _decode(body: bytes) -> Any:
    if not body.strip():
        raise _failed("provider returned an empty body where JSON was expected")
    try:
        return jsonlib.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise _failed("provider returned malformed JSON") from None


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    """One verifying TLS context for every session (loading the CA bundle costs ~20 ms)."""
    return httpx.create_ssl_context()


class AccountSession:
    """One connection pool (httpx.AsyncClient) per account."""

    def __init__(
        self,
        account: Account,
        credentials: Credentials,
        *,
        request_timeout: float = 10.0,
        max_response_bytes: int = 4 * 1024 * 1024,
        allow_insecure_http: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        try:
            base = httpx.URL(account.base_url)
        except (httpx.InvalidURL, TypeError, ValueError):
            raise _failed("account base URL is not an http(s) URL") from None
        if base.scheme not in ("https", "http") or not base.host:
            raise _failed("account base URL is not an http(s) URL")
        if base.scheme == "http" and not allow_insecure_http:
            raise _failed("account base URL must use https")
        self.account = account
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self.uses_basic_auth = bool(credentials.username) and (
            account.provider in _BASIC_AUTH_PROVIDERS
        )
        self.scopes = credentials.scopes
        self._base = base
        self._base_text = account.base_url.rstrip("/")
        self._authorization = _auth_header(account.provider, credentials)
        self._client = httpx.AsyncClient(
            transport=transport,
            verify=_shared_ssl_context(),
            follow_redirects=False,
            trust_env=False,  # no proxies or .netrc credentials from the environment
            headers={"User-Agent": _USER_AGENT},
        )
        self._memo: dict[str, tuple[float, Any]] = {}
        self._memo_locks: dict[str, asyncio.Lock] = {}

    def for_query(self, *, budget: int, deadline: float | None) -> HttpClient:
        """A client for one query: at most `budget` requests, all before `deadline` (loop time)."""
        return HttpClient(self, budget=budget, deadline=deadline)

    async def aclose(self) -> None:
        """Close the pool; in-flight requests fail."""
        await self._client.aclose()

    def resolve(self, path_or_url: str) -> httpx.URL:
        """Absolute URL on the account's origin; another origin is refused."""
        absolute = "://" in path_or_url or path_or_url.startswith("//")
        target = path_or_url if absolute else self._base_text + "/" + path_or_url.lstrip("/")
        try:
            url = httpx.URL(target)
        except httpx.InvalidURL:
            raise _failed("provider URL is not valid") from None
        base = self._base
        if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
            raise _failed("refused to send credentials to another origin")
        return url

    async def send(
        self,
        method: str,
        url: httpx.URL,
        *,
        params: Params | None,
        json: Any,
        headers: Mapping[str, str] | None,
        seconds: float,
    ) -> JsonResponse:
        """One request, mapped: a usable 2xx JSON answer or a ProviderError."""
        merged = {"Accept": "application/json", **(headers or {})}
        merged["Authorization"] = self._authorization
        request = self._client.build_request(
            method,
            url,
            params=_query_params(params),
            json=json,
            headers=merged,
            timeout=seconds,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TimeoutException:
            raise ProviderError(QueryState.TIMED_OUT, TIMEOUT_MESSAGE) from None
        except httpx.HTTPError as exc:
            raise _failed(f"could not reach provider ({type(exc).__name__})") from None
        try:
            error = status_error(response.status_code, response.headers, now=time.time())
            if error is not None:
                logger.info(
                    "provider answered %s for %s %s", response.status_code, method, url.path
                )
                raise error
            body = await self._read_capped(response)
        finally:
            await response.aclose()
        data = None if response.status_code == 204 else _decode(body)
        return JsonResponse(response.status_code, response.headers, data)

    async def _read_capped(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_response_bytes:
            raise _failed("provider response is too large")
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise _failed("provider response is too large")
                chunks.append(chunk)
        except httpx.TimeoutException:
            raise ProviderError(QueryState.TIMED_OUT, TIMEOUT_MESSAGE) from None
        except httpx.HTTPError as exc:
            raise _failed(f"provider response was cut off ({type(exc).__name__})") from None
        return b"".join(chunks)

    def memo_get(self, key: str) -> Any | None:
        """A cached answer younger than the memo TTL, or None."""
        hit = self._memo.get(key)
        if hit is None or time.monotonic() - hit[0] > _MEMO_TTL_SECONDS:
            return None
        return hit[1]

    def memo_put(self, key: str, value: Any) -> None:
        """Remember an answer for the memo TTL."""
        self._memo[key] = (time.monotonic(), value)

    def memo_lock(self, key: str) -> asyncio.Lock:
        """One lock per memo key, so concurrent queries fetch a shared answer once."""
        return self._memo_locks.setdefault(key, asyncio.Lock())


class HttpClient:
    """One query's view of an account session: a request budget and a deadline."""

    def __init__(self, session: AccountSession, *, budget: int, deadline: float | None) -> None:
        self._session = session
        self._budget = budget
        self._deadline = deadline
        self.requests_made = 0

    @property
    def base_url(self) -> str:
        """The account's API base URL (no trailing slash)."""
        return self._session.account.base_url.rstrip("/")

    @property
    def uses_basic_auth(self) -> bool:
        """True for Jira/Confluence accounts addressed directly with `username:token`."""
        return self._session.uses_basic_auth

    @property
    def scopes(self) -> tuple[str, ...]:
        """Scopes granted to the credential, when known (empty = unknown)."""
        return self._session.scopes

    def _timeout(self) -> float:
        timeout = self._session.request_timeout
        if self._deadline is not None:
            remaining = self._deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise ProviderError(QueryState.TIMED_OUT, TIMEOUT_MESSAGE)
            timeout = min(timeout, remaining)
        return timeout

    async def request(
        self,
        method: str,
        path_or_url: str,
        *,
        params: Params | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> JsonResponse:
        """Send one request within budget and deadline; return status, headers and JSON."""
        url = self._session.resolve(path_or_url)
        if self.requests_made >= self._budget:
            raise _failed(BUDGET_MESSAGE)
        timeout = self._timeout()
        self.requests_made += 1
        try:
            async with asyncio.timeout(timeout):
                return await self._session.send(
                    method, url, params=params, json=json, headers=headers, seconds=timeout
                )
        except TimeoutError:
            raise ProviderError(QueryState.TIMED_OUT, TIMEOUT_MESSAGE) from None

    async def get(
        self,
        path_or_url: str,
        *,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> JsonResponse:
        """GET with response headers (GitHub `Link`, GitLab `x-next-page`)."""
        return await self.request("GET", path_or_url, params=params, headers=headers)

    async def get_json(
        self,
        path_or_url: str,
        *,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """GET and return the decoded JSON body."""
        return (await self.get(path_or_url, params=params, headers=headers)).data

    async def post_json(
        self,
        path_or_url: str,
        *,
        json: Any,
        params: Params | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """POST a JSON body and return the decoded JSON answer."""
        response = await self.request(
            "POST", path_or_url, params=params, json=json, headers=headers
        )
        return response.data

    async def get_json_memo(self, path: str, *, params: Params | None = None) -> Any:
        """GET through the session memo (site lists, member projects) shared by its queries."""
        key = str(self._session.resolve(path).copy_merge_params(_query_params(params)))
        async with self._session.memo_lock(key):
            cached = self._session.memo_get(key)
            if cached is not None:
                return cached
            data = await self.get_json(path, params=params)
            self._session.memo_put(key, data)
            return data
