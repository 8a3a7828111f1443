"""ProjectSearchService servicer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from search_client.pb.search.v1 import project_search_pb2 as pb
from search_client.pb.search.v1 import project_search_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_projects import hit_to_proto, page_to_proto, request_from_proto
from service.projects.search import ProjectSearch, ResultPage
from service.store.base import SearchHit

# Room in a message for the page's own fields, its token and each result's framing.
_PAGE_OVERHEAD = 4096
_RESULT_FRAMING = 8


class ProjectSearchServicer(pb_grpc.ProjectSearchServiceServicer):
    """Streams ranked pages of a multi-project search."""

    def __init__(self, search: ProjectSearch, max_message_bytes: int) -> None:
        self._search = search
        self._max_page_bytes = max(1, max_message_bytes - _PAGE_OVERHEAD)

    async def SearchProjects(
        self, request: pb.SearchProjectsRequest, context: Any
    ) -> AsyncIterator[pb.SearchProjectsResponse]:
        """See the proto."""
        tenant = request_context.current().tenant
        encoded: dict[int, pb.ProjectSearchResult] = {}  # each hit converted once

        def hit_size(hit: SearchHit) -> int:
            result = encoded[id(hit)] = hit_to_proto(hit)
            return result.ByteSize() + _RESULT_FRAMING

        def message(page: ResultPage) -> pb.SearchProjectsResponse:
            converted = page_to_proto(page, encoded)
            encoded.clear()
            return converted

        pages = self._search.pages(
            tenant, request_from_proto(request), hit_size, self._max_page_bytes
        )
        while True:
            # No page or message is bound across the yield: a stream whose client does not
            # read keeps only the encoded bytes gRPC holds (see service.api.stream_budget).
            try:
                yield message(await anext(pages))
            except StopAsyncIteration:
                return
