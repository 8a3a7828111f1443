"""WorkspaceSearchService and AccountService conversions."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from search_client._convert_common import (
    enum_member,
    enum_name,
    time_or_none,
    time_range,
    timestamp,
)
from search_client._enums import AccountState, Provider, QueryKind, QueryState
from search_client._models_workspace import (
    Account,
    AccountList,
    Contribution,
    FusedPage,
    FusedResult,
    Guidance,
    NativeQuery,
    QueryCard,
    QueryStatus,
)
from search_client._options import MAX_RATE_LIMIT_PAUSE
from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2
from search_client.pb.search.v1 import workspace_search_pb2 as pb

__all__ = [
    "PageAssembler",
    "RateLimitPause",
    "account_from_pb",
    "account_list_from_pb",
    "credentials",
    "fused_page_from_pb",
    "provider_name",
    "query_status_from_pb",
    "search_request",
]


def provider_name(provider: Provider) -> str:
    """The proto name of a provider, e.g. `PROVIDER_GITHUB`."""
    return enum_name("PROVIDER_", provider)


def search_request(
    queries: Sequence[NativeQuery], top_k: int, max_pages: int, page_token: str = ""
) -> pb.SearchWorkspaceRequest:
    """A SearchWorkspaceRequest; the statuses come inside each page (one stream message per
    page; a server that predates the field streams them, and both are read the same way)."""
    return pb.SearchWorkspaceRequest(
        queries=[_query(q) for q in queries],
        top_k=top_k,
        max_pages=max_pages,
        page_token=page_token,
        status_delivery=pb.STATUS_DELIVERY_IN_PAGE,
    )


def _query(query: NativeQuery) -> pb.NativeQuery:
    message = pb.NativeQuery(
        provider=provider_name(query.provider),
        account_id=query.account_id,
        text=query.text,
        kind=enum_name("QUERY_KIND_", query.kind) if query.kind else "QUERY_KIND_UNSPECIFIED",
        project=query.project,
        cursor=query.cursor,
    )
    if query.time_range is not None:
        message.time_range.CopyFrom(time_range(query.time_range))
    return message


def _provider(number: int) -> Provider:
    return enum_member(Provider, common_pb2.Provider, "PROVIDER_", number, Provider.UNSPECIFIED)


def _card(message: pb.QueryCard) -> QueryCard:
    return QueryCard(
        provider=_provider(message.provider),
        syntax=message.syntax,
        scope=message.scope,
        example=message.example,
        avoid=message.avoid,
    )


def account_from_pb(message: pb.Account) -> Account:
    """An Account."""
    kinds = (
        enum_member(QueryKind, pb.QueryKind, "QUERY_KIND_", k, None) for k in message.kinds
    )
    return Account(
        account_id=message.account_id,
        provider=_provider(message.provider),
        display_name=message.display_name,
        state=enum_member(
            AccountState, pb.AccountState, "ACCOUNT_STATE_", message.state,
            AccountState.UNSPECIFIED,
        ),
        kinds=tuple(k for k in kinds if k is not None),
        base_url=message.base_url,
        create_time=time_or_none(message, "create_time"),
        card=_card(message.card) if message.HasField("card") else None,
        credentials_expire_time=time_or_none(message, "credentials_expire_time"),
        refreshable=message.refreshable,
    )


def credentials(
    token: str, username: str, scopes: Sequence[str], refresh_token: str,
    expire_time: datetime | None,
) -> apb.Credentials:
    """A Credentials message; an unset `expire_time` stays unset."""
    message = apb.Credentials(
        token=token, username=username, scopes=list(scopes), refresh_token=refresh_token
    )
    if expire_time is not None:
        message.expire_time.CopyFrom(timestamp(expire_time))
    return message


def account_list_from_pb(message: pb.ListAccountsResponse) -> AccountList:
    """An AccountList."""
    guidance = message.guidance
    return AccountList(
        accounts=tuple(account_from_pb(a) for a in message.accounts),
        guidance=Guidance(
            shared_rules=guidance.shared_rules,
            cards=tuple(_card(c) for c in guidance.cards),
            text=guidance.text,
        ),
    )


def query_status_from_pb(message: pb.QueryStatus) -> QueryStatus:
    """A QueryStatus."""
    retry_after = None
    if message.HasField("retry_after"):
        retry_after = message.retry_after.ToMilliseconds() / 1000
    return QueryStatus(
        query_index=message.query_index,
        account_id=message.account_id,
        provider=_provider(message.provider),
        state=enum_member(
            QueryState, pb.QueryState, "QUERY_STATE_", message.state, QueryState.UNSPECIFIED
        ),
        message=message.message,
        partial=message.partial,
        retry_after=retry_after,
        total=message.total,
        total_is_exact=message.total_is_exact,
        result_count=message.result_count,
        next_cursor=message.next_cursor,
        page_number=message.page_number,
    )


def fused_page_from_pb(
    message: pb.FusedPage, statuses: Sequence[QueryStatus] = ()
) -> FusedPage:
    """A FusedPage carrying the statuses streamed before it."""
    return FusedPage(
        results=tuple(_fused_result(r) for r in message.results),
        next_page_token=message.next_page_token,
        page_number=message.page_number,
        cards=tuple(_card(c) for c in message.cards),
        ranking_is_exact=message.ranking_is_exact,
        rrf_k=message.rrf_k,
        statuses=tuple(statuses),
    )


def _fused_result(message: pb.FusedResult) -> FusedResult:
    return FusedResult(
        result_id=message.result_id,
        provider=_provider(message.provider),
        account_id=message.account_id,
        kind=message.kind,
        title=message.title,
        url=message.url,
        snippet=message.snippet,
        author=message.author,
        container=message.container,
        update_time=time_or_none(message, "update_time"),
        event_start_time=time_or_none(message, "event_start_time"),
        score=message.score,
        contributions=tuple(
            Contribution(
                query_index=c.query_index, account_id=c.account_id, rank=c.rank, score=c.score
            )
            for c in message.contributions
        ),
    )


class PageAssembler:
    """Attaches to each fused page the current query statuses streamed for it."""

    def __init__(self) -> None:
        # The last status of a (query, account) is current: a later one (an update before the
        # page, or one re-sent by a resumed call) replaces the earlier.
        self._pending: dict[tuple[int, str, int], QueryStatus] = {}

    def status(self, message: pb.QueryStatus) -> QueryStatus:
        """Record a streamed status and return it."""
        status = query_status_from_pb(message)
        self._pending[(status.query_index, status.account_id, status.page_number)] = status
        return status

    def page(self, message: pb.FusedPage) -> FusedPage:
        """The page with the latest status of each (query, account) streamed for it."""
        number = message.page_number
        attached = [s for s in self._pending.values() if s.page_number <= number]
        self._pending = {k: s for k, s in self._pending.items() if s.page_number > number}
        return fused_page_from_pb(message, attached)


class RateLimitPause:
    """How long after a SearchWorkspace call the next call should wait; one per call.

    A page without results that carries a token, after a status of the same call with
    `retry_after`, has nothing left but a provider's rate limit to wait out: the next call
    waits for the largest remaining `retry_after`, at most MAX_RATE_LIMIT_PAUSE seconds.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # When the latest status of each (query, account) in this call lets it be read again.
        self._ready_at: dict[tuple[int, str], float] = {}

    def __call__(self, response: pb.SearchWorkspaceResponse) -> float:
        """Seconds to wait before the next call if the call ends with `response`."""
        now = self._clock()
        if not response.HasField("page"):
            self._note(response.query_status, now)
            return 0.0
        page = response.page
        for status in page.statuses:
            self._note(status, now)
        if page.results or not page.next_page_token or not self._ready_at:
            return 0.0
        return min(max(max(self._ready_at.values()) - now, 0.0), MAX_RATE_LIMIT_PAUSE)

    def _note(self, status: pb.QueryStatus, now: float) -> None:
        key = (status.query_index, status.account_id)
        if status.HasField("retry_after"):
            self._ready_at[key] = now + status.retry_after.ToNanoseconds() / 1e9
        else:
            self._ready_at.pop(key, None)
