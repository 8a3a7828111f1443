"""WorkspaceSearchService and AccountService values."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from search_client._enums import AccountState, Provider, QueryKind, QueryState
from search_client._models_search import TimeRange

__all__ = [
    "Account",
    "AccountList",
    "Contribution",
    "FusedPage",
    "FusedResult",
    "Guidance",
    "NativeQuery",
    "QueryCard",
    "QueryStatus",
]


@dataclass(frozen=True, slots=True)
class QueryCard:
    """How to write a native query for one provider."""

    provider: Provider
    syntax: str
    scope: str
    example: str
    avoid: str


@dataclass(frozen=True, slots=True)
class Guidance:
    """Shared rules plus the cards of the providers in play; `text` is prompt-ready."""

    shared_rules: str
    cards: tuple[QueryCard, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Account:
    """A connected provider account (never its credentials)."""

    account_id: str
    provider: Provider
    display_name: str
    state: AccountState
    kinds: tuple[QueryKind, ...]
    base_url: str
    create_time: datetime | None
    card: QueryCard | None
    credentials_expire_time: datetime | None = None  # when the stored access token expires
    refreshable: bool = False  # a refresh token is stored: the service renews the token itself


@dataclass(frozen=True, slots=True)
class AccountList:
    """The result of `list_accounts`."""

    accounts: tuple[Account, ...]
    guidance: Guidance


@dataclass(frozen=True, slots=True)
class NativeQuery:
    """One query in the provider's own language; empty `account_id` = every account."""

    provider: Provider
    text: str = ""
    _: KW_ONLY
    account_id: str = ""
    kind: QueryKind | None = None
    time_range: TimeRange | None = None
    project: str = ""
    cursor: str = ""


@dataclass(frozen=True, slots=True)
class QueryStatus:
    """How one native query settled on one account; `retry_after` is in seconds."""

    query_index: int
    account_id: str
    provider: Provider
    state: QueryState
    message: str
    partial: bool
    retry_after: float | None
    total: int
    total_is_exact: bool
    result_count: int
    next_cursor: str
    page_number: int


@dataclass(frozen=True, slots=True)
class Contribution:
    """One query's share in a fused result."""

    query_index: int
    account_id: str
    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class FusedResult:
    """One result of reciprocal rank fusion over every query and account."""

    result_id: str
    provider: Provider
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
    contributions: tuple[Contribution, ...]


@dataclass(frozen=True, slots=True)
class FusedPage:
    """One fused page; `statuses`: the latest status of each (query, account) for this page."""

    results: tuple[FusedResult, ...]
    next_page_token: str
    page_number: int
    cards: tuple[QueryCard, ...]
    ranking_is_exact: bool
    rrf_k: int
    statuses: tuple[QueryStatus, ...] = ()
