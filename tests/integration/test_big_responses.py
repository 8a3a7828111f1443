"""Every response fits the message limit, or is refused with ErrorInfo (issue 17 item 8).

page_size (up to 1000) x metadata (up to 64 KiB) can exceed SEARCH_MAX_MESSAGE_BYTES: gRPC
core then ended the stream RESOURCE_EXHAUSTED without ErrorInfo and the access log said OK.
Now a SearchProjects page ends before the first result that would not fit, says `has_more`,
and its token (or the stream's next page) continues at that result, so nothing is skipped;
an UpsertDocuments reply lists the outcomes that fit and counts every document. Any other
response over the limit is refused by the server itself: RESOURCE_EXHAUSTED with ErrorInfo
RESPONSE_TOO_LARGE, and the access log says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.integration.test_grpcurl_docs import GRPCURL
from tests.support.pg import fresh_database
from tests.support.server import running_server
from tests.support.status import decode

LIMIT = 1024 * 1024  # the server's message limit in these tests
DOCUMENTS = 120


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def server_env(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    base = {"SEARCH_EMBEDDER": "none", "SEARCH_MAX_MESSAGE_BYTES": str(LIMIT)}
    if request.param == "sqlite":
        yield base
        return
    admin = request.getfixturevalue("pg_dsn")
    async with fresh_database(admin) as dsn:
        yield base | {"SEARCH_DATABASE_URL": dsn}


def _meta(i: int) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({f"k{j}": f"{i:05d}-{j:03d}-" + "y" * 580 for j in range(100)})  # ~60 KB
    return meta


async def _corpus(channel: grpc.aio.Channel) -> int:
    stub = index_pb2_grpc.IndexServiceStub(channel)
    pid = (await stub.CreateProject(index_pb2.CreateProjectRequest(name="big"))).project.project_id

    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        for i in range(DOCUMENTS):  # one document a message: each fits the 1 MiB limit
            yield index_pb2.UpsertDocumentsRequest(project_id=pid, documents=[
                index_pb2.Document(kind="note", row_id=f"r{i:03d}", title=f"alpha {i}",
                                   body=f"alpha body {i}", metadata=_meta(i))])

    reply = await stub.UpsertDocuments(messages(), timeout=120)
    assert reply.documents_created == DOCUMENTS
    return pid


def _request(pid: int, **fields: object) -> ps.SearchProjectsRequest:
    return ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]), text="alpha",
                                    mode=ps.SEARCH_MODE_FTS, page_size=100,
                                    **fields)  # type: ignore[arg-type]


def _channel(port: int) -> grpc.aio.Channel:
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    return grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)


async def test_pages_are_cut_by_bytes_and_nothing_is_skipped(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    async with running_server(tmp_path, server_env) as app, _channel(app.port) as channel:
        pid = await _corpus(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        # By tokens, one page a call.
        seen: list[str] = []
        token, numbers = "", []
        while True:
            messages = [m async for m in search.SearchProjects(
                _request(pid, page_token=token), timeout=60)]
            assert len(messages) == 1
            page = messages[0].page
            assert messages[0].ByteSize() <= LIMIT
            assert page.total == DOCUMENTS
            numbers.append(page.page_number)
            seen += [r.row_id for r in page.results]
            if not page.has_more:
                assert not page.next_page_token
                break
            assert page.results
            assert page.next_page_token
            token = page.next_page_token
        assert len(numbers) > 2, "every page of 100 x 60 KB must have been cut"
        assert numbers == list(range(1, len(numbers) + 1))
        assert sorted(seen) == [f"r{i:03d}" for i in range(DOCUMENTS)]
        # In one stream: the same results in the same order.
        streamed = [r.row_id async for m in search.SearchProjects(
            _request(pid, max_pages=10), timeout=60) for r in m.page.results]
        assert streamed == seen


async def test_a_response_over_the_limit_is_refused_with_error_info(
    tmp_path: Path, server_env: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="search.access")
    env = server_env | {"SEARCH_MAX_MESSAGE_BYTES": str(64 * 1024)}
    async with running_server(tmp_path, env) as app, _channel(app.port) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        for i in range(400):  # each status names its project: ~80 KB for all of them
            await stub.CreateProject(index_pb2.CreateProjectRequest(
                name=f"p{i}", external_id=f"{i:04d}-" + "x" * 190))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest(), timeout=60)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    info = decode(caught.value).info
    assert info is not None
    assert info.reason == "RESPONSE_TOO_LARGE"
    assert info.metadata["limit"] == str(64 * 1024)
    assert info.metadata["setting"] == "SEARCH_MAX_MESSAGE_BYTES"
    codes = [json.loads(r.getMessage())["code"] for r in caplog.records
             if r.name == "search.access" and "GetIndexStatus" in r.getMessage()]
    assert codes == ["RESOURCE_EXHAUSTED"]


async def test_default_clients_read_every_page_on_the_default_settings(tmp_path: Path) -> None:
    """Generated stubs and grpcurl read at most 4 MiB a message unless told otherwise. With a
    16 MiB response limit a page of 100 x 60 KB (6 MB) reached them and was refused by the
    client ("Received message larger than max"); the default response limit is now 4 MiB."""
    env = {"SEARCH_EMBEDDER": "none"}  # every message limit at its default
    async with running_server(tmp_path, env) as app:
        async with _channel(app.port) as channel:
            pid = await _corpus(channel)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel:  # defaults
            search = ps_grpc.ProjectSearchServiceStub(channel)
            messages = [m async for m in search.SearchProjects(
                _request(pid, max_pages=10), timeout=60)]
        assert all(m.ByteSize() <= 4 * 1024 * 1024 for m in messages)
        rows = [r.row_id for m in messages for r in m.page.results]
        assert len(messages) > 1, "a page of 100 x 60 KB is cut"
        assert sorted(rows) == [f"r{i:03d}" for i in range(DOCUMENTS)]
        if GRPCURL is None:
            return
        request = json.dumps({"scope": {"projectIds": [pid]}, "text": "alpha",
                              "mode": "SEARCH_MODE_FTS", "pageSize": 100})
        process = await asyncio.create_subprocess_exec(  # grpcurl's default -max-msg-sz: 4 MB
            GRPCURL, "-plaintext", "-d", request, f"127.0.0.1:{app.port}",
            "search.v1.ProjectSearchService/SearchProjects",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
        page = json.loads(out)["page"]
        assert page["hasMore"]
        assert [r["rowId"] for r in page["results"]] == rows[: len(page["results"])]


async def test_an_upsert_reply_lists_what_fits_and_counts_everything(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    """UpsertDocuments lists each document's outcome for the first 10,000 documents. Row ids
    of 256 CJK characters (768 bytes, valid) made 10,000 entries ~8 MB, over the response
    limit: the whole reply was refused, after the documents were written. Now the list stops
    where the message is full (`results_truncated`) and the counts still cover every document;
    a rejected document's over-long kind and row id are echoed cut."""
    limit = 64 * 1024
    env = server_env | {"SEARCH_MAX_RESPONSE_BYTES": str(limit)}  # under its message limit
    documents = 300
    async with running_server(tmp_path, env) as app, _channel(app.port) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        created = await stub.CreateProject(index_pb2.CreateProjectRequest(name="long ids"))
        pid = created.project.project_id

        async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
            yield index_pb2.UpsertDocumentsRequest(project_id=pid, documents=[
                index_pb2.Document(kind="note", row_id=f"{i:04d}" + "\u6f22" * 252,
                                   title=f"alpha {i}", body="alpha") for i in range(documents)])
            yield index_pb2.UpsertDocumentsRequest(project_id=pid, documents=[
                index_pb2.Document(kind="k" * 30_000, row_id="r" * 30_000, title="alpha",
                                   body="alpha")])

        reply = await stub.UpsertDocuments(messages(), timeout=60)
        assert reply.ByteSize() <= limit
        assert reply.documents_received == documents + 1
        assert reply.documents_created == documents
        assert reply.documents_rejected == 1
        assert reply.results_truncated
        assert 0 < len(reply.results) < documents
        assert [r.index for r in reply.results] == list(range(len(reply.results)))
        status = await stub.GetIndexStatus(index_pb2.GetIndexStatusRequest(project_ids=[pid]))
        assert status.projects[0].documents == documents

        async def rejected() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
            yield index_pb2.UpsertDocumentsRequest(project_id=pid, documents=[
                index_pb2.Document(kind="k" * 30_000, row_id="r" * 30_000, title="alpha",
                                   body="alpha")])

        (result,) = (await stub.UpsertDocuments(rejected(), timeout=60)).results
        assert result.outcome == index_pb2.DOCUMENT_OUTCOME_REJECTED
        assert len(result.kind) < 300
        assert result.kind.endswith("...")
        assert len(result.row_id) < 300
        assert result.row_id.endswith("...")
