"""ProjectSearchService servicer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from search_client.pb.search.v1 import project_search_pb2 as pb
from search_client.pb.search.v1 import project_search_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_projects import page_to_proto, request_from_proto
from service.projects.search import ProjectSearch


class ProjectSearchServicer(pb_grpc.ProjectSearchServiceServicer):
    """Streams ranked pages of a multi-project search."""

    def __init__(self, search: ProjectSearch) -> None:
        self._search = search

    async def SearchProjects(
        self, request: pb.SearchProjectsRequest, context: Any
    ) -> AsyncIterator[pb.SearchProjectsResponse]:
        """See the proto."""
        tenant = request_context.current().tenant
        async for page in self._search.pages(tenant, request_from_proto(request)):
            yield page_to_proto(page)
