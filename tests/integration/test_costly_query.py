"""A costly SQLite query is bounded and cancellable (issue 17 items 1 and 5).

`k* OR k* OR ...` (2,000 characters) expands every prefix over the whole scope: on SQLite
such a statement ran for minutes, had a time limit only when the client sent a deadline, and
kept running on its reader thread after the call was cancelled, so four cancelled copies
held all four reader threads and every other search waited.

Such a query is now refused before any statement (the query-cost budget, both stores); the
statement bounds behind the budget are tested with the budget raised (`RAISED`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.support.pg import fresh_database
from tests.support.server import channel_to, running_server
from tests.support.status import decode

COSTLY = " OR ".join(["k*"] * 333)  # 1,998 characters, within the text limit
# The query-cost budget refuses COSTLY; raised, the statement bounds behind it are tested.
RAISED = {"SEARCH_QUERY_MAX_TERMS": "1000", "SEARCH_QUERY_MAX_PREFIXES": "1000"}
WORDS = [f"k{i}x{j}" for i in range(10) for j in range(300)]


async def _index(
    stub: index_pb2_grpc.IndexServiceAsyncStub,
    project_id: int,
    metadata: tuple[tuple[str, str], ...] = (),
) -> None:
    rng = random.Random(7)

    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        for batch in range(4):
            yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=[
                index_pb2.Document(kind="note", row_id=f"{batch}-{i}",
                                   body=" ".join(rng.choice(WORDS) for _ in range(60)))
                for i in range(500)])

    reply = await stub.UpsertDocuments(messages(), metadata=metadata)
    assert reply.documents_created == 2000


def _request(project_id: int, text: str) -> ps.SearchProjectsRequest:
    return ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[project_id]), text=text,
                                    mode=ps.SEARCH_MODE_FTS, page_size=5)


async def _timed(search: ps_grpc.ProjectSearchServiceAsyncStub, project_id: int) -> float:
    started = time.monotonic()
    pages = [m.page async for m in search.SearchProjects(_request(project_id, "k3x7"),
                                                        timeout=60)]
    assert pages[0].results
    return time.monotonic() - started


async def test_cancelled_costly_searches_free_their_reader_threads(tmp_path: Path) -> None:
    async with running_server(tmp_path, {"SEARCH_EMBEDDER": "none"} | RAISED) as app, \
            channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        await _index(stub, project.project_id)
        baseline = await _timed(search, project.project_id)
        calls = [search.SearchProjects(_request(project.project_id, COSTLY), timeout=600)
                 for _ in range(4)]  # as many as the store has reader threads
        readers = [asyncio.ensure_future(call.read()) for call in calls]
        await asyncio.sleep(0.5)  # all four statements are running now
        for call in calls:
            call.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        delay = await _timed(search, project.project_id) - baseline
    assert delay < 1.0, f"a trivial search waited {delay:.2f} s behind cancelled statements"


async def test_a_costly_search_without_a_deadline_stops_at_the_server_limit(
    tmp_path: Path,
) -> None:
    env = {"SEARCH_EMBEDDER": "none", "SEARCH_PROJECT_SEARCH_TIMEOUT": "0.5"} | RAISED
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        await _index(stub, project.project_id)
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in search.SearchProjects(_request(project.project_id, COSTLY)):
                pass  # no client deadline at all
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 10


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def server_env(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {"SEARCH_EMBEDDER": "none"}
        return
    admin = request.getfixturevalue("pg_dsn")
    async with fresh_database(admin) as dsn:
        yield {"SEARCH_EMBEDDER": "none", "SEARCH_DATABASE_URL": dsn}


@pytest.mark.parametrize(
    ("text", "setting", "found"),
    [
        (COSTLY, "SEARCH_QUERY_MAX_TERMS", "333"),
        (" OR ".join(f"k{i}x*" for i in range(17)), "SEARCH_QUERY_MAX_PREFIXES", "17"),
    ],
)
async def test_a_query_over_the_cost_budget_is_refused_before_any_statement(
    tmp_path: Path, server_env: dict[str, str], text: str, setting: str, found: str
) -> None:
    async with running_server(tmp_path, server_env) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        await _index(stub, project.project_id)
        started = time.monotonic()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in search.SearchProjects(_request(project.project_id, text), timeout=60):
                pass
        assert time.monotonic() - started < 1.0
        # Within the budget, the same kind of query runs.
        pages = [m.page async for m in search.SearchProjects(
            _request(project.project_id, " OR ".join(f"k{i}x*" for i in range(16))), timeout=60)]
        assert pages[0].results
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    decoded = decode(caught.value)
    assert decoded.info is not None
    assert decoded.info.reason == "QUERY_TOO_COMPLEX"
    assert decoded.info.metadata["setting"] == setting
    assert decoded.info.metadata["found"] == found
    assert [field for field, _ in decoded.violations] == ["text"]
