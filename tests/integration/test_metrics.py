"""The Prometheus endpoint: pool usage, searches by backend, index backlog, provider queries."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as agrpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as spb
from search_client.pb.search.v1 import project_search_pb2_grpc as sgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.embeddings.deterministic import DeterministicEmbedder
from service.fakes.suite import FakeProviders
from service.store.bounded_scan import row_bytes as scan_row_bytes
from tests.support.pg import fresh_database
from tests.support.reliability.world import server_env
from tests.support.server import channel_to, running_server

METRICS = {"SEARCH_METRICS_PORT": "0", "SEARCH_METRICS_BACKLOG_INTERVAL": "0.05"}


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text: str = reply.read().decode()
    return text


def _value(text: str, series: str) -> float:
    match = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{series} not in the scrape"
    return float(match.group(1))


async def _value_when(port: int, series: str, want: float) -> float:
    """The series' value once it equals `want` (the backlog is counted in the background)."""
    for _ in range(100):
        value = _value(await asyncio.to_thread(_scrape, port), series)
        if value == want:
            return value
        await asyncio.sleep(0.05)
    return value


async def _index_two_notes(channel: grpc.aio.Channel) -> int:
    stub = index_pb2_grpc.IndexServiceStub(channel)
    project = await stub.CreateProject(index_pb2.CreateProjectRequest(external_id="m"))
    pid = project.project.project_id

    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        yield index_pb2.UpsertDocumentsRequest(
            project_id=pid,
            documents=[
                index_pb2.Document(kind="note", row_id=str(i), title=f"comet {i}", body="ice")
                for i in range(2)
            ],
        )

    await stub.UpsertDocuments(messages())
    return int(pid)


async def test_scrape_shows_pool_reads_and_backlog(tmp_path: Path) -> None:
    async with running_server(tmp_path, METRICS) as app, channel_to(app) as channel:
        pid = await _index_two_notes(channel)
        search = sgrpc.ProjectSearchServiceStub(channel)
        call = search.SearchProjects(
            spb.SearchProjectsRequest(
                scope=spb.ProjectScope(project_ids=[pid]), text="comet",
                mode=spb.SEARCH_MODE_FTS,
            )
        )
        pages = [page async for page in call]
        assert pages
        assert pages[0].page.results
        text = await asyncio.to_thread(_scrape, app.metrics_port)
        assert _value(text, 'search_db_reads_total{backend="primary"}') == 1.0
        assert _value(text, "search_db_pool_connections") >= 1.0
        assert _value(text, "search_db_pool_connections_in_use") >= 0.0
        # Upserts embed before they answer: nothing is waiting for a vector.
        assert await _value_when(app.metrics_port, "search_index_chunks_pending", 0.0) == 0.0


async def test_scrape_shows_the_sqlite_vector_cache(tmp_path: Path) -> None:
    """A KNN search (every scope past SEARCH_EXACT_SCAN_LIMIT=0) reads its project's matrix
    into memory once; the next one uses it; nothing fell back to vec0."""
    env = {**METRICS, "SEARCH_EXACT_SCAN_LIMIT": "0"}
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        pid = await _index_two_notes(channel)
        search = sgrpc.ProjectSearchServiceStub(channel)
        for _ in range(2):
            call = search.SearchProjects(
                spb.SearchProjectsRequest(
                    scope=spb.ProjectScope(project_ids=[pid]), text="comet",
                    mode=spb.SEARCH_MODE_VECTOR,
                )
            )
            pages = [page async for page in call]
            assert pages[0].page.results
            assert not pages[0].page.ranking_is_exact
        text = await asyncio.to_thread(_scrape, app.metrics_port)
        assert _value(text, "search_vector_cache_loads_total") == 1.0
        assert _value(text, "search_vector_cache_projects") == 1.0
        assert _value(text, "search_vector_cache_bytes") == 2 * (scan_row_bytes(384) + 8)
        assert _value(text, "search_vector_cache_fallbacks_total") == 0.0
        assert _value(text, "search_vector_cache_evictions_total") == 0.0


async def test_backlog_counts_chunks_of_another_model(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        await _index_two_notes(channel)
    # The same data under another embedding: every chunk now waits for a vector.
    other = DeterministicEmbedder(dimensions=64)
    async with running_server(tmp_path, METRICS, embedder=other) as app:
        assert await _value_when(app.metrics_port, "search_index_chunks_pending", 2.0) == 2.0


@pytest.mark.postgres
async def test_postgres_pool_gauges(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    admin_dsn: str = request.getfixturevalue("pg_dsn")
    async with AsyncExitStack() as stack:
        dsn = await stack.enter_async_context(fresh_database(admin_dsn))
        env = {**METRICS, "SEARCH_DATABASE_URL": dsn}
        app = await stack.enter_async_context(running_server(tmp_path, env))
        channel = await stack.enter_async_context(channel_to(app))
        pid = await _index_two_notes(channel)
        search = sgrpc.ProjectSearchServiceStub(channel)
        for _ in range(2):  # ranked from the in-process postings (read once)
            call = search.SearchProjects(
                spb.SearchProjectsRequest(
                    scope=spb.ProjectScope(project_ids=[pid]), text="comet",
                    mode=spb.SEARCH_MODE_FTS,
                )
            )
            pages = [page async for page in call]
            assert len(pages[0].page.results) == 2
        text = await asyncio.to_thread(_scrape, app.metrics_port)
        assert _value(text, "search_db_pool_connections") >= 1.0
        assert _value(text, 'search_db_reads_total{backend="replica"}') == 0.0
        assert _value(text, "search_lexical_cache_served_total") == 2.0
        assert _value(text, "search_lexical_cache_fallbacks_total") == 0.0
        assert _value(text, "search_lexical_cache_projects") == 1.0
        assert _value(text, "search_lexical_cache_bytes") > 0.0
        assert await _value_when(app.metrics_port, "search_index_chunks_pending", 0.0) == 0.0


async def test_provider_queries_by_final_state(tmp_path: Path, fakes: FakeProviders) -> None:
    fakes.slack.add_message("C1", "general", "100.000000", "metrics quasar")
    env = server_env(fakes) | METRICS
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        await agrpc.AccountServiceStub(channel).ConnectAccount(
            apb.ConnectAccountRequest(provider=cpb.PROVIDER_SLACK, display_name="s",
                                      credentials=apb.Credentials(token=fakes.slack.token))
        )
        fakes.slack.fail_status(500, times=1)
        request = wpb.SearchWorkspaceRequest(queries=[
            wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="nothing here"),
            wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="metrics quasar"),
        ])
        stub = wgrpc.WorkspaceSearchServiceStub(channel)
        messages = [m async for m in stub.SearchWorkspace(request)]
        assert any(m.HasField("page") for m in messages)
        text = await asyncio.to_thread(_scrape, app.metrics_port)
    # One query met the 500 and failed, the other answered: each counted once, as it settled.
    ok = _value(text, 'search_provider_queries_total{provider="slack",state="ok"}')
    failed = _value(text, 'search_provider_queries_total{provider="slack",state="failed"}')
    assert (ok, failed) == (1.0, 1.0)
