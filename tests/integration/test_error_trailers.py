"""A request with many bad fields still comes back as INVALID_ARGUMENT, on every try.

An error travels in the call's trailers, and gRPC clients refuse trailers over 16 KiB and
refuse some at random between 8 and 16 KiB (their soft limit). Before the error was bounded,
a SearchProjects request with 18 empty note types and 18 empty metadata filters (found by the
fuzz test with more examples) came back as RESOURCE_EXHAUSTED "Stream removed" 3 times in 40,
and with 40 of each every time: the caller never learnt which field was wrong.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from search_client.pb.search.v1 import workspace_search_pb2 as ws
from search_client.pb.search.v1 import workspace_search_pb2_grpc as ws_grpc
from service.server import App
from tests.support.server import channel_to, running_server
from tests.support.status import decode

TRIES = 25
SOFT_LIMIT = 8 * 1024  # gRPC's default grpc.max_metadata_size


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[App]:
    async with running_server(tmp_path) as started:
        yield started


def _bad_project_search(count: int) -> ps.SearchProjectsRequest:
    request = ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[1]), text="alpha")
    for _ in range(count):
        request.filters.metadata.add()
        request.filters.note_types.append("")
    return request


def _bad_workspace_search() -> ws.SearchWorkspaceRequest:
    """32 queries (the most a call takes), each wrong twice, with long, non-ASCII ids."""
    return ws.SearchWorkspaceRequest(queries=[
        ws.NativeQuery(text="", account_id="\u00e9" * 300 + str(index), project="p" * 5000)
        for index in range(32)
    ])


def _trailer_bytes(error: grpc.aio.AioRpcError) -> int:
    return sum(len(key) + len(value) for key, value in error.trailing_metadata() or ())


@pytest.mark.parametrize("count", [18, 40, 200])
async def test_many_bad_project_filters_are_invalid_argument_every_time(
    app: App, count: int
) -> None:
    async with channel_to(app) as channel:
        stub = ps_grpc.ProjectSearchServiceStub(channel)
        for _ in range(TRIES):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stub.SearchProjects(_bad_project_search(count)):
                    pass
            error = caught.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert _trailer_bytes(error) < SOFT_LIMIT * 3 // 4
            decoded = decode(error)
            assert decoded.violations, "BadRequest names the fields"
            assert all(field.startswith("filters.") for field, _ in decoded.violations)
            assert decoded.info is not None
            total = int(decoded.info.metadata["violationCount"])
            assert total >= count
            if len(decoded.violations) < total:
                assert decoded.message.endswith(
                    f"({len(decoded.violations)} of {total} field violations in BadRequest)"
                )


async def test_many_bad_workspace_queries_are_invalid_argument_every_time(app: App) -> None:
    async with channel_to(app) as channel:
        stub = ws_grpc.WorkspaceSearchServiceStub(channel)
        for _ in range(TRIES):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stub.SearchWorkspace(_bad_workspace_search()):
                    pass
            error = caught.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert _trailer_bytes(error) < SOFT_LIMIT * 3 // 4
            decoded = decode(error)
            assert decoded.violations[0][0].startswith("queries[0]")
