"""Authentication, roles, loopback-only default, TLS and mutual TLS, metrics."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from service.server import build_app
from service.settings import Settings, SettingsError
from tests.support.certs import make_certs
from tests.support.server import channel_to, running_server
from tests.support.status import decode

READ_TOKEN = "read-token-123"
WRITE_TOKEN = "write-token-456"


def _entry(token: str, tenant: str, role: str) -> str:
    return f"{hashlib.sha256(token.encode()).hexdigest()}:{tenant}:{role}"


AUTH_ENV = {
    "SEARCH_AUTH_TOKENS": ",".join(
        [_entry(READ_TOKEN, "acme", "read"), _entry(WRITE_TOKEN, "acme", "write")]
    )
}


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback URL
        text: str = response.read().decode()
    return text


def _bearer(token: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {token}"),)


async def test_tokens_roles_and_errors(tmp_path: Path) -> None:
    async with running_server(tmp_path, AUTH_ENV) as app, channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.ListProjects(index_pb2.ListProjectsRequest())
        assert decode(missing.value).code == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await stub.ListProjects(index_pb2.ListProjectsRequest(), metadata=_bearer("nope"))
        assert decode(wrong.value).code == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.CreateProject(
                index_pb2.CreateProjectRequest(name="x"), metadata=_bearer(READ_TOKEN)
            )
        info = decode(denied.value)
        assert info.code == grpc.StatusCode.PERMISSION_DENIED
        assert info.info is not None
        assert info.info.metadata["requiredRole"] == "write"
        created = await stub.CreateProject(
            index_pb2.CreateProjectRequest(name="x"), metadata=_bearer(WRITE_TOKEN)
        )
        listed = await stub.ListProjects(
            index_pb2.ListProjectsRequest(), metadata=_bearer(READ_TOKEN)
        )
        assert [p.project_id for p in listed.projects] == [created.project.project_id]
        # health stays open for probes
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_without_tokens_only_loopback_binds(tmp_path: Path) -> None:
    settings = Settings.from_mapping(
        {
            "SEARCH_HOST": "0.0.0.0",
            "SEARCH_PORT": "0",
            "SEARCH_DATA_DIR": str(tmp_path),
            "SEARCH_EMBEDDER": "none",
        }
    )
    with pytest.raises(SettingsError, match="only binds loopback"):
        await build_app(settings)


async def test_tls_and_mutual_tls(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    ca = certs.ca.read_bytes()
    env = {
        "SEARCH_TLS_CERT_FILE": str(certs.server_cert),
        "SEARCH_TLS_KEY_FILE": str(certs.server_key),
    }
    async with running_server(tmp_path / "tls", env) as app:
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(f"localhost:{app.port}", creds) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    env["SEARCH_TLS_CLIENT_CA_FILE"] = str(certs.ca)
    async with running_server(tmp_path / "mtls", env) as app:
        target = f"localhost:{app.port}"
        without = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(target, without) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=5
                )
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with_cert = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=certs.client_key.read_bytes(),
            certificate_chain=certs.client_cert.read_bytes(),
        )
        async with grpc.aio.secure_channel(target, with_cert) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_metrics_count_calls_by_method_and_code(tmp_path: Path) -> None:
    async with running_server(tmp_path, {"SEARCH_METRICS_PORT": "0"}) as app:
        async with channel_to(app) as channel:
            stub = index_pb2_grpc.IndexServiceStub(channel)
            await stub.ListProjects(index_pb2.ListProjectsRequest())
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.DeleteProject(index_pb2.DeleteProjectRequest(project_id=999))
        text = await asyncio.to_thread(_fetch, f"http://127.0.0.1:{app.metrics_port}/metrics")
    assert (
        'search_rpc_calls_total{code="OK",method="/search.v1.IndexService/ListProjects"} 1.0'
        in text
    )
    assert 'code="NOT_FOUND",method="/search.v1.IndexService/DeleteProject"' in text
    assert "search_rpc_duration_seconds_bucket" in text
