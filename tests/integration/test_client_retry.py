"""Retries, deadlines, metadata and page resumption of the client, on a real gRPC server.

The search service never fails on cue, so these tests serve the contract's methods from a
small scripted grpc.aio server on a real port: UNAVAILABLE a set number of times, a stream
cut after its first page, a slow answer. The wire, the stubs and the client are all real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from search_client import (
    AsyncSearchClient,
    DeadlineExceededError,
    Document,
    InvalidArgumentError,
    RetryPolicy,
    SearchClient,
    UnavailableError,
)
from search_client.pb.search.v1 import index_pb2, project_search_pb2

FAST = RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)


class Script:
    """What the scripted server does, and what it saw."""

    def __init__(self) -> None:
        self.failures: dict[str, int] = {}
        self.code = grpc.StatusCode.UNAVAILABLE
        self.metadata: list[dict[str, str]] = []
        self.tokens: list[str] = []
        self.max_pages: list[int] = []
        self.cut_after_first_page = False
        self.delay = 0.0

    async def fail_if_scripted(self, method: str, context: Any) -> None:
        self.metadata.append(dict(context.invocation_metadata()))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures.get(method, 0) > 0:
            self.failures[method] -= 1
            await context.abort(self.code, f"{method} scripted failure")

    async def list_projects(self, request: Any, context: Any) -> index_pb2.ListProjectsResponse:
        await self.fail_if_scripted("ListProjects", context)
        project = index_pb2.Project(project_id=7, external_id="p7", name="Seven")
        return index_pb2.ListProjectsResponse(projects=[project])

    async def upsert(self, requests: Any, context: Any) -> index_pb2.UpsertDocumentsResponse:
        received = 0
        async for message in requests:
            received += len(message.documents)
        await self.fail_if_scripted("UpsertDocuments", context)
        return index_pb2.UpsertDocumentsResponse(documents_received=received)

    async def search(
        self, request: project_search_pb2.SearchProjectsRequest, context: Any
    ) -> AsyncIterator[project_search_pb2.SearchProjectsResponse]:
        self.metadata.append(dict(context.invocation_metadata()))
        self.tokens.append(request.page_token)
        self.max_pages.append(request.max_pages)
        number = 2 if request.page_token == "p2" else 1
        result = project_search_pb2.ProjectSearchResult(project_id=7, kind="note",
                                                        row_id=f"r{number}")
        page = project_search_pb2.ProjectSearchPage(
            results=[result], page_number=number, next_page_token="p2" if number == 1 else "",
            has_more=number == 1,
        )
        yield project_search_pb2.SearchProjectsResponse(page=page)
        if number == 1 and self.cut_after_first_page:
            self.cut_after_first_page = False
            await context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost")


def _handlers(script: Script) -> list[grpc.GenericRpcHandler]:
    def unary(fn: Callable[..., Any], req: Any, resp: Any) -> Any:
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString
        )

    index = grpc.method_handlers_generic_handler("search.v1.IndexService", {
        "ListProjects": unary(script.list_projects, index_pb2.ListProjectsRequest,
                              index_pb2.ListProjectsResponse),
        "UpsertDocuments": grpc.stream_unary_rpc_method_handler(
            script.upsert, request_deserializer=index_pb2.UpsertDocumentsRequest.FromString,
            response_serializer=index_pb2.UpsertDocumentsResponse.SerializeToString,
        ),
    })
    search = grpc.method_handlers_generic_handler("search.v1.ProjectSearchService", {
        "SearchProjects": grpc.unary_stream_rpc_method_handler(
            script.search,
            request_deserializer=project_search_pb2.SearchProjectsRequest.FromString,
            response_serializer=project_search_pb2.SearchProjectsResponse.SerializeToString,
        ),
    })
    return [index, search]


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[Script, str]]:
    script = Script()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(_handlers(script))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield script, f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def test_unavailable_is_retried_with_the_same_request_id_and_token(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    script.failures["ListProjects"] = 2
    async with AsyncSearchClient(target, token="tok", retry=FAST) as client:
        page = await client.list_projects(request_id="rid-42")
    assert [p.external_id for p in page.projects] == ["p7"]
    assert len(script.metadata) == 3
    assert {m["x-request-id"] for m in script.metadata} == {"rid-42"}
    assert {m["authorization"] for m in script.metadata} == {"Bearer tok"}


async def test_retries_are_bounded(scripted: tuple[Script, str]) -> None:
    script, target = scripted
    script.failures["ListProjects"] = 10
    async with AsyncSearchClient(target, retry=FAST) as client:
        with pytest.raises(UnavailableError) as caught:
            await client.list_projects(request_id="rid-7")
    assert len(script.metadata) == FAST.max_attempts
    assert caught.value.retryable
    assert caught.value.request_id == "rid-7"
    assert "scripted failure" in caught.value.message


async def test_other_codes_are_not_retried(scripted: tuple[Script, str]) -> None:
    script, target = scripted
    script.failures["ListProjects"] = 1
    script.code = grpc.StatusCode.INVALID_ARGUMENT
    async with AsyncSearchClient(target, retry=FAST) as client:
        with pytest.raises(InvalidArgumentError):
            await client.list_projects()
    assert len(script.metadata) == 1


async def test_a_generated_request_id_is_sent_when_none_is_given(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    async with AsyncSearchClient(target) as client:
        await client.list_projects()
        await client.list_projects()
    ids = [m["x-request-id"] for m in script.metadata]
    assert len(set(ids)) == 2
    assert all(len(i) == 32 for i in ids)
    assert all("authorization" not in m for m in script.metadata)


async def test_deadline_is_per_call_and_not_retried(scripted: tuple[Script, str]) -> None:
    script, target = scripted
    script.delay = 0.3
    async with AsyncSearchClient(target, retry=FAST, default_timeout=30) as client:
        with pytest.raises(DeadlineExceededError):
            await client.list_projects(timeout=0.05)
    await asyncio.sleep(0.35)  # let the slow handler finish before the server stops
    assert len(script.metadata) == 1


async def test_page_iterator_resumes_after_the_last_page_received(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    script.cut_after_first_page = True
    async with AsyncSearchClient(target, retry=FAST) as client:
        pages = [p async for p in client.iter_project_pages([7], "x", pages_per_call=2)]
    assert [p.page_number for p in pages] == [1, 2]
    assert [r.row_id for p in pages for r in p.results] == ["r1", "r2"]
    assert script.tokens == ["", "p2"]


async def test_a_single_call_stream_resumes_for_the_pages_still_owed(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    script.cut_after_first_page = True
    seen: list[int] = []

    async def read_all(client: AsyncSearchClient) -> None:
        async for page in client.search_projects([7], "x", max_pages=2):
            seen.append(page.page_number)

    async with AsyncSearchClient(target, retry=FAST) as client:
        await read_all(client)
    # Cut after page 1 of 2: the call resumes from page 1's token for the one page owed.
    assert seen == [1, 2]
    assert script.tokens == ["", "p2"]
    assert script.max_pages == [2, 1]


async def test_a_single_page_call_is_not_replayed_after_its_page(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    script.cut_after_first_page = True
    async with AsyncSearchClient(target, retry=FAST) as client:
        with pytest.raises(UnavailableError):
            _ = [page async for page in client.search_projects([7], "x", max_pages=1)]
    assert script.tokens == [""]


async def test_upsert_retries_a_list_but_not_a_one_shot_iterator(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    documents = [Document("note", f"d{i}", body="text") for i in range(5)]
    script.failures["UpsertDocuments"] = 1
    async with AsyncSearchClient(target, retry=FAST) as client:
        summary = await client.upsert_documents(7, documents, batch_size=2)
        assert summary.documents_received == 5
        script.failures["UpsertDocuments"] = 1
        with pytest.raises(UnavailableError):
            await client.upsert_documents(7, iter(documents))


async def test_sync_client_retries_and_follows_pages(scripted: tuple[Script, str]) -> None:
    script, target = scripted
    script.failures["ListProjects"] = 1
    script.cut_after_first_page = True

    def run() -> tuple[list[str], list[str]]:
        with SearchClient(target, token="tok", retry=FAST) as client:
            projects = [p.external_id for p in client.iter_projects()]
            rows = [r.row_id for r in client.iter_project_results([7], "x", pages_per_call=2)]
        return projects, rows

    projects, rows = await asyncio.to_thread(run)
    assert projects == ["p7"]
    assert rows == ["r1", "r2"]
    assert script.tokens == ["", "p2"]


async def test_sync_single_call_stream_resumes_for_the_pages_still_owed(
    scripted: tuple[Script, str],
) -> None:
    script, target = scripted
    script.cut_after_first_page = True

    def run() -> list[int]:
        with SearchClient(target, retry=FAST) as client:
            return [p.page_number for p in client.search_projects([7], "x", max_pages=2)]

    assert await asyncio.to_thread(run) == [1, 2]
    assert script.max_pages == [2, 1]
