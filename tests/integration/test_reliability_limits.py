"""Limits through the real server: concurrent calls, the per-tenant search rate, message sizes.

Each limit answers RESOURCE_EXHAUSTED with an ErrorInfo naming it (and RetryInfo where waiting
helps), releases what it counted, and never touches health checks or other tenants.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import MethodDescriptor
from grpc_health.v1 import health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import accounts_pb2 as apb
from search_client.pb.search.v1 import accounts_pb2_grpc as agrpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import index_pb2 as ipb
from search_client.pb.search.v1 import index_pb2_grpc as igrpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.suite import FakeProviders
from service.server import SERVICES
from tests.support.reliability.world import server_env
from tests.support.server import running_server
from tests.support.status import decode

TOKENS = {"alice-limit-token": "alice", "bob-limit-token": "bob"}
AUTH = ",".join(f"{hashlib.sha256(t.encode()).hexdigest()}:{tenant}:admin"
                for t, tenant in TOKENS.items())
ALICE = (("authorization", "Bearer alice-limit-token"),)
BOB = (("authorization", "Bearer bob-limit-token"),)
SLOW_QUERY = wpb.SearchWorkspaceRequest(
    queries=[wpb.NativeQuery(provider=cpb.PROVIDER_SLACK, text="deploy")]
)


async def _drain(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    async for _ in call:
        pass


async def test_concurrent_calls_beyond_the_limit_are_refused_and_released(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    env = server_env(fakes) | {"SEARCH_MAX_CONCURRENT_STREAMS": "4"}
    fakes.slack.server.latency = 1.0
    async with running_server(tmp_path, env) as app:
        target = f"127.0.0.1:{app.port}"
        # gRPC shares one connection between these channels: the limit holds on it too.
        async with grpc.aio.insecure_channel(target) as busy, grpc.aio.insecure_channel(
            target
        ) as other:
            await agrpc.AccountServiceStub(busy).ConnectAccount(apb.ConnectAccountRequest(
                provider=cpb.PROVIDER_SLACK, display_name="s",
                credentials=apb.Credentials(token=fakes.slack.token)))
            held = [asyncio.create_task(_drain(wgrpc.WorkspaceSearchServiceStub(busy)
                                               .SearchWorkspace(SLOW_QUERY)))
                    for _ in range(4)]
            while fakes.slack.requests["/api/assistant.search.context"] < 4:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            index = igrpc.IndexServiceStub(other)
            for _ in range(10):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await index.ListProjects(ipb.ListProjectsRequest())
                decoded = decode(caught.value)
                assert decoded.code == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert decoded.info is not None
                assert decoded.info.reason == "CONCURRENT_CALLS_LIMIT"
                assert decoded.info.metadata["limit"] == "4"
            probe = await health_pb2_grpc.HealthStub(other).Check(
                health_pb2.HealthCheckRequest(service="search.v1.IndexService"))
            assert probe.status == health_pb2.HealthCheckResponse.SERVING  # probes pass
            await asyncio.gather(*held)
            fakes.slack.server.latency = 0.0
            again = [_drain(wgrpc.WorkspaceSearchServiceStub(other).SearchWorkspace(SLOW_QUERY))
                     for _ in range(4)]
            await asyncio.gather(*again)  # every slot came back


async def test_the_search_rate_is_per_tenant_with_retry_info(tmp_path: Path) -> None:
    env = {"SEARCH_AUTH_TOKENS": AUTH, "SEARCH_SEARCH_RATE_PER_TENANT": "2",
           "SEARCH_SEARCH_BURST_PER_TENANT": "3"}
    empty = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(), text="x")
    async with running_server(tmp_path, env) as app, grpc.aio.insecure_channel(
        f"127.0.0.1:{app.port}"
    ) as channel:
        search = pgrpc.ProjectSearchServiceStub(channel)
        for _ in range(3):
            await _drain(search.SearchProjects(empty, metadata=ALICE))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _drain(search.SearchProjects(empty, metadata=ALICE))
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert decoded.info is not None
        assert decoded.info.reason == "TENANT_RATE_LIMITED"
        assert decoded.info.metadata["limit"] == "2/s"
        assert decoded.retry_delay is not None
        assert 0 < decoded.retry_delay <= 0.5
        with pytest.raises(grpc.aio.AioRpcError) as workspace:  # the same bucket
            await _drain(wgrpc.WorkspaceSearchServiceStub(channel).SearchWorkspace(
                SLOW_QUERY, metadata=ALICE))
        assert decode(workspace.value).code == grpc.StatusCode.RESOURCE_EXHAUSTED
        await igrpc.IndexServiceStub(channel).ListProjects(ipb.ListProjectsRequest(),
                                                           metadata=ALICE)  # not a search
        await _drain(search.SearchProjects(empty, metadata=BOB))  # another tenant's bucket
        await asyncio.sleep(decoded.retry_delay + 0.05)
        await _drain(search.SearchProjects(empty, metadata=ALICE))  # waiting helped


def _oversized(size: int) -> bytes:
    """A message of `size` bytes in an unknown field (what a decoder would skip)."""
    payload = b"x" * size
    length = bytearray()
    value = len(payload)
    while True:
        byte, value = value & 0x7F, value >> 7
        length.append(byte | (0x80 if value else 0))
        if not value:
            break
    return bytes([0xFA, 0x3E]) + bytes(length) + payload  # field 999, length-delimited


async def _raw(channel: grpc.aio.Channel, method: MethodDescriptor, data: bytes) -> None:
    """Send bytes as the request of any method."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    raw: Any = channel  # no serializers: the request is bytes
    if method.client_streaming:
        await raw.stream_unary(path)(iter([data]))
    elif method.server_streaming:
        async for _ in raw.unary_stream(path)(data):
            pass
    else:
        await raw.unary_unary(path)(data)


async def test_messages_over_the_size_limit_are_refused_both_ways(tmp_path: Path) -> None:
    from google.protobuf import descriptor_pool

    limit = 64 * 1024
    methods = [m for name in SERVICES
               for m in descriptor_pool.Default().FindServiceByName(name).methods]
    async with (
        running_server(tmp_path, {"SEARCH_MAX_MESSAGE_BYTES": str(limit)}) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel,
    ):
        for method in methods:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _raw(channel, method, _oversized(limit + 1))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, method.name
        index = igrpc.IndexServiceStub(channel)
        project = await index.CreateProject(ipb.CreateProjectRequest(name="big"))
        pid = project.project.project_id

        async def docs() -> AsyncIterator[ipb.UpsertDocumentsRequest]:
            for i in range(4):  # each message fits; a page holding all of them does not
                meta = struct_pb2.Struct()
                meta.update({"blob": "y" * 20_000})
                yield ipb.UpsertDocumentsRequest(project_id=pid, documents=[ipb.Document(
                    kind="note", row_id=str(i), title=f"nebula {i}", metadata=meta)])

        reply = await index.UpsertDocuments(docs())
        assert reply.documents_created == 4
        request = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(project_ids=[pid]),
                                            text="nebula")
        # A page holding all of them would not fit: it is cut by bytes and says has_more
        # (issue 17 item 8; tests/integration/test_big_responses.py pages through).
        pages = [m.page async for m in
                 pgrpc.ProjectSearchServiceStub(channel).SearchProjects(request)]
        assert pages[0].has_more
        assert 0 < len(pages[0].results) < 4
        probe = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert probe.status == health_pb2.HealthCheckResponse.SERVING
