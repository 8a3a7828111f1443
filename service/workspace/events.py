"""What workspace search hands back: query statuses, fused pages and account listings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

from service.workspace.accounts import AccountView
from service.workspace.guidance import Guidance, ProviderCard
from service.workspace.model import Kind, ProviderId, QueryCard, QueryState

__all__ = [
    "AccountListing",
    "FusedPage",
    "FusedResult",
    "ListedAccount",
    "QueryStatus",
    "ResultContribution",
    "SearchEvent",
]


class QueryStatus(msgspec.Struct, frozen=True):
    """How one native query settled on one account (the latest status supersedes earlier ones)."""

    query_index: int
    account_id: str  # '' when the query reached no account
    provider: ProviderId
    state: QueryState
    message: str = ""
    partial: bool = False
    retry_after: float | None = None  # RATE_LIMITED: seconds to wait
    total: int | None = None  # matches the provider reported
    total_is_exact: bool = False
    result_count: int = 0  # results this query contributed to emitted pages so far
    next_cursor: str = ""  # resume this query alone; '' when exhausted
    page_number: int = 1


class ResultContribution(msgspec.Struct, frozen=True):
    """One query's vote for a fused result."""

    query_index: int
    account_id: str
    rank: int  # 1-based, absolute in that query's list
    score: float  # 1 / (k + rank)


class FusedResult(msgspec.Struct, frozen=True):
    """One fused result; document fields come from its best-ranked contribution."""

    result_id: str
    provider: ProviderId
    account_id: str
    kind: str
    title: str
    url: str
    snippet: str
    author: str
    container: str
    update_time: datetime | None
    event_start_time: datetime | None
    score: float
    contributions: tuple[ResultContribution, ...]


@dataclass(frozen=True)
class FusedPage:
    """One page of the fused list."""

    results: tuple[FusedResult, ...]
    next_page_token: str  # '' when nothing is left
    page_number: int
    cards: tuple[ProviderCard, ...]  # providers searched (none for NEEDS_RECONNECT)
    ranking_is_exact: bool
    rrf_k: int


SearchEvent = QueryStatus | FusedPage


@dataclass(frozen=True)
class ListedAccount:
    """An account with its provider's kinds and card (no card when it needs reconnecting)."""

    view: AccountView
    kinds: tuple[Kind, ...]
    card: QueryCard | None


@dataclass(frozen=True)
class AccountListing:
    """The caller's accounts and the guidance for the providers of connected ones."""

    accounts: tuple[ListedAccount, ...]
    guidance: Guidance
