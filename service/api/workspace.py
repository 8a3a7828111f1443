"""WorkspaceSearchService servicer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from search_client.pb.search.v1 import workspace_search_pb2 as pb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as pb_grpc
from service import context as request_context
from service.api.convert_workspace import (
    listing_to_proto,
    page_to_proto,
    provider_from_proto,
    search_request_from_proto,
    status_to_proto,
    statuses_in_page,
)
from service.workspace.engine import WorkspaceEngine
from service.workspace.events import QueryStatus

QueryObserver = Callable[[str, str], None]  # (provider, final state) of one query


def _ignore(_provider: str, _state: str) -> None:
    return None


class WorkspaceSearchServicer(pb_grpc.WorkspaceSearchServiceServicer):
    """Lists accounts with guidance; streams statuses and fused pages of a search."""

    def __init__(
        self, engine: WorkspaceEngine, response_limit: int, on_query: QueryObserver = _ignore
    ) -> None:
        self._engine = engine
        self._response_limit = response_limit
        self._on_query = on_query

    async def ListAccounts(
        self, request: pb.ListAccountsRequest, context: Any
    ) -> pb.ListAccountsResponse:
        """See the proto."""
        tenant = request_context.current().tenant
        provider = provider_from_proto(request.provider, "provider", required=False)
        return listing_to_proto(await self._engine.list_accounts(tenant, provider))

    async def SearchWorkspace(
        self, request: pb.SearchWorkspaceRequest, context: Any
    ) -> AsyncIterator[pb.SearchWorkspaceResponse]:
        """See the proto."""
        ctx = request_context.current()
        in_page = statuses_in_page(request.status_delivery)
        search = self._engine.search(
            ctx.tenant, search_request_from_proto(request), deadline=ctx.deadline
        )
        # The latest status of each query on each account supersedes earlier ones: report
        # how each settled once, when the call ends (however it ends).
        settled: dict[tuple[int, str], QueryStatus] = {}
        held: list[pb.QueryStatus] = []  # IN_PAGE: the statuses the next page carries
        try:
            async with aclosing(search) as events:
                async for event in events:
                    if isinstance(event, QueryStatus):
                        settled[event.query_index, event.account_id] = event
                        if in_page:
                            held.append(status_to_proto(event))
                        else:
                            yield pb.SearchWorkspaceResponse(query_status=status_to_proto(event))
                        continue
                    page = page_to_proto(event)
                    for early in _fill(page, held, self._response_limit):
                        yield pb.SearchWorkspaceResponse(query_status=early)
                    held.clear()
                    yield pb.SearchWorkspaceResponse(page=page)
        finally:
            for status in settled.values():
                self._on_query(status.provider.value, status.state.value)


# Bytes a message adds around a status in the page's repeated field or as a stream message,
# and around the page in its stream message: field tags and length prefixes.
_FRAMING = 10


def _fill(page: pb.FusedPage, held: list[pb.QueryStatus], limit: int) -> list[pb.QueryStatus]:
    """Put the IN_PAGE statuses `held` into `page` while it fits the response limit; return
    the earliest ones that do not fit, to go before the page as `query_status` messages (as
    STREAMED sends them, so the order is kept). They all fit but for a search over about a
    thousand lists (each status carries its cursor): one size check in the common case."""
    page.statuses.extend(held)
    if not held or page.ByteSize() + _FRAMING <= limit:
        return []
    del page.statuses[:]
    room = limit - page.ByteSize() - _FRAMING
    inside = 0
    for status in reversed(held):
        room -= status.ByteSize() + _FRAMING
        if room < 0:
            break
        inside += 1
    page.statuses.extend(held[len(held) - inside:])
    return held[: len(held) - inside]
