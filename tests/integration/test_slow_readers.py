"""Server streams whose client never reads are ended and bounded (issue 17 item 2).

SearchProjects pages of 100 documents with 60 KB metadata are about 6 MB each. A client that
opens such streams and never reads held a concurrency slot per stream for ever (every other
tenant: CONCURRENT_CALLS_LIMIT) and each stream's pages in server memory. Now a message the
client does not take within SEARCH_STREAM_WRITE_TIMEOUT ends the call and frees its slot,
and what timed-out streams still hold in gRPC's send buffers counts against the tenant's
SEARCH_STALLED_STREAM_BYTES: past it that tenant's new calls are refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ps
from search_client.pb.search.v1 import project_search_pb2_grpc as ps_grpc
from tests.support.pg import fresh_database
from tests.support.serve_process import served_process
from tests.support.status import decode

SLOTS = 256  # the default concurrency limit: as many never-read streams as it allows
MESSAGES_PER_TENANT = 8
WRITE_TIMEOUT = 2.0
DOCUMENTS = 200
PAGE = 100
# The pages in flight stall at about 6 MB each; two are over the budget, so the tenant's
# next call is refused.
STALLED_BUDGET = 8 * 1024 * 1024
# docs/semantics.md: whatever their number, a tenant's unread streams cost the server at
# most about 2 x (2 x 8 pages in flight + the stalled budget): 2 x (96 + 8) MB here.
RSS_BOUND_MB = 300
TOKENS = {"alice": "alice-token", "bob": "bob-token"}
AUTH = ",".join(
    f"{hashlib.sha256(token.encode()).hexdigest()}:{tenant}:write"
    for tenant, token in TOKENS.items()
)


def _meta(i: int) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({f"k{j}": f"{i:06d}-{j:04d}-" + "x" * 580 for j in range(100)})  # ~60 KB
    return meta


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    admin = request.getfixturevalue("pg_dsn")
    loop = asyncio.new_event_loop()
    manager = fresh_database(admin)
    try:
        dsn = loop.run_until_complete(manager.__aenter__())
        yield {"SEARCH_DATABASE_URL": dsn}
    finally:
        loop.run_until_complete(manager.__aexit__(None, None, None))
        loop.close()


@asynccontextmanager
async def _channel(address: str, *, window_grows: bool = True) -> AsyncIterator[grpc.aio.Channel]:
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    if not window_grows:  # the flow-control window stays at 64 KB: not one page gets through
        options.append(("grpc.http2.bdp_probe", 0))
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        yield channel


def _auth(tenant: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {TOKENS[tenant]}"),)


async def _project(channel: grpc.aio.Channel, tenant: str, documents: int) -> int:
    stub = index_pb2_grpc.IndexServiceStub(channel)
    project = await stub.CreateProject(
        index_pb2.CreateProjectRequest(name=f"{tenant}-p"), metadata=_auth(tenant)
    )
    pid = project.project.project_id

    async def messages() -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
        for start in range(0, documents, 50):
            yield index_pb2.UpsertDocumentsRequest(project_id=pid, documents=[
                index_pb2.Document(kind="note", row_id=str(i), title=f"alpha {i}",
                                   body=f"alpha document {i}", metadata=_meta(i))
                for i in range(start, min(documents, start + 50))])

    reply = await stub.UpsertDocuments(messages(), metadata=_auth(tenant), timeout=120)
    assert reply.documents_created == documents
    return pid


def _search(pid: int) -> ps.SearchProjectsRequest:
    return ps.SearchProjectsRequest(scope=ps.ProjectScope(project_ids=[pid]), text="alpha",
                                    mode=ps.SEARCH_MODE_FTS, page_size=PAGE, max_pages=2)


async def _bob_searches(channel: grpc.aio.Channel, pid: int) -> grpc.StatusCode:
    stub = ps_grpc.ProjectSearchServiceStub(channel)
    try:
        async for _ in stub.SearchProjects(_search(pid), metadata=_auth("bob"), timeout=20):
            pass
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_never_read_streams_time_out_free_their_slots_and_stay_bounded(
    tmp_path: Path, store_env: dict[str, str]
) -> None:
    env = store_env | {
        "SEARCH_EMBEDDER": "none",
        "SEARCH_AUTH_TOKENS": AUTH,
        "SEARCH_MAX_CONCURRENT_STREAMS": str(SLOTS),
        "SEARCH_STREAM_WRITE_TIMEOUT": str(WRITE_TIMEOUT),
        "SEARCH_STALLED_STREAM_BYTES": str(STALLED_BUDGET),
        "SEARCH_STREAM_MESSAGES_PER_TENANT": str(MESSAGES_PER_TENANT),
    }
    with served_process(tmp_path, env) as (address, server_pid):
        async with _channel(address, window_grows=False) as alice, _channel(address) as bob:
            alice_project = await _project(alice, "alice", DOCUMENTS)
            bob_project = await _project(bob, "bob", 1)
            assert await _bob_searches(bob, bob_project) == grpc.StatusCode.OK
            baseline = _rss_mb(server_pid)
            stub = ps_grpc.ProjectSearchServiceStub(alice)
            # Never read: the client takes what its flow-control window holds, then stops.
            started = time.monotonic()
            calls = [stub.SearchProjects(_search(alice_project), metadata=_auth("alice"))
                     for _ in range(SLOTS)]
            for call in calls:
                await call.initial_metadata()
            peak = _rss_mb(server_pid)
            held = await _bob_searches(bob, bob_project)
            if time.monotonic() - started < WRITE_TIMEOUT - 0.5:  # (a slow machine: later)
                assert held == grpc.StatusCode.RESOURCE_EXHAUSTED  # every slot is taken
            served_after = None
            while time.monotonic() - started < WRITE_TIMEOUT + 8:
                peak = max(peak, _rss_mb(server_pid))
                if await _bob_searches(bob, bob_project) == grpc.StatusCode.OK:
                    served_after = time.monotonic() - started
                    break
                await asyncio.sleep(0.2)
            assert served_after is not None, "another tenant was never served again"
            assert served_after < WRITE_TIMEOUT + 3
            await asyncio.sleep(max(0.0, started + WRITE_TIMEOUT + 1.5 - time.monotonic()))
            # Alice's stalled streams hold more than her budget: her next call is refused
            # (with RetryInfo), Bob's is not.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.SearchProjects(_search(alice_project), metadata=_auth("alice")).read()
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            status = decode(refused.value)
            assert status.info is not None
            assert status.info.reason == "STALLED_STREAMS_LIMIT"
            assert status.retry_delay is not None
            assert await _bob_searches(bob, bob_project) == grpc.StatusCode.OK
            peak = max(peak, _rss_mb(server_pid))
            # The client reads at last: the pages already sent, then the timeout's status.
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async for _ in calls[0]:
                    pass
            assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            info = decode(ended.value).info
            assert info is not None
            assert info.reason == "STREAM_WRITE_TIMEOUT"
    grown = peak - baseline
    assert grown < RSS_BOUND_MB, f"server RSS grew {grown:.0f} MB for {SLOTS} unread streams"
