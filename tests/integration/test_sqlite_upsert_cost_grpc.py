"""SQLite upserts cost O(batch) and leave the reader threads alone, through the real server
(issue 17 item 4).

The per-key hash lookup of an upsert was planned as a scan of the project's documents per
key, on the reader threads: one 500-document batch took 0.41 s into an empty project and
12.5 s at 33,000 documents, and another tenant's search waited 60.7 s. With that plan
(`JOIN` for `CROSS JOIN` in `reads.DOCUMENT_HASHES`) loading the 20,000 documents below
takes 171 s (the test fails at its 120 s deadline) and a batch at 20,000 takes 9 s against
0.12 s into an empty project; with the lookups on the reader threads as well, eight
concurrent batches into 6,000 documents held the other tenant's search for 15 s.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.support.server import channel_to, running_server

BIG = 20_000
BATCH = 500
STREAMS = 8  # more than the SQLite store has reader threads (4 for searches + 1)
TOKENS = {"alice": "alice-token", "bob": "bob-token"}
AUTH = ",".join(
    f"{hashlib.sha256(token.encode()).hexdigest()}:{tenant}:write"
    for tenant, token in TOKENS.items()
)


def _auth(tenant: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {TOKENS[tenant]}"),)


async def _messages(
    project_id: int, start: int, count: int
) -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
    for first in range(start, start + count, BATCH):
        yield index_pb2.UpsertDocumentsRequest(project_id=project_id, documents=[
            index_pb2.Document(kind="note", row_id=f"r{i}", body=f"w{i % 97} v{i % 89}")
            for i in range(first, first + BATCH)])


async def _upsert(
    index: index_pb2_grpc.IndexServiceAsyncStub, project_id: int, start: int, count: int,
    seconds: float = 60,
) -> float:
    """Seconds to upsert documents r<start>.. r<start + count - 1>, all new."""
    started = time.monotonic()
    reply = await index.UpsertDocuments(_messages(project_id, start, count),
                                        metadata=_auth("alice"), timeout=seconds)
    assert reply.documents_created == count
    return time.monotonic() - started


async def _project(index: index_pb2_grpc.IndexServiceAsyncStub, tenant: str, name: str) -> int:
    created = await index.CreateProject(index_pb2.CreateProjectRequest(name=name),
                                        metadata=_auth(tenant))
    return created.project.project_id


async def _search_seconds(search: ps_grpc.ProjectSearchServiceAsyncStub, project_id: int) -> float:
    request = ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[project_id]),
                                       text="comet", mode=ps.SEARCH_MODE_FTS, page_size=3)
    started = time.monotonic()
    pages = [m.page async for m in search.SearchProjects(request, metadata=_auth("bob"),
                                                        timeout=30)]
    assert pages[0].results
    return time.monotonic() - started


async def test_a_batch_into_a_big_project_costs_what_it_costs_into_an_empty_one(
    tmp_path: Path,
) -> None:
    env = {"SEARCH_EMBEDDER": "none", "SEARCH_AUTH_TOKENS": AUTH}
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        index = index_pb2_grpc.IndexServiceStub(channel)
        search = ps_grpc.ProjectSearchServiceStub(channel)
        big, empty = await _project(index, "alice", "big"), await _project(index, "alice", "e")
        bob = await _project(index, "bob", "small")
        small = index_pb2.UpsertDocumentsRequest(project_id=bob, documents=[
            index_pb2.Document(kind="note", row_id="1", body="comet tail")])
        await index.UpsertDocuments(iter([small]), metadata=_auth("bob"), timeout=30)
        # With the per-key scan this load alone takes minutes: fail at the deadline instead.
        await _upsert(index, big, 0, BIG, seconds=120)
        into_empty = await _upsert(index, empty, 0, BATCH)
        into_big = await _upsert(index, big, BIG, BATCH)
        # Batches into the big project while the other tenant searches.
        writes = [asyncio.create_task(_upsert(index, big, BIG + BATCH * (1 + n), BATCH))
                  for n in range(STREAMS)]
        waits = [await _search_seconds(search, bob)]
        while not all(task.done() for task in writes):
            waits.append(await _search_seconds(search, bob))
        concurrent = await asyncio.gather(*writes)
        count = await index.GetIndexStatus(index_pb2.GetIndexStatusRequest(project_ids=[big]),
                                           metadata=_auth("alice"))
    assert into_big < max(5 * into_empty, 1.0), (into_big, into_empty)
    assert max(concurrent) < STREAMS * max(5 * into_empty, 1.0), (concurrent, into_empty)
    assert max(waits) < 1.0, f"bob's search waited {max(waits):.2f} s behind alice's upserts"
    assert count.projects[0].documents == BIG + BATCH * (1 + STREAMS)
