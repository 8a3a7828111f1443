"""Project search: proto <-> domain."""

from __future__ import annotations

from collections.abc import Mapping

from search_client.pb.search.v1 import project_search_pb2 as pb
from service.api.convert_common import dict_to_struct, from_datetime, from_value, to_time_range
from service.projects.request import ProjectSearchRequest, RawFilters, RawMetadataFilter
from service.projects.search import ResultPage
from service.store.base import DEFAULT_FUSION, Fusion, Mode, SearchHit

MODES = {
    pb.SEARCH_MODE_UNSPECIFIED: Mode.FTS,
    pb.SEARCH_MODE_FTS: Mode.FTS,
    pb.SEARCH_MODE_VECTOR: Mode.VECTOR,
    pb.SEARCH_MODE_HYBRID: Mode.HYBRID,
}
MODE_TO_PB = {
    Mode.FTS: pb.SEARCH_MODE_FTS,
    Mode.VECTOR: pb.SEARCH_MODE_VECTOR,
    Mode.HYBRID: pb.SEARCH_MODE_HYBRID,
}
FUSIONS = {
    pb.HYBRID_FUSION_UNSPECIFIED: DEFAULT_FUSION,
    pb.HYBRID_FUSION_SUM: Fusion.SUM,
    pb.HYBRID_FUSION_RRF: Fusion.RRF,
    pb.HYBRID_FUSION_MAX_MIN: Fusion.MAX_MIN,
}
OPERATORS = {
    pb.METADATA_OPERATOR_EQ: "eq",
    pb.METADATA_OPERATOR_CONTAINS_ALL: "contains_all",
    pb.METADATA_OPERATOR_IN: "in",
    pb.METADATA_OPERATOR_GT: "gt",
    pb.METADATA_OPERATOR_GTE: "gte",
    pb.METADATA_OPERATOR_LT: "lt",
    pb.METADATA_OPERATOR_LTE: "lte",
    pb.METADATA_OPERATOR_BETWEEN: "between",
    pb.METADATA_OPERATOR_IS_NULL: "is_null",
}


def request_from_proto(msg: pb.SearchProjectsRequest) -> ProjectSearchRequest:
    """The domain request; unknown enum values become invalid markers validation rejects."""
    from service.errors import InvalidArgument

    mode = MODES.get(msg.mode)
    if mode is None:
        raise InvalidArgument.field("mode", f"unknown mode {msg.mode}")
    fusion = FUSIONS.get(msg.fusion)
    if fusion is None:
        raise InvalidArgument.field("fusion", f"unknown fusion {msg.fusion}")
    f = msg.filters
    filters = RawFilters(
        kinds=tuple(f.kinds),
        metadata=tuple(
            RawMetadataFilter(
                m.path, OPERATORS.get(m.operator, ""), tuple(from_value(v) for v in m.values)
            )
            for m in f.metadata
        ),
        note_types=tuple(f.note_types),
        directory_prefix=f.directory_prefix,
        categories=tuple(f.categories),
        created=to_time_range(f.create_time, f.HasField("create_time"), "filters.create_time"),
        updated=to_time_range(f.update_time, f.HasField("update_time"), "filters.update_time"),
    )
    return ProjectSearchRequest(
        scope=tuple(msg.scope.project_ids) if msg.HasField("scope") else None,
        text=msg.text,
        mode=mode,
        filters=filters,
        page_size=msg.page_size,
        page_token=msg.page_token,
        max_pages=msg.max_pages,
        include_chunks=msg.include_chunks,
        min_similarity=msg.min_similarity,
        fusion=fusion,
        rrf_k=msg.rrf_k,
    )


def hit_to_proto(hit: SearchHit) -> pb.ProjectSearchResult:
    """One result."""
    return pb.ProjectSearchResult(
        project_id=hit.project_id,
        project_external_id=hit.project_external_id,
        kind=hit.kind,
        row_id=hit.row_id,
        title=hit.title,
        path=hit.path,
        category=hit.category,
        note_type=hit.note_type,
        metadata=dict_to_struct(hit.metadata),
        create_time=from_datetime(hit.created_at),
        update_time=from_datetime(hit.updated_at),
        scores=pb.ScoreBreakdown(
            score=hit.score,
            vector_score=hit.vector_score,
            fts_score=hit.fts_score,
            fts_normalized=hit.fts_normalized,
        ),
        chunks=[
            pb.MatchedChunk(chunk_index=c.index, text=c.text, similarity=c.similarity)
            for c in hit.chunks
        ],
        snippet=hit.snippet,
    )


def page_to_proto(
    result: ResultPage, converted: Mapping[int, pb.ProjectSearchResult] | None = None
) -> pb.SearchProjectsResponse:
    """One stream message; `converted` holds results already converted, by `id(hit)`."""
    page = result.page
    done = converted or {}
    return pb.SearchProjectsResponse(
        page=pb.ProjectSearchPage(
            results=[done[id(h)] if id(h) in done else hit_to_proto(h) for h in page.hits],
            next_page_token=result.next_page_token,
            page_number=result.page_number,
            total=page.total or 0,
            total_is_exact=page.total is not None,
            has_more=page.has_more,
            ranking_is_exact=page.ranking_is_exact,
            relaxed=page.relaxed,
            mode=MODE_TO_PB[result.mode],
            score_version=result.score_version,
        )
    )
