"""ProjectSearchService: search arguments to a request, pages to model values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf import struct_pb2

from search_client._convert_common import enum_member, enum_name, mapping, time_or_none, time_range
from search_client._enums import HybridFusion, SearchMode
from search_client._models_search import (
    MatchedChunk,
    MetadataFilter,
    ProjectSearchFilters,
    ProjectSearchPage,
    ProjectSearchResult,
    ScoreBreakdown,
)
from search_client.pb.search.v1 import project_search_pb2 as pb

__all__ = ["SearchArgs", "page_from_pb", "search_request"]


@dataclass(frozen=True, slots=True)
class SearchArgs:
    """Everything that identifies a project search except the page token."""

    project_ids: tuple[int, ...]
    text: str
    mode: SearchMode
    filters: ProjectSearchFilters | None
    page_size: int
    max_pages: int
    include_chunks: bool
    min_similarity: float
    fusion: HybridFusion | None = None  # None: the server's default (SUM)
    rrf_k: int = 0  # 0: the server's default (60)


def search_request(args: SearchArgs, page_token: str = "") -> pb.SearchProjectsRequest:
    """The request for `args`, resuming at `page_token` when given."""
    request = pb.SearchProjectsRequest(
        scope=pb.ProjectScope(project_ids=args.project_ids),
        text=args.text,
        mode=enum_name("SEARCH_MODE_", args.mode),
        page_size=args.page_size,
        page_token=page_token,
        max_pages=args.max_pages,
        include_chunks=args.include_chunks,
        min_similarity=args.min_similarity,
        rrf_k=args.rrf_k,
    )
    if args.fusion is not None:
        request.fusion = enum_name("HYBRID_FUSION_", args.fusion)  # type: ignore[assignment]
    if args.filters is not None:
        request.filters.CopyFrom(_filters_to_pb(args.filters))
    return request


def _filters_to_pb(filters: ProjectSearchFilters) -> pb.ProjectSearchFilters:
    message = pb.ProjectSearchFilters(
        kinds=filters.kinds,
        note_types=filters.note_types,
        directory_prefix=filters.directory_prefix,
        categories=filters.categories,
        metadata=[_metadata_filter(f) for f in filters.metadata],
    )
    if filters.create_time is not None:
        message.create_time.CopyFrom(time_range(filters.create_time))
    if filters.update_time is not None:
        message.update_time.CopyFrom(time_range(filters.update_time))
    return message


def _metadata_filter(condition: MetadataFilter) -> pb.MetadataFilter:
    return pb.MetadataFilter(
        path=condition.path,
        operator=enum_name("METADATA_OPERATOR_", condition.operator),
        values=list(_values(condition.values)),
    )


def _values(values: Iterable[object]) -> Iterable[struct_pb2.Value]:
    for raw in values:
        value = struct_pb2.Value()
        if isinstance(raw, bool):
            value.bool_value = raw
        elif isinstance(raw, int | float):
            value.number_value = float(raw)
        elif isinstance(raw, str):
            value.string_value = raw
        else:
            raise TypeError(f"metadata filter values are str, int, float or bool, not {raw!r}")
        yield value


def page_from_pb(message: pb.ProjectSearchPage) -> ProjectSearchPage:
    """A ProjectSearchPage."""
    return ProjectSearchPage(
        results=tuple(_result(r) for r in message.results),
        next_page_token=message.next_page_token,
        page_number=message.page_number,
        total=message.total,
        total_is_exact=message.total_is_exact,
        has_more=message.has_more,
        ranking_is_exact=message.ranking_is_exact,
        relaxed=message.relaxed,
        mode=enum_member(SearchMode, pb.SearchMode, "SEARCH_MODE_", message.mode, SearchMode.FTS),
        score_version=message.score_version,
    )


def _result(message: pb.ProjectSearchResult) -> ProjectSearchResult:
    scores = message.scores
    return ProjectSearchResult(
        project_id=message.project_id,
        project_external_id=message.project_external_id,
        kind=message.kind,
        row_id=message.row_id,
        title=message.title,
        path=message.path,
        category=message.category,
        note_type=message.note_type,
        metadata=mapping(message.metadata),
        create_time=time_or_none(message, "create_time"),
        update_time=time_or_none(message, "update_time"),
        scores=ScoreBreakdown(
            score=scores.score,
            vector_score=scores.vector_score,
            fts_score=scores.fts_score,
            fts_normalized=scores.fts_normalized,
        ),
        chunks=tuple(
            MatchedChunk(chunk_index=c.chunk_index, text=c.text, similarity=c.similarity)
            for c in message.chunks
        ),
        snippet=message.snippet,
    )
