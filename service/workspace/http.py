"""HTTP for provider adapters: one pooled session per account, per-query budgets and deadlines.

Every provider answer that is not a usable 2xx JSON body becomes a `ProviderError` here, as
PROVIDERS.md "Status mapping" says (statuses.py; a non-2xx body is read up to 64 KiB for the
provider's reason and message). Credentials go only to the account's own origin, redirects
are never followed, bodies are capped, and tokens never appear in messages or logs.

The client is the lean HTTP/1.1 one of service.workspace.http1 (httpx cost ~2.4 ms of CPU
per request under fan-out load, aiohttp about a third of the server's CPU per search). A
session runs over an `AccountPool` (service.workspace.pool), which may outlive the call.
"""

from __future__ import annotations

import asyncio
import json as jsonlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import httpx

from service import tracing
from service.workspace import http1
from service.workspace.error_bodies import MAX_ERROR_BODY, secrets_of
from service.workspace.http_wire import (
    JsonResponse,
    Params,
    RawResponse,
    decode_json,
    failed,
    origin,
    transient,
    with_query,
)
from service.workspace.limits import AccountLimits, resource_of
from service.workspace.model import Account, Credentials, ProviderError, QueryState
from service.workspace.pool import BASIC_AUTH_PROVIDERS, AccountPool
from service.workspace.renewal import (
    TIMEOUT_MESSAGE,
    Renewer,
    SessionCredential,
    bounded,
    expired_in_body,
    send_renewing,
)
from service.workspace.statuses import rate_limited_error, retry_after_seconds, status_error

__all__ = [
    "AccountSession",
    "HttpClient",
    "JsonResponse",
    "Params",
    "RawResponse",
    "retry_after_seconds",
    "status_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

BUDGET_MESSAGE = "request budget reached; narrow the query"


def _target(url: str) -> str:
    """The origin-form request target (path and query) of an absolute URL."""
    start = url.find("/", url.find("://") + 3)
    target = url[start:] if start >= 0 else "/"
    return target.split("#", 1)[0]


def _path(url: str) -> str:
    return _target(url).split("?", 1)[0]


class AccountSession:
    """One account's HTTP session over its pool; `aclose` after the call."""

    def __init__(
        self,
        account: Account,
        credentials: Credentials,
        *,
        request_timeout: float = 10.0,
        max_response_bytes: int = 4 * 1024 * 1024,
        allow_insecure_http: bool = False,
        pool: AccountPool | None = None,
        renewer: Renewer | None = None,
        limits: AccountLimits | None = None,
    ) -> None:
        try:
            base = origin(account.base_url)
        except (httpx.InvalidURL, TypeError, ValueError):
            raise failed("account base URL is not an http(s) URL") from None
        if base[0] not in ("https", "http") or not base[1]:
            raise failed("account base URL is not an http(s) URL")
        if base[0] == "http" and not allow_insecure_http:
            raise failed("account base URL must use https")
        self.account = account
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        basic = account.provider in BASIC_AUTH_PROVIDERS
        self.uses_basic_auth = bool(credentials.username) and basic
        self._base = base
        self._base_text = account.base_url.rstrip("/")
        self.credential = SessionCredential(account, credentials, renewer)
        self.limits = limits or AccountLimits(account.account_id)
        # Limits already recorded (from a status, or a recorded wait): not shared again.
        self._shared: weakref.WeakSet[ProviderError] = weakref.WeakSet()
        self._owns_pool = pool is None
        self._pool = pool or AccountPool()

    @property
    def scopes(self) -> tuple[str, ...]:
        """Scopes granted to the credential, when known (empty = unknown)."""
        return self.credential.scopes

    def for_query(
        self, *, budget: int, deadline: float | None, stall_after: float | None = None
    ) -> HttpClient:
        """A client for one query: at most `budget` requests, all before `deadline` (loop time);
        a request that had `stall_after` seconds (default: the whole request timeout) and got
        no answer is the provider's fault (`ProviderError.stalled`)."""
        return HttpClient(self, budget=budget, deadline=deadline, stall_after=stall_after)

    async def aclose(self) -> None:
        """End the session (and its pool when the session owns it); in-flight requests fail."""
        if self._owns_pool:
            await self._pool.aclose()

    def check_limit(self, url: str) -> None:
        """Raise RATE_LIMITED with the remaining delay when the provider asked (this or
        another replica) not to call `url`'s resource yet (service.workspace.limits)."""
        if not self.limits.blocking:
            return
        resource = resource_of(self.account.provider, _path(url))
        wait = self.limits.wait(resource, now=time.time())
        if wait is not None:
            error = rate_limited_error("wait recorded for this account", wait)
            self._shared.add(error)
            raise error

    async def share_limit(self, url: str, error: ProviderError) -> None:
        """Block `url`'s resource for a RATE_LIMITED error's wait that a provider module read
        from the 2xx body at `url` (Slack's `ok: false` `ratelimited`); others are recorded."""
        if error.state is QueryState.RATE_LIMITED and url and error not in self._shared:
            resource = resource_of(self.account.provider, _path(url))
            await self.limits.record(resource, error, now=time.time())

    def resolve(self, path_or_url: str) -> str:
        """Absolute URL on the account's origin; another origin is refused."""
        if "://" not in path_or_url and not path_or_url.startswith("//"):
            return self._base_text + "/" + path_or_url.lstrip("/")
        try:
            url = httpx.URL(path_or_url)
        except httpx.InvalidURL:
            raise failed("provider URL is not valid") from None
        if (url.scheme, url.host, url.port) != self._base:
            raise failed("refused to send credentials to another origin")
        return str(url)

    async def send(
        self,
        method: str,
        url: str,
        *,
        params: Params | None,
        json: Any,
        headers: Mapping[str, str] | None,
    ) -> JsonResponse:
        """One request, mapped: a usable 2xx JSON answer or a ProviderError.

        No timer of its own: `HttpClient.request` bounds it (renewal.bounded).
        """
        merged = {"Accept": "application/json", **(headers or {})}
        merged["Authorization"] = self.credential.authorization
        body = None
        if json is not None:
            body = jsonlib.dumps(json, separators=(",", ":")).encode()
            merged["Content-Type"] = "application/json"
        target = _target(with_query(url, params))
        answer = await self._exchange(method, target, list(merged.items()), body)
        if not 200 <= answer.status < 300:
            await self._refuse(method, target, answer)
        if answer.truncated:
            raise failed("provider response is too large")
        data = None if answer.status == 204 else decode_json(answer.body)
        return JsonResponse(answer.status, answer.headers, data)

    async def send_raw(
        self, url: str, *, body: bytes, content_type: str, headers: Mapping[str, str] | None
    ) -> RawResponse:
        """POST `body` as `content_type`; the raw 2xx answer, or the ProviderError `send` gives."""
        merged = {**(headers or {}), "Content-Type": content_type}
        merged["Authorization"] = self.credential.authorization
        target = _target(url)
        answer = await self._exchange("POST", target, list(merged.items()), body)
        if not 200 <= answer.status < 300:
            await self._refuse("POST", target, answer)
        if answer.truncated:
            raise failed("provider response is too large")
        return RawResponse(answer.status, answer.headers, answer.body)

    async def _exchange(
        self, method: str, target: str, fields: list[tuple[str, str]], body: bytes | None
    ) -> http1.Answer:
        try:
            return await self._pool.origin(self._base).request(
                method, target, fields, body, cap=self.max_response_bytes
            )
        except http1.AddressRefused as exc:
            raise failed(f"refused to reach the provider: {exc}") from None
        except http1.CutOff as exc:
            raise transient(f"provider response was cut off ({exc})") from None
        except http1.Unreachable as exc:
            raise transient(f"could not reach provider ({exc})") from None
        except http1.Malformed as exc:
            raise transient(f"provider sent a malformed HTTP response ({exc})") from None
        except ValueError:
            raise failed("provider request is not valid HTTP (a control character)") from None

    async def _refuse(self, method: str, target: str, answer: http1.Answer) -> None:
        """Raise the ProviderError of a non-2xx answer (and share a rate limit it sets)."""
        path = target.split("?", 1)[0]
        logger.info("provider answered %s for %s %s", answer.status, method, path)
        now = time.time()
        error = status_error(
            answer.status,
            answer.headers,
            now=now,
            provider=self.account.provider,
            body=answer.body[:MAX_ERROR_BODY],
            secrets=secrets_of(self.credential.authorization),
        )
        assert error is not None  # every non-2xx status maps to an error
        if error.state is QueryState.RATE_LIMITED:
            resource = resource_of(self.account.provider, path, answer.headers)
            self._shared.add(error)
            await self.limits.record(resource, error, now=now)
        raise error

    def memo_get(self, key: str) -> Any | None:
        """A cached answer younger than the memo TTL, or None."""
        return self._pool.memo_get(key)

    def memo_put(self, key: str, value: Any) -> None:
        """Remember an answer for the memo TTL."""
        self._pool.memo_put(key, value)

    def memo_lock(self, key: str) -> asyncio.Lock:
        """One lock per memo key, so concurrent queries fetch a shared answer once."""
        return self._pool.memo_lock(key)


class HttpClient:
    """One query's view of an account session: a request budget and a deadline."""

    def __init__(
        self, session: AccountSession, *, budget: int, deadline: float | None,
        stall_after: float | None = None,
    ) -> None:
        self._session = session
        self._budget = budget
        self._deadline = deadline
        timeout = session.request_timeout
        self._stall_after = timeout if stall_after is None else min(stall_after, timeout)
        self.requests_made = 0
        # Of the latest 2xx answer: the resource a limit an adapter reads from its body is for.
        self.last_url = ""

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
        """Send one request within budget and deadline; return status, headers and JSON. A
        renewable token is renewed when due, and once after a refusal (see renewal.py)."""
        url = self._session.resolve(path_or_url)
        self._session.check_limit(url)
        provider = self._session.account.provider
        response = await send_renewing(
            self._session.credential,
            lambda: self._once(method, lambda: self._session.send(
                method, url, params=params, json=json, headers=headers
            )),
            time_left=self._timeout,
            expired=lambda response: expired_in_body(provider, response.data),
        )
        self.last_url = url
        return response

    async def post_raw(
        self,
        path_or_url: str,
        *,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | None = None,
        refused: Callable[[RawResponse], bool] | None = None,
    ) -> RawResponse:
        """POST a non-JSON body (a Gmail multipart batch) as one request within budget and
        deadline; return the raw 2xx answer (other answers raise, and renew, as in `request`).
        `refused(answer)`: a 2xx answer that refuses the access token inside (a batch part's
        401) renews it and sends once more, as a 401 would."""
        url = self._session.resolve(path_or_url)
        self._session.check_limit(url)
        response = await send_renewing(
            self._session.credential,
            lambda: self._once("POST", lambda: self._session.send_raw(
                url, body=body, content_type=content_type, headers=headers
            )),
            time_left=self._timeout,
            expired=refused or (lambda _: False),
        )
        self.last_url = url
        return response

    async def _once(self, method: str, send: Callable[[], Awaitable[T]]) -> T:
        """One provider request within the query's budget and deadline."""
        if self.requests_made >= self._budget:
            raise transient(BUDGET_MESSAGE)
        timeout = self._timeout()
        self.requests_made += 1
        async with tracing.provider_request(self._session.account.provider.value, method):
            try:
                return await bounded(timeout, send())
            except ProviderError as error:
                if error.state is not QueryState.TIMED_OUT or timeout < self._stall_after:
                    raise
                if timeout >= self._session.request_timeout:  # the provider had all its time
                    error.stalled = True
                    raise
                raise ProviderError(  # the provider had half the call's time: a short call?
                    QueryState.TIMED_OUT,
                    f"the provider did not answer within {timeout:.1f} s, half of this call's "
                    "time; give the call a longer deadline, or narrow the query",
                    stalled=True,
                ) from None

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
        """GET through the account's memo (site lists, member projects), shared across calls."""
        key = with_query(self._session.resolve(path), params)
        cached = self._session.memo_get(key)
        if cached is not None:
            return cached
        lock = self._session.memo_lock(key)
        # Calls share the lock: waiting for another call's fetch counts against this query's
        # deadline, so a provider that hangs cannot queue every call behind it.
        await bounded(self._timeout(), lock.acquire())
        try:
            cached = self._session.memo_get(key)
            if cached is not None:
                return cached
            data = await self.get_json(path, params=params)
            self._session.memo_put(key, data)
            return data
        finally:
            lock.release()
