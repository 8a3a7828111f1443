"""U+0000 in any request string is refused alike on both stores (issue 17 item 7).

PostgreSQL cannot store NUL in text and SQLite can: NUL gave INTERNAL at 12 of 20 entry
points on PostgreSQL (filters, metadata, row ids, account ids), failed whole upsert streams
there, and was silently stripped from titles and names on PostgreSQL while SQLite kept it.
Now every string field is checked before any work: INVALID_ARGUMENT naming the field, or,
in UpsertDocuments, that one document rejected at its own index.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as apb_grpc
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as ipb_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.support.pg import fresh_database
from tests.support.server import channel_to, running_server
from tests.support.status import decode

NUL = "a\x00b"


def _filters(**fields: object) -> ps.SearchProjectsRequest:
    return ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[1]), text="alpha",
                                    filters=ps.ProjectSearchFilters(**fields))  # type: ignore[arg-type]


def _meta(value: str) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({"team": value})
    return meta


SEARCHES = [
    (ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[1]), text=NUL), "text"),
    (_filters(kinds=["note", NUL]), "filters.kinds[1]"),
    (_filters(categories=[NUL]), "filters.categories[0]"),
    (_filters(note_types=[NUL]), "filters.note_types[0]"),
    (_filters(directory_prefix=NUL), "filters.directory_prefix"),
    (_filters(metadata=[ps.MetadataFilter(
        path="team", operator=ps.METADATA_OPERATOR_EQ,
        values=[struct_pb2.Value(string_value=NUL)])]), "filters.metadata[0].values[0]"),
    (_filters(metadata=[ps.MetadataFilter(path=NUL, operator=ps.METADATA_OPERATOR_EQ,
                                          values=[struct_pb2.Value(string_value="x")])]),
     "filters.metadata[0].path"),
]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def server_env(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    admin = request.getfixturevalue("pg_dsn")
    async with fresh_database(admin) as dsn:
        yield {"SEARCH_DATABASE_URL": dsn}


async def _finish(call: Any) -> None:
    if hasattr(call, "__aiter__"):  # a server stream: read it to its end
        async for _ in call:
            pass
    else:
        await call


async def _invalid(call: Any, field: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _finish(call)
    decoded = decode(caught.value)
    assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT, (field, decoded)
    assert [f for f, _ in decoded.violations] == [field]


async def test_nul_is_refused_in_every_entry_point(
    tmp_path: Path, server_env: dict[str, str]
) -> None:
    async with running_server(tmp_path, server_env) as app, channel_to(app) as channel:
        index = ipb_grpc.IndexServiceStub(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        accounts = apb_grpc.AccountServiceStub(channel)
        await _invalid(index.CreateProject(ipb.CreateProjectRequest(name=NUL)), "name")
        await _invalid(index.CreateProject(ipb.CreateProjectRequest(name="p", external_id=NUL)),
                       "external_id")
        project = (await index.CreateProject(ipb.CreateProjectRequest(name="p"))).project

        async def upsert() -> ipb.UpsertDocumentsResponse:
            async def messages() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
                yield ipb.UpsertDocumentsRequest(project_id=project.project_id, documents=[
                    ipb.Document(kind="note", row_id="ok", body="alpha fine"),
                    ipb.Document(kind="note", row_id=NUL, body="alpha"),
                    ipb.Document(kind="note", row_id="t", title=NUL, body="alpha"),
                    ipb.Document(kind="note", row_id="m", body="alpha", metadata=_meta(NUL)),
                ])
                yield ipb.UpsertDocumentsRequest(project_id=project.project_id, documents=[
                    ipb.Document(kind="note", row_id="later", body="alpha later")])

            reply: ipb.UpsertDocumentsResponse = await index.UpsertDocuments(messages())
            return reply

        reply = await upsert()
        assert (reply.documents_created, reply.documents_rejected) == (2, 3)
        assert {r.index: r.field for r in reply.results
                if r.outcome == ipb.DOCUMENT_OUTCOME_REJECTED} == {
            1: "messages[0].documents[1].row_id", 2: "messages[0].documents[2].title",
            3: "messages[0].documents[3].metadata"}
        await _invalid(index.DeleteDocuments(ipb.DeleteDocumentsRequest(
            project_id=project.project_id, keys=[ipb.DocumentKey(kind="note", row_id=NUL)])),
            "keys[0].row_id")
        for request, field in SEARCHES:
            request.scope.project_ids[:] = [project.project_id]
            await _invalid(search.SearchProjects(request), field)
        await _invalid(accounts.DisconnectAccount(apb.DisconnectAccountRequest(account_id=NUL)),
                       "account_id")
        listed = await index.ListProjects(ipb.ListProjectsRequest())
        assert [p.name for p in listed.projects] == ["p"]  # nothing stored, nothing stripped
