"""UpsertDocuments through the real server: idempotent, incremental, model changes, bad input."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from service.api.interceptor import ServiceInterceptor
from service.api.unimplemented import unimplemented_servicer
from service.auth import Authenticator
from service.embeddings.base import CountingEmbedder, EmbeddingIdentity
from service.embeddings.deterministic import DeterministicEmbedder
from tests.support.server import channel_to, running_server
from tests.support.status import decode

LONG = "\n\n".join(f"## Section {i}\n\n" + ("nebula dust and gas " * 60) for i in range(4))


class RenamedEmbedder(DeterministicEmbedder):
    """The same vectors under another model name: a configured-model change."""

    @property
    def identity(self) -> EmbeddingIdentity:
        return EmbeddingIdentity("other-model", 384)


def _docs(bodies: Sequence[str]) -> list[index_pb2.Document]:
    return [
        index_pb2.Document(kind="note", row_id=str(i), title=f"doc {i}", body=body)
        for i, body in enumerate(bodies)
    ]


async def _upsert(
    stub: index_pb2_grpc.IndexServiceAsyncStub,
    project_id: int,
    *batches: Sequence[index_pb2.Document],
) -> index_pb2.UpsertDocumentsResponse:
    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        for batch in batches:
            yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=batch)

    reply: index_pb2.UpsertDocumentsResponse = await stub.UpsertDocuments(messages())
    return reply


async def test_second_upsert_embeds_nothing_and_changes_embed_only_their_chunks(
    tmp_path: Path,
) -> None:
    embedder = CountingEmbedder(DeterministicEmbedder(384))
    bodies = [LONG, "short note about comets", "another note about stars"]
    async with running_server(tmp_path, embedder=embedder) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        first = await _upsert(stub, project.project_id, _docs(bodies))
        assert first.documents_created == 3
        assert first.chunks_written > 3
        # identical chunk texts are embedded once
        assert 0 < first.chunks_embedded == embedder.text_count <= first.chunks_written

        embedder.reset()
        again = await _upsert(stub, project.project_id, _docs(bodies))
        assert again.documents_unchanged == 3
        assert (again.chunks_written, again.chunks_embedded, embedder.calls) == (0, 0, 0)

        embedder.reset()
        changed = await _upsert(
            stub, project.project_id, _docs([LONG, "short note about comets!", bodies[2]])
        )
        assert (changed.documents_updated, changed.documents_unchanged) == (1, 2)
        assert changed.chunks_embedded == 1
        assert embedder.texts == ["doc 1\n\nshort note about comets!"]

        status = await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest())
        (project_status,) = status.projects
        assert project_status.documents == 3
        assert project_status.chunks_needing_embedding == 0

    # The same data under another configured model: old vectors no longer count.
    async with (
        running_server(tmp_path, embedder=RenamedEmbedder(384)) as app,
        channel_to(app) as channel,
    ):
        stub = index_pb2_grpc.IndexServiceStub(channel)
        status = await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest())
        (project_status,) = status.projects
        assert project_status.chunks_needing_embedding == project_status.chunks
        configured = [e for e in project_status.embeddings if e.configured]
        assert all(e.chunks_ready == 0 for e in configured)
        assert status.configured_embedding.model == "other-model"


async def test_bad_documents_are_reported_and_the_rest_is_kept(tmp_path: Path) -> None:
    bad_meta = struct_pb2.Struct()
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        batch = [
            index_pb2.Document(kind="note", row_id="ok-1", body="fine"),
            index_pb2.Document(kind="Bad Kind", row_id="x", body="rejected"),
            index_pb2.Document(kind="note", row_id="", body="no id"),
            index_pb2.Document(kind="note", row_id="big", body="x" * (1024 * 1024 + 1)),
            index_pb2.Document(kind="note", row_id="ok-2", body="also fine", metadata=bad_meta),
        ]
        reply = await _upsert(
            stub,
            project.project_id,
            batch[:3],
            batch[3:],
        )
        assert (reply.documents_received, reply.documents_created) == (5, 2)
        assert reply.documents_rejected == 3
        rejected = {
            r.index: r.field
            for r in reply.results
            if r.outcome == index_pb2.DOCUMENT_OUTCOME_REJECTED
        }
        assert rejected == {
            1: "messages[0].documents[1].kind",
            2: "messages[0].documents[2].row_id",
            3: "messages[1].documents[0].body",
        }
        other = await _upsert(stub, 987654, [index_pb2.Document(kind="note", row_id="1")])
        assert other.results[0].field == "messages[0].project_id"


async def test_a_method_not_built_is_unimplemented_with_error_info() -> None:
    server = grpc.aio.server(interceptors=[ServiceInterceptor(Authenticator(""), 10)])
    descriptor = index_pb2.DESCRIPTOR.services_by_name["IndexService"]
    index_pb2_grpc.add_IndexServiceServicer_to_server(
        unimplemented_servicer(index_pb2_grpc.IndexServiceServicer, descriptor), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = index_pb2_grpc.IndexServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.ListProjects(index_pb2.ListProjectsRequest())
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.UNIMPLEMENTED
        assert decoded.info is not None
        assert decoded.info.reason == "NOT_IMPLEMENTED"
        assert decoded.info.metadata["method"] == "/search.v1.IndexService/ListProjects"
    finally:
        await server.stop(0)


async def test_a_trailing_newline_is_not_part_of_a_valid_id_or_kind(tmp_path: Path) -> None:
    """`$` in a pattern matches before a final newline: "notes\\n" passed as "notes"."""
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.CreateProject(index_pb2.CreateProjectRequest(name="p", external_id="n\n"))
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [field for field, _ in decoded.violations] == ["external_id"]
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        reply = await _upsert(stub, project.project_id,
                              [index_pb2.Document(kind="note\n", row_id="1", body="x")])
        assert reply.documents_rejected == 1
        assert reply.results[0].field == "messages[0].documents[0].kind"


async def test_index_status_of_every_project_lists_at_most_1000_and_says_so(
    tmp_path: Path,
) -> None:
    from service.context import DEFAULT_TENANT

    async with running_server(tmp_path) as app, channel_to(app) as channel:
        store = app.components["store"]
        for i in range(1005):
            await store.create_project(DEFAULT_TENANT, f"p{i}", f"project {i}")
        stub = index_pb2_grpc.IndexServiceStub(channel)
        every = await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest())
        assert len(every.projects) == 1000
        assert every.truncated
        ids = [p.project_id for p in every.projects]
        assert ids == sorted(ids)  # the lowest ids
        rest = await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest(
            project_ids=range(ids[-1] + 1, ids[-1] + 6)))
        assert (len(rest.projects), rest.truncated) == (5, False)


async def test_the_sqlite_database_is_private_to_its_owner(tmp_path: Path) -> None:
    """Like page_token.key and credentials.key beside it: it holds sealed credentials."""
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))
        modes = {f.name: f.stat().st_mode for f in os.scandir(tmp_path)
                 if f.name.startswith("search.sqlite3")}
    assert modes
    for name, mode in modes.items():  # the database and its -wal / -shm files
        assert mode & 0o077 == 0, (name, oct(mode))


async def _access_codes(caplog: pytest.LogCaptureFixture, method: str) -> list[str]:
    import json

    await asyncio.sleep(0.2)  # the handler's cancellation is logged just after the client's end
    return [json.loads(r.getMessage())["code"] for r in caplog.records
            if r.name == "search.access" and method in r.getMessage()]


async def test_the_access_log_records_a_passed_deadline_as_deadline_exceeded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="search.access")

    async def stalled() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        await asyncio.sleep(30)  # the client never sends: the server waits in the stream
        yield index_pb2.UpsertDocumentsRequest()

    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.UpsertDocuments(stalled(), timeout=0.3)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert await _access_codes(caplog, "UpsertDocuments") == ["DEADLINE_EXCEEDED"]


def _nested(levels: int, *, lists: bool = False) -> dict[str, Any]:
    """Metadata `levels` objects (or one object around lists) deep."""
    value: Any = "leaf"
    for _ in range(levels - 1):
        value = [value] if lists else {"k": value}
    return {"top": value}


@pytest.mark.parametrize("lists", [False, True])
async def test_metadata_nests_16_deep_and_every_result_decodes(
    tmp_path: Path, lists: bool
) -> None:
    """Deeper metadata was stored, then no client could decode a search returning it."""
    from search_client.pb.search.v1 import project_search_pb2 as ps
    from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc

    def doc(row_id: str, levels: int) -> index_pb2.Document:
        meta = struct_pb2.Struct()
        meta.update(_nested(levels, lists=lists))
        return index_pb2.Document(kind="note", row_id=row_id, body="deep nebula", metadata=meta)

    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        reply = await _upsert(stub, project.project_id, [doc("ok", 16), doc("deep", 17)])
        assert reply.documents_created == 1
        assert [(r.index, r.field) for r in reply.results
                if r.outcome == index_pb2.DOCUMENT_OUTCOME_REJECTED] == [
            (1, "messages[0].documents[1].metadata")]
        search = ps_grpc.ProjectSearchServiceStub(channel)
        pages = [m.page async for m in search.SearchProjects(ps.SearchProjectsRequest(
            scope=ps.ProjectScope(project_ids=[project.project_id]), text="nebula",
            mode=ps.SEARCH_MODE_FTS))]
        assert [r.row_id for r in pages[0].results] == ["ok"]  # decoded by the stock client


async def test_invalid_utf8_in_one_document_rejects_that_document_only(tmp_path: Path) -> None:
    """It used to reject its whole message as one document: siblings lost, indices shifted."""
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        first = index_pb2.UpsertDocumentsRequest(project_id=project.project_id, documents=[
            index_pb2.Document(kind="note", row_id="a", body="alpha"),
            index_pb2.Document(kind="note", row_id="b", title="MARK", body="bravo"),
            index_pb2.Document(kind="note", row_id="c", body="charlie"),
        ]).SerializeToString().replace(b"MARK", b"\xff\xfeMA")
        second = index_pb2.UpsertDocumentsRequest(project_id=project.project_id, documents=[
            index_pb2.Document(kind="note", row_id="d", body="delta")]).SerializeToString()
        upsert: Any = channel.stream_unary(
            "/search.v1.IndexService/UpsertDocuments",
            response_deserializer=index_pb2.UpsertDocumentsResponse.FromString,
        )
        reply = await upsert(iter([first, second]))
        assert (reply.documents_received, reply.documents_created,
                reply.documents_rejected) == (4, 3, 1)
        outcomes = {r.index: (r.row_id, r.outcome, r.field) for r in reply.results}
        assert outcomes[1] == ("", index_pb2.DOCUMENT_OUTCOME_REJECTED,
                               "messages[0].documents[1].title")
        assert {i: o[0] for i, o in outcomes.items() if i != 1} == {0: "a", 2: "c", 3: "d"}


async def test_an_upsert_response_stays_bounded_for_any_stream_length(tmp_path: Path) -> None:
    """One result per document of a long stream grew past the 16 MiB message limit and ended
    RESOURCE_EXHAUSTED after the documents were committed (issue 17 item 8)."""
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        project = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="p"))).project
        # Rejected documents (bad kind): the stream is long, nothing needs writing.
        batch = [index_pb2.Document(kind="Bad Kind", row_id=f"r{i}" * 20) for i in range(500)]
        reply = await _upsert(stub, project.project_id, *([batch] * 21))
        assert (reply.documents_received, reply.documents_rejected) == (10_500, 10_500)
        assert len(reply.results) == 10_000
        assert reply.results_truncated
        assert reply.results[-1].index == 9_999
        small = await _upsert(stub, project.project_id, batch[:3])
        assert (len(small.results), small.results_truncated) == (3, False)
