"""An account session's current credential, renewed ahead of expiry and once after a refusal.

`SessionCredential` holds the Authorization header a session sends now; `send_renewing` wraps
one provider request: renew first when the token is due, and when the provider refuses the
token as expired or invalid (HTTP 401, Slack's `token_expired`), renew once and send once more;
a second refusal is NEEDS_RECONNECT. Accounts without a refresh token never renew.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from service.deadlines import within
from service.workspace.model import Account, Credentials, ProviderError, ProviderId, QueryState
from service.workspace.pool import auth_header

__all__ = [
    "REFUSED_AFTER_REFRESH",
    "TIMEOUT_MESSAGE",
    "Renewer",
    "SessionCredential",
    "bounded",
    "send_renewing",
]

REFUSED_AFTER_REFRESH = (
    "provider refused the credentials again right after a refresh; reconnect the account"
)
TIMEOUT_MESSAGE = "provider search timed out; narrow the query"

T = TypeVar("T")


class Renewer(Protocol):
    """Renews an account's access token (service.workspace.refresh.TokenRefresher)."""

    def due(self, credentials: Credentials) -> bool:
        """True when the access token should be renewed before it is used."""
        ...

    async def renew(
        self, account: Account, credentials: Credentials, *, refused: bool
    ) -> Credentials:
        """Credentials to use instead (raise ProviderError when there are none)."""
        ...


def expired_in_body(provider: ProviderId, data: Any) -> bool:
    """Slack reports an expired token inside HTTP 200 (`ok: false, error: token_expired`)."""
    return (
        provider is ProviderId.SLACK and isinstance(data, dict) and data.get("ok") is False
        and data.get("error") == "token_expired"
    )


class SessionCredential:
    """The credential one account session sends, shared by the session's queries."""

    def __init__(
        self, account: Account, credentials: Credentials, renewer: Renewer | None
    ) -> None:
        self._account = account
        self._credentials = credentials
        self.authorization = auth_header(account.provider, credentials)
        # Only accounts with a refresh token renew; the others behave as before refresh existed.
        self._renewer = renewer if credentials.refreshable else None
        self._lock: asyncio.Lock | None = None
        self.renewed = False  # the credential sent now is not the one the session began with

    def __repr__(self) -> str:
        return f"SessionCredential(account={self._account.account_id!r})"

    @property
    def scopes(self) -> tuple[str, ...]:
        """Scopes granted to the credential (empty = unknown)."""
        return self._credentials.scopes

    @property
    def can_renew(self) -> bool:
        """True when a refused access token may be renewed."""
        return self._renewer is not None

    async def ensure_fresh(self) -> None:
        """Renew the access token first when it expires within the renewer's margin."""
        renewer = self._renewer
        if renewer is None or not renewer.due(self._credentials):
            return
        async with self._renew_lock():
            if renewer.due(self._credentials):  # another query of the session may have
                await self._apply(renewer, refused=False)

    async def renew_refused(self, refused_authorization: str) -> bool:
        """After the provider refused `refused_authorization`: True when there is another
        credential to retry with (renewed now, or by another query meanwhile)."""
        renewer = self._renewer
        if renewer is None:
            return False
        async with self._renew_lock():
            if self.authorization == refused_authorization:
                await self._apply(renewer, refused=True)
        return self.authorization != refused_authorization

    def _renew_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _apply(self, renewer: Renewer, *, refused: bool) -> None:
        fresh = await renewer.renew(self._account, self._credentials, refused=refused)
        self._credentials = fresh
        authorization = auth_header(self._account.provider, fresh)
        self.renewed = self.renewed or authorization != self.authorization
        self.authorization = authorization


async def bounded(seconds: float, work: Awaitable[T]) -> T:
    """`work` within `seconds`; past them the query is TIMED_OUT."""
    try:
        async with within(seconds):
            return await work
    except TimeoutError:
        raise ProviderError(QueryState.TIMED_OUT, TIMEOUT_MESSAGE) from None


async def send_renewing(
    credential: SessionCredential,
    send: Callable[[], Awaitable[T]],
    *,
    time_left: Callable[[], float],
    expired: Callable[[T], bool],
) -> T:
    """`send()` with the credential renewed when due, and once more after a refusal."""
    if credential.can_renew:  # others keep their exact old order: budget, then deadline
        await bounded(time_left(), credential.ensure_fresh())
    sent = credential.authorization
    try:
        answer = await send()
    except ProviderError as error:
        if not (error.refresh and await bounded(time_left(), credential.renew_refused(sent))):
            raise
    else:
        if not (
            credential.can_renew and expired(answer)
            and await bounded(time_left(), credential.renew_refused(sent))
        ):
            return answer
    try:
        return await send()
    except ProviderError as error:
        if error.refresh:
            raise ProviderError(QueryState.NEEDS_RECONNECT, REFUSED_AFTER_REFRESH) from None
        raise
