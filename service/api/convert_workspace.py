"""Workspace search and accounts: proto <-> domain."""

from __future__ import annotations

from typing import cast

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as pb
from service.api.convert_common import from_datetime, to_datetime, to_time_range
from service.errors import InvalidArgument
from service.workspace.accounts import ConnectRequest
from service.workspace.events import (
    AccountListing,
    FusedPage,
    FusedResult,
    ListedAccount,
    QueryStatus,
)
from service.workspace.guidance import Guidance, ProviderCard
from service.workspace.model import Credentials, Kind, ProviderId, QueryCard, QueryState
from service.workspace.plan import NativeQuery, SearchRequest
from service.workspace.statuses import clamp_wait

PROVIDERS: dict[int, ProviderId] = {
    cpb.PROVIDER_GITHUB: ProviderId.GITHUB,
    cpb.PROVIDER_GITLAB: ProviderId.GITLAB,
    cpb.PROVIDER_SLACK: ProviderId.SLACK,
    cpb.PROVIDER_GOOGLE_DRIVE: ProviderId.GOOGLE_DRIVE,
    cpb.PROVIDER_GMAIL: ProviderId.GMAIL,
    cpb.PROVIDER_GOOGLE_CALENDAR: ProviderId.GOOGLE_CALENDAR,
    cpb.PROVIDER_JIRA: ProviderId.JIRA,
    cpb.PROVIDER_CONFLUENCE: ProviderId.CONFLUENCE,
}
PROVIDER_TO_PB: dict[ProviderId, cpb.Provider] = {
    value: cast(cpb.Provider, key) for key, value in PROVIDERS.items()
}
KINDS: dict[int, Kind] = {
    pb.QUERY_KIND_ISSUES: Kind.ISSUES,
    pb.QUERY_KIND_CODE: Kind.CODE,
    pb.QUERY_KIND_COMMITS: Kind.COMMITS,
    pb.QUERY_KIND_REPOSITORIES: Kind.REPOSITORIES,
    pb.QUERY_KIND_MERGE_REQUESTS: Kind.MERGE_REQUESTS,
    pb.QUERY_KIND_WIKI: Kind.WIKI,
}
KIND_TO_PB: dict[Kind, pb.QueryKind] = {
    value: cast(pb.QueryKind, key) for key, value in KINDS.items()
}
STATES: dict[QueryState, pb.QueryState] = {
    QueryState.OK: pb.QUERY_STATE_OK,
    QueryState.SKIPPED: pb.QUERY_STATE_SKIPPED,
    QueryState.NEEDS_RECONNECT: pb.QUERY_STATE_NEEDS_RECONNECT,
    QueryState.RATE_LIMITED: pb.QUERY_STATE_RATE_LIMITED,
    QueryState.TIMED_OUT: pb.QUERY_STATE_TIMED_OUT,
    QueryState.FAILED: pb.QUERY_STATE_FAILED,
}


def provider_from_proto(value: int, field: str, *, required: bool) -> ProviderId | None:
    """The provider; None for unspecified (when allowed) and for unknown values."""
    provider = PROVIDERS.get(value)
    if provider is None and value and not required:
        raise InvalidArgument.field(field, f"unknown provider {value}")
    return provider


def _kind(value: int, field: str) -> Kind | None:
    if value == pb.QUERY_KIND_UNSPECIFIED:
        return None
    kind = KINDS.get(value)
    if kind is None:
        raise InvalidArgument.field(field, f"unknown kind {value}")
    return kind


def search_request_from_proto(msg: pb.SearchWorkspaceRequest) -> SearchRequest:
    """The domain request; validation happens in service.workspace.plan."""
    queries = tuple(
        NativeQuery(
            provider=provider_from_proto(q.provider, f"queries[{i}].provider", required=True),
            text=q.text,
            account_id=q.account_id,
            kind=_kind(q.kind, f"queries[{i}].kind"),
            time_range=to_time_range(
                q.time_range, q.HasField("time_range"), f"queries[{i}].time_range"
            ),
            project=q.project,
            cursor=q.cursor,
        )
        for i, q in enumerate(msg.queries)
    )
    return SearchRequest(queries, msg.top_k, msg.page_token, msg.max_pages)


def card_to_proto(item: ProviderCard) -> pb.QueryCard:
    """A provider's card."""
    return _card(item.provider, item.card)


def _card(provider: ProviderId, card: QueryCard) -> pb.QueryCard:
    return pb.QueryCard(
        provider=PROVIDER_TO_PB[provider],
        syntax=card.syntax,
        scope=card.scope,
        example=card.example,
        avoid=card.avoid,
    )


def guidance_to_proto(guidance: Guidance) -> pb.Guidance:
    """Shared rules, cards and their rendering."""
    return pb.Guidance(
        shared_rules=guidance.shared_rules,
        cards=[card_to_proto(c) for c in guidance.cards],
        text=guidance.text,
    )


def account_to_proto(item: ListedAccount) -> pb.Account:
    """An account without its credentials."""
    account = item.view.account
    msg = pb.Account(
        account_id=account.account_id,
        provider=PROVIDER_TO_PB[account.provider],
        display_name=account.display_name,
        state=(
            pb.ACCOUNT_STATE_NEEDS_RECONNECT
            if account.needs_reconnect
            else pb.ACCOUNT_STATE_CONNECTED
        ),
        kinds=[KIND_TO_PB[k] for k in item.kinds],
        base_url=account.base_url,
        create_time=from_datetime(item.view.created_at),
        credentials_expire_time=from_datetime(item.view.expires_at),
        refreshable=item.view.refreshable,
    )
    if item.card is not None:
        msg.card.CopyFrom(_card(account.provider, item.card))
    return msg


def listing_to_proto(listing: AccountListing) -> pb.ListAccountsResponse:
    """Accounts and guidance."""
    return pb.ListAccountsResponse(
        accounts=[account_to_proto(a) for a in listing.accounts],
        guidance=guidance_to_proto(listing.guidance),
    )


INT64_MAX = 2**63 - 1


def status_to_proto(status: QueryStatus) -> pb.QueryStatus:
    """One query status."""
    msg = pb.QueryStatus(
        query_index=status.query_index,
        account_id=status.account_id,
        provider=PROVIDER_TO_PB[status.provider],
        state=STATES[status.state],
        message=status.message,
        partial=status.partial,
        total=_count(status.total),
        # A negative or out-of-range provider total is no count at all.
        total_is_exact=status.total_is_exact and _count(status.total) == (status.total or 0),
        result_count=status.result_count,
        next_cursor=status.next_cursor,
        page_number=status.page_number,
    )
    wait = clamp_wait(status.retry_after) if status.retry_after is not None else None
    if wait is not None:
        msg.retry_after.FromNanoseconds(int(wait * 1e9))
    return msg


def _count(value: int | None) -> int:
    """A provider's count as an int64 the message can hold: [0, 2**63 - 1]."""
    return min(max(0, value or 0), INT64_MAX)


def _result(result: FusedResult) -> pb.FusedResult:
    return pb.FusedResult(
        result_id=result.result_id,
        provider=PROVIDER_TO_PB[result.provider],
        account_id=result.account_id,
        kind=result.kind,
        title=result.title,
        url=result.url,
        snippet=result.snippet,
        author=result.author,
        container=result.container,
        update_time=from_datetime(result.update_time),
        event_start_time=from_datetime(result.event_start_time),
        score=result.score,
        contributions=[
            pb.Contribution(
                query_index=c.query_index, account_id=c.account_id, rank=c.rank, score=c.score
            )
            for c in result.contributions
        ],
    )


def page_to_proto(page: FusedPage) -> pb.FusedPage:
    """One fused page."""
    return pb.FusedPage(
        results=[_result(r) for r in page.results],
        next_page_token=page.next_page_token,
        page_number=page.page_number,
        cards=[card_to_proto(c) for c in page.cards],
        ranking_is_exact=page.ranking_is_exact,
        rrf_k=page.rrf_k,
    )


def statuses_in_page(value: int) -> bool:
    """True for `status_delivery = IN_PAGE`; INVALID_ARGUMENT naming the field when unknown."""
    if value in (pb.STATUS_DELIVERY_UNSPECIFIED, pb.STATUS_DELIVERY_STREAMED):
        return False
    if value == pb.STATUS_DELIVERY_IN_PAGE:
        return True
    raise InvalidArgument.field("status_delivery", f"unknown status delivery {value}")


def connect_from_proto(msg: apb.ConnectAccountRequest) -> ConnectRequest:
    """The domain connect request (credentials None when absent)."""
    credentials = credentials_from_proto(msg.credentials) if msg.HasField("credentials") else None
    return ConnectRequest(
        provider=provider_from_proto(msg.provider, "provider", required=True),
        display_name=msg.display_name,
        base_url=msg.base_url,
        credentials=credentials,
    )


def credentials_from_proto(msg: apb.Credentials) -> Credentials:
    """Domain credentials; INVALID_ARGUMENT on `credentials.expire_time` out of range."""
    expires_at = (
        to_datetime(msg.expire_time, "credentials.expire_time")
        if msg.HasField("expire_time") else None
    )
    return Credentials(
        msg.token, msg.username, tuple(msg.scopes),
        refresh_token=msg.refresh_token, expires_at=expires_at,
    )
