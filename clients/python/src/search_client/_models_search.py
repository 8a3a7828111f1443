"""ProjectSearchService values: filters, ranked results and pages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from search_client._enums import MetadataOperator, SearchMode

__all__ = [
    "MatchedChunk",
    "MetadataFilter",
    "MetadataValue",
    "ProjectSearchFilters",
    "ProjectSearchPage",
    "ProjectSearchResult",
    "ScoreBreakdown",
    "TimeRange",
]

MetadataValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class TimeRange:
    """Half-open interval: `start` inclusive, `end` exclusive; None leaves that side open."""

    start: datetime | None = None
    end: datetime | None = None


@dataclass(frozen=True, slots=True)
class MetadataFilter:
    """One condition on a document's metadata object, e.g. `("status", EQ, ("open",))`."""

    path: str
    operator: MetadataOperator
    values: tuple[MetadataValue, ...] = ()


@dataclass(frozen=True, slots=True)
class ProjectSearchFilters:
    """Restrictions applied before ranking; all given ones must hold."""

    kinds: tuple[str, ...] = ()
    metadata: tuple[MetadataFilter, ...] = ()
    note_types: tuple[str, ...] = ()
    directory_prefix: str = ""
    categories: tuple[str, ...] = ()
    create_time: TimeRange | None = None
    update_time: TimeRange | None = None


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    """Per-channel scores of one result (see docs/semantics.md)."""

    score: float
    vector_score: float
    fts_score: float
    fts_normalized: float


@dataclass(frozen=True, slots=True)
class MatchedChunk:
    """A chunk of a result that matched the query embedding."""

    chunk_index: int
    text: str
    similarity: float


@dataclass(frozen=True, slots=True)
class ProjectSearchResult:
    """One ranked document."""

    project_id: int
    project_external_id: str
    kind: str
    row_id: str
    title: str
    path: str
    category: str
    note_type: str
    metadata: Mapping[str, Any]
    create_time: datetime | None
    update_time: datetime | None
    scores: ScoreBreakdown
    chunks: tuple[MatchedChunk, ...]
    snippet: str


@dataclass(frozen=True, slots=True)
class ProjectSearchPage:
    """One streamed page of a multi-project search."""

    results: tuple[ProjectSearchResult, ...]
    next_page_token: str
    page_number: int
    total: int
    total_is_exact: bool
    has_more: bool
    ranking_is_exact: bool
    relaxed: bool
    mode: SearchMode
    score_version: str
