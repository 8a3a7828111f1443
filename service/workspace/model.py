"""Plain domain types of workspace search: queries, provider pages, results and states."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from service.timerange import TimeRange

__all__ = [
    "Account",
    "Credentials",
    "Kind",
    "NativeDocument",
    "ProviderError",
    "ProviderId",
    "ProviderPage",
    "ProviderQuery",
    "QueryCard",
    "QueryState",
    "TimeRange",
]


class ProviderId(enum.StrEnum):
    """Every provider the registry knows, in registry (guidance) order."""

    GITHUB = "github"
    GITLAB = "gitlab"
    SLACK = "slack"
    GOOGLE_DRIVE = "google_drive"
    GMAIL = "gmail"
    GOOGLE_CALENDAR = "google_calendar"
    JIRA = "jira"
    CONFLUENCE = "confluence"


class Kind(enum.StrEnum):
    """Native query kinds; only GitHub and GitLab use them."""

    ISSUES = "issues"
    CODE = "code"
    COMMITS = "commits"
    REPOSITORIES = "repositories"
    MERGE_REQUESTS = "merge_requests"
    WIKI = "wiki"


class QueryState(enum.StrEnum):
    """How one native query on one account settled."""

    OK = "ok"
    SKIPPED = "skipped"
    NEEDS_RECONNECT = "needs_reconnect"
    RATE_LIMITED = "rate_limited"
    TIMED_OUT = "timed_out"
    FAILED = "failed"


@dataclass(frozen=True)
class QueryCard:
    """What an LLM caller needs to write a native query that works."""

    syntax: str
    scope: str
    example: str
    avoid: str


@dataclass(frozen=True)
class Credentials:
    """Decrypted provider credentials; never logged (repr masks the secret)."""

    token: str = field(repr=False)  # access token (or API / personal token)
    username: str = ""  # basic-auth user (Jira/Confluence e-mail) when the provider needs one
    scopes: tuple[str, ...] = ()  # granted OAuth scopes when known (Slack picks channel types)
    refresh_token: str = field(default="", repr=False)  # OAuth 2.0 refresh token, when granted
    expires_at: datetime | None = None  # when the access token expires (UTC); None = unknown

    @property
    def refreshable(self) -> bool:
        """True when a refresh token lets the service renew the access token itself."""
        return bool(self.refresh_token)


@dataclass(frozen=True)
class Account:
    """A connected provider account owned by a tenant."""

    account_id: str
    tenant: str
    provider: ProviderId
    display_name: str
    base_url: str  # API origin, e.g. "https://api.github.com"; self-hosted instances differ
    needs_reconnect: bool = False


class ProviderQuery(msgspec.Struct, frozen=True):
    """One native query as a provider adapter sees it."""

    text: str
    kind: Kind | None = None
    time_range: TimeRange = TimeRange()
    project: str = (
        ""  # provider scope: Drive "drive:ID", calendar id, Atlassian cloud id, GitLab project
    )
    limit: int = 10  # results wanted for this page (top_k)
    cursor: str | None = None  # the adapter's own continuation from a previous ProviderPage
    # `cursor` is the one the list resumed this call with, so a provider may have expired
    # the page tokens in it: a fan-out leg whose token is refused reads its first page again.
    resumed: bool = False


class NativeDocument(msgspec.Struct, frozen=True):
    """One provider result in the common shape. A msgspec Struct, not a dataclass: a search
    builds hundreds (every result of every list), and a Struct is as immutable and ten times
    cheaper to build (0.1 against 1.4 us); `msgspec.structs.replace` changes a copy."""

    id: str
    title: str
    url: str
    content: str = ""
    kind: str = ""
    container: str = ""
    author: str = ""
    modified_at: datetime | None = None
    event_start_at: datetime | None = (
        None  # calendar events: scheduled start (the date filters use)
    )
    dedupe_key: str = ""  # identity across calendars/sites; empty = use url, then id
    stub: bool = False  # identity only; the provider's `hydrate` reads the rest when emitted

    @property
    def source_date(self) -> datetime | None:
        """The date time filters check: event start for events, else modification time."""
        return self.event_start_at or self.modified_at


class ProviderPage(msgspec.Struct, frozen=True):
    """One page of a provider search."""

    documents: tuple[NativeDocument, ...]
    next_cursor: str | None = None  # adapter continuation; None = no more pages
    total: int | None = None  # provider's total when it reports one
    total_is_exact: bool = False
    partial: bool = False  # degraded but successful (incomplete results, capped fan-out...)
    message: str = ""  # why partial / what was skipped, joined sentences
    # e.g. {"code": "why skipped"}
    skipped_legs: Mapping[str, str] = msgspec.field(default_factory=dict)
    # False when a part of the page failed (a fan-out leg, a detail read): the results here
    # are usable, and the page is read again on the next page so the failed part is retried.
    complete: bool = True
    retry_after: float | None = None  # the longest wait a rate-limited part asked for
    restarted: bool = False  # a leg's expired page token was refused: it read its first page


_RETRYABLE_STATES = frozenset({QueryState.RATE_LIMITED, QueryState.TIMED_OUT})


class ProviderError(Exception):
    """A provider answer mapped to a per-query state (see PROVIDERS.md status mapping).

    `retryable`: the same request may succeed later (rate limits, timeouts, 5xx, a dropped
    connection), so paging keeps the failed work and tries it again on the next page; False
    for answers that will not change by themselves (refused credentials, a query the
    provider rejects). Defaults to True for RATE_LIMITED and TIMED_OUT, False otherwise.
    `refresh`: the provider refused the access token as expired or invalid, so a refreshed
    token may succeed (the session refreshes once and retries once when it can).
    `stalled`: a TIMED_OUT request that had the whole provider request timeout, or half the
    call's time (service.workspace.fanout.STALL_SHARE), and got no answer: the provider ran
    out the time, not a request whose turn came too late in the call.
    `gone`: a result's details could not be read because the item no longer exists (deleted
    since it was listed): the result is dropped, not emitted, and the query is not degraded.
    """

    def __init__(
        self,
        state: QueryState,
        message: str,
        *,
        retry_after: float | None = None,
        retryable: bool | None = None,
        refresh: bool = False,
        stalled: bool = False,
        gone: bool = False,
    ) -> None:
        super().__init__(message)
        self.refresh = refresh
        self.stalled = stalled
        self.gone = gone
        self.state = state
        self.message = message
        self.retry_after = retry_after
        self.retryable = state in _RETRYABLE_STATES if retryable is None else retryable
