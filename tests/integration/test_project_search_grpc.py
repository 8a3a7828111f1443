"""SearchProjects through the real server and channel: scope, tokens, one embedding, tenants."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from service.embeddings.base import CountingEmbedder
from service.embeddings.deterministic import DeterministicEmbedder
from tests.support.server import channel_to, running_server
from tests.support.status import decode

TOKENS = {"alice-token": "alice", "bob-token": "bob"}
AUTH = {
    "SEARCH_AUTH_TOKENS": ",".join(
        f"{hashlib.sha256(t.encode()).hexdigest()}:{tenant}:write" for t, tenant in TOKENS.items()
    )
}
ALICE = (("authorization", "Bearer alice-token"),)
BOB = (("authorization", "Bearer bob-token"),)


def _doc(kind: str, row_id: str, body: str, **extra: str) -> index_pb2.Document:
    meta = struct_pb2.Struct()
    meta.update({"status": extra.get("status", "open")})
    return index_pb2.Document(
        kind=kind,
        row_id=row_id,
        title=f"{kind} {row_id}",
        path=f"notes/{row_id}.md",
        body=body,
        metadata=meta,
    )


async def _upsert(
    stub: index_pb2_grpc.IndexServiceAsyncStub,
    project_id: int,
    docs: list[index_pb2.Document],
    metadata: tuple[tuple[str, str], ...],
) -> index_pb2.UpsertDocumentsResponse:
    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=docs)

    reply: index_pb2.UpsertDocumentsResponse = await stub.UpsertDocuments(
        messages(), metadata=metadata
    )
    return reply


async def _pages(
    stub: ps_grpc.ProjectSearchServiceAsyncStub,
    request: ps.SearchProjectsRequest,
    metadata: tuple[tuple[str, str], ...] = ALICE,
) -> list[ps.ProjectSearchPage]:
    return [m.page async for m in stub.SearchProjects(request, metadata=metadata)]


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder(DeterministicEmbedder(384))


async def test_project_search_end_to_end(tmp_path: Path, embedder: CountingEmbedder) -> None:
    async with running_server(tmp_path, AUTH, embedder=embedder) as app, channel_to(app) as ch:
        index = index_pb2_grpc.IndexServiceStub(ch)
        search = ps_grpc.ProjectSearchServiceStub(ch)
        ids = []
        for name in ("p0", "p1", "p2"):
            created = await index.CreateProject(
                index_pb2.CreateProjectRequest(external_id=name, name=name), metadata=ALICE
            )
            ids.append(created.project.project_id)
            docs = [
                _doc("note", str(i), f"shared nebula observation {name} number {i}")
                for i in range(7)
            ] + [_doc("observation", "0", f"nebula colliding id {name}")]
            reply = await _upsert(index, created.project.project_id, docs, ALICE)
            assert reply.documents_created == 8
        bob_project = await index.CreateProject(
            index_pb2.CreateProjectRequest(external_id="secret"), metadata=BOB
        )
        await _upsert(
            index, bob_project.project.project_id, [_doc("note", "1", "nebula secret")], BOB
        )

        # FTS: exact total, results carry project ids and external ids, ids collide safely
        request = ps.SearchProjectsRequest(
            scope=ps.ProjectScope(project_ids=ids),
            text="nebula",
            page_size=5,
            max_pages=10,
        )
        pages = await _pages(search, request)
        results = [r for p in pages for r in p.results]
        assert pages[0].total == 24
        assert pages[0].total_is_exact
        assert len(results) == 24
        assert len({(r.project_id, r.kind, r.row_id) for r in results}) == 24
        assert {r.project_external_id for r in results} == {"p0", "p1", "p2"}
        assert [p.page_number for p in pages] == [1, 2, 3, 4, 5]
        assert pages[-1].next_page_token == ""
        assert not pages[-1].has_more

        # page-size independence: 1 x 20 == 2 x 10 == 4 x 5 (identities and scores)
        for mode in (ps.SEARCH_MODE_FTS, ps.SEARCH_MODE_VECTOR, ps.SEARCH_MODE_HYBRID):
            orders = []
            for size, count in ((20, 1), (10, 2), (5, 4)):
                got = await _pages(
                    search,
                    ps.SearchProjectsRequest(
                        scope=ps.ProjectScope(project_ids=ids),
                        text="shared nebula observation",
                        mode=mode,
                        page_size=size,
                        max_pages=count,
                    ),
                )
                orders.append(
                    [
                        (r.project_id, r.kind, r.row_id, round(r.scores.score, 9))
                        for p in got
                        for r in p.results
                    ][:20]
                )
            assert orders[0] == orders[1] == orders[2], mode

        # resuming with a token equals reading on; one embedding per semantic request
        embedder.reset()
        first = await _pages(
            search,
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(project_ids=ids),
                text="nebula",
                mode=ps.SEARCH_MODE_HYBRID,
                page_size=4,
                max_pages=2,
            ),
        )
        assert embedder.calls == 1
        assert not first[0].total_is_exact
        assert first[0].has_more
        resumed = await _pages(
            search,
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(project_ids=ids),
                text="nebula",
                mode=ps.SEARCH_MODE_HYBRID,
                page_size=4,
                page_token=first[0].next_page_token,
            ),
        )
        assert [r.row_id for r in resumed[0].results] == [r.row_id for r in first[1].results]
        assert resumed[0].page_number == 2

        # a token replayed with another request, or forged, is rejected
        for bad in (
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(project_ids=ids),
                text="other",
                mode=ps.SEARCH_MODE_HYBRID,
                page_size=4,
                page_token=first[0].next_page_token,
            ),
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(project_ids=ids),
                text="nebula",
                mode=ps.SEARCH_MODE_HYBRID,
                page_size=4,
                page_token=first[0].next_page_token[:-3] + "AAA",
            ),
            # the lenient base64 decoder skipped junk and padding: tokens have one spelling
            *(
                ps.SearchProjectsRequest(
                    scope=ps.ProjectScope(project_ids=ids),
                    text="nebula",
                    mode=ps.SEARCH_MODE_HYBRID,
                    page_size=4,
                    page_token=spoiled,
                )
                for token in (first[0].next_page_token,)
                for spoiled in (
                    token + "==",
                    token[:5] + "!" + token[5:],
                    token[:-2] + "\n" + token[-2:],
                    token.replace(".", "=.", 1),
                )
            ),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _pages(search, bad)
            decoded = decode(caught.value)
            assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
            assert decoded.info is not None
            assert decoded.info.reason == "PAGE_TOKEN_INVALID"
            assert decoded.violations[0][0] == "page_token"
        # ...and so is one replayed by another tenant on the same request
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _pages(
                search,
                ps.SearchProjectsRequest(
                    scope=ps.ProjectScope(project_ids=[bob_project.project.project_id]),
                    text="nebula",
                    mode=ps.SEARCH_MODE_HYBRID,
                    page_size=4,
                    page_token=first[0].next_page_token,
                ),
                BOB,
            )
        assert decode(caught.value).code == grpc.StatusCode.INVALID_ARGUMENT

        # cross-tenant scope: NOT_FOUND, same as a project that does not exist
        for pid in (bob_project.project.project_id, 99999):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _pages(
                    search,
                    ps.SearchProjectsRequest(
                        scope=ps.ProjectScope(project_ids=[ids[0], pid]), text="nebula"
                    ),
                )
            decoded = decode(caught.value)
            assert decoded.code == grpc.StatusCode.NOT_FOUND
            assert decoded.message == f"project {pid} not found"

        # empty scope: zero rows, no embedding, no database statement
        statements: list[str] = []
        app.components["store"].add_statement_hook(statements.append)
        embedder.reset()
        empty = await _pages(
            search,
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(), text="nebula", mode=ps.SEARCH_MODE_VECTOR
            ),
        )
        assert len(empty) == 1
        assert list(empty[0].results) == []
        assert embedder.calls == 0
        assert statements == []


@pytest.mark.parametrize(
    ("request_msg", "field"),
    [
        (ps.SearchProjectsRequest(text="x"), "scope"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[0])), "scope.project_ids[0]"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), page_size=5000), "page_size"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), page_size=-1), "page_size"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), max_pages=11), "max_pages"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), mode=ps.SEARCH_MODE_VECTOR), "text"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), text="x" * 2001), "text"),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), min_similarity=2), "min_similarity"),
        (
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(),
                filters=ps.ProjectSearchFilters(
                    metadata=[ps.MetadataFilter(path="a..b", operator=ps.METADATA_OPERATOR_EQ)]
                ),
            ),
            "filters.metadata[0].path",
        ),
        (
            ps.SearchProjectsRequest(
                scope=ps.ProjectScope(),
                filters=ps.ProjectSearchFilters(
                    metadata=[
                        ps.MetadataFilter(
                            path="a",
                            operator=ps.METADATA_OPERATOR_BETWEEN,
                            values=[struct_pb2.Value(number_value=1)],
                        )
                    ]
                ),
            ),
            "filters.metadata[0].values",
        ),
        (ps.SearchProjectsRequest(scope=ps.ProjectScope(), page_token="garbage"), "page_token"),
    ],
)
async def test_bad_requests_name_the_field(
    tmp_path: Path, request_msg: ps.SearchProjectsRequest, field: str
) -> None:
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = ps_grpc.ProjectSearchServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _pages(stub, request_msg, ())
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
        assert field in [f for f, _ in decoded.violations]


async def test_semantic_mode_without_model_is_failed_precondition(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, {"SEARCH_EMBEDDER": "none"}) as app,
        channel_to(app) as channel,
    ):
        index = index_pb2_grpc.IndexServiceStub(channel)
        project = await index.CreateProject(index_pb2.CreateProjectRequest(name="n"))
        pid = project.project.project_id
        await _upsert(index, pid, [_doc("note", "1", "nebula")], ())
        stub = ps_grpc.ProjectSearchServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _pages(
                stub,
                ps.SearchProjectsRequest(
                    scope=ps.ProjectScope(project_ids=[pid]),
                    text="nebula",
                    mode=ps.SEARCH_MODE_HYBRID,
                ),
                (),
            )
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.FAILED_PRECONDITION
        assert decoded.info is not None
        assert decoded.info.reason == "SEMANTIC_SEARCH_UNAVAILABLE"
        fts = await _pages(
            stub,
            ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]), text="nebula"),
            (),
        )
        assert fts[0].total == 1
