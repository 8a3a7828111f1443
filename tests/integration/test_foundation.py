"""The server skeleton: health, reflection, error details, request ids, shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import project_search_pb2, project_search_pb2_grpc
from tests.support.reflection_client import ReflectionClient
from tests.support.server import channel_to, running_server
from tests.support.status import decode

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = {
    "search.v1.AccountService",
    "search.v1.IndexService",
    "search.v1.ProjectSearchService",
    "search.v1.WorkspaceSearchService",
}


async def test_health_serving_and_reflection_lists_every_service(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", *sorted(CONTRACT)):
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        client = ReflectionClient(f"127.0.0.1:{app.port}")
        try:
            services = await asyncio.to_thread(client.list_services)
            assert set(services) >= CONTRACT
            assert "grpc.health.v1.Health" in services
            described = await asyncio.to_thread(client.describe, "search.v1.ProjectSearchService")
            assert [m.name for m in described.methods] == ["SearchProjects"]
            method = described.methods_by_name["SearchProjects"]
            assert method.server_streaming
            scope = method.input_type.fields_by_name["scope"].message_type
            assert scope is not None
            assert scope.name == "ProjectScope"
        finally:
            client.close()


async def test_reflection_only_client_calls_a_method(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app:
        client = ReflectionClient(f"127.0.0.1:{app.port}")
        try:
            replies = await asyncio.to_thread(
                client.invoke,
                "search.v1.ProjectSearchService/SearchProjects",
                {"scope": {"projectIds": []}, "text": "nebula"},
            )
        finally:
            client.close()
        assert replies[0]["page"]["pageNumber"] == 1
        assert replies[0]["page"].get("results", []) == []


async def test_absent_scope_is_invalid_argument_naming_the_field(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = project_search_pb2_grpc.ProjectSearchServiceStub(channel)
        call = stub.SearchProjects(project_search_pb2.SearchProjectsRequest(text="x"))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pass
        decoded = decode(caught.value)
        assert decoded.code == grpc.StatusCode.INVALID_ARGUMENT
        assert decoded.info is not None
        assert decoded.info.domain == "search.v1"
        assert ("scope", "required: send a scope (an empty one searches nothing)") in (
            decoded.violations
        )


async def test_request_id_is_echoed_and_unknown_methods_are_unimplemented(tmp_path: Path) -> None:
    async with running_server(tmp_path) as app, channel_to(app) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        call = stub.Check(health_pb2.HealthCheckRequest(), metadata=(("x-request-id", "abc-1"),))
        await call
        assert ("x-request-id", "abc-1") in tuple(await call.initial_metadata())
        missing: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            "/search.v1.IndexService/NoSuchMethod"
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await missing(b"")
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_sigterm_drains_open_stream_and_exits_zero(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "SEARCH_PORT": "0",
        "SEARCH_DATA_DIR": str(tmp_path),
        "SEARCH_EMBEDDER": "deterministic",
        "SEARCH_GRACE_PERIOD": "3",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, line + (proc.stderr.read() if proc.stderr else "")
        port = int(line.rsplit(":", 1)[1])
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=20)
            assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            statuses = []

            def drain() -> None:
                for reply in watch:
                    statuses.append(reply.status)

            with pytest.raises(grpc.RpcError):  # the watch ends when the server stops
                drain()
            assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 3 + 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
