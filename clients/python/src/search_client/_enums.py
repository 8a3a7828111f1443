"""Enumerations of the search.v1 contract as plain Python enums."""

from __future__ import annotations

import enum

__all__ = [
    "AccountState",
    "DocumentOutcome",
    "MetadataOperator",
    "Provider",
    "QueryKind",
    "QueryState",
    "SearchMode",
]


class SearchMode(enum.StrEnum):
    """How project search retrieves and ranks documents."""

    FTS = "fts"
    VECTOR = "vector"
    HYBRID = "hybrid"


class HybridFusion(enum.StrEnum):
    """How HYBRID fuses the full-text and vector rankings (the server's default: SUM)."""

    SUM = "sum"
    RRF = "rrf"
    MAX_MIN = "max_min"


class MetadataOperator(enum.StrEnum):
    """Comparison applied by a metadata filter."""

    EQ = "eq"
    CONTAINS_ALL = "contains_all"
    IN = "in"
    GT = "gt"
    GTE = "gte"
    LT = "lt"
    LTE = "lte"
    BETWEEN = "between"
    IS_NULL = "is_null"


class Provider(enum.StrEnum):
    """The provider behind a connected account, in registry order."""

    UNSPECIFIED = "unspecified"
    GITHUB = "github"
    GITLAB = "gitlab"
    SLACK = "slack"
    GOOGLE_DRIVE = "google_drive"
    GMAIL = "gmail"
    GOOGLE_CALENDAR = "google_calendar"
    JIRA = "jira"
    CONFLUENCE = "confluence"


class QueryKind(enum.StrEnum):
    """Kinds of native queries (GitHub and GitLab only)."""

    ISSUES = "issues"
    CODE = "code"
    COMMITS = "commits"
    REPOSITORIES = "repositories"
    MERGE_REQUESTS = "merge_requests"
    WIKI = "wiki"


class AccountState(enum.StrEnum):
    """Whether an account can be searched."""

    UNSPECIFIED = "unspecified"
    CONNECTED = "connected"
    NEEDS_RECONNECT = "needs_reconnect"


class QueryState(enum.StrEnum):
    """How one native query settled on one account."""

    UNSPECIFIED = "unspecified"
    OK = "ok"
    SKIPPED = "skipped"
    NEEDS_RECONNECT = "needs_reconnect"
    RATE_LIMITED = "rate_limited"
    TIMED_OUT = "timed_out"
    FAILED = "failed"


class DocumentOutcome(enum.StrEnum):
    """What an upsert did with one document."""

    UNSPECIFIED = "unspecified"
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REJECTED = "rejected"
