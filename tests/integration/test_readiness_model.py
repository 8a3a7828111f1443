"""Readiness reflects the embedding model: not ready until it has loaded; liveness meanwhile."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.embeddings.base import EmbeddingError, EmbeddingIdentity
from service.embeddings.deterministic import DeterministicEmbedder
from tests.support.server import channel_to, running_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
FAST_PROBES = {"SEARCH_READINESS_INTERVAL": "0.1"}


class SlowModel:
    """A deterministic embedder whose weights "load" when the test says, failing first."""

    def __init__(self, failures: int = 0) -> None:
        self.inner = DeterministicEmbedder()
        self.loaded = asyncio.Event()
        self.failures = failures
        self.attempts = 0

    @property
    def identity(self) -> EmbeddingIdentity:
        """The wrapped identity."""
        return self.inner.identity

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Delegate."""
        return await self.inner.embed(texts)

    async def warmup(self) -> None:
        """Wait for the test; raise while failures remain."""
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise EmbeddingError("weights file is truncated")
        await self.loaded.wait()

    async def aclose(self) -> None:
        """Nothing held."""
        return None


async def _status(stub: health_pb2_grpc.HealthStub, service: str) -> int:
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    return int(reply.status)


async def _until(stub: health_pb2_grpc.HealthStub, service: str, want: int) -> int:
    for _ in range(100):
        status = await _status(stub, service)
        if status == want:
            return status
        await asyncio.sleep(0.05)
    return status


async def test_not_ready_until_the_model_has_loaded(tmp_path: Path) -> None:
    model = SlowModel()
    async with running_server(tmp_path, FAST_PROBES, embedder=model) as app, (
        channel_to(app)
    ) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert await _status(health, "") == SERVING
        assert await _status(health, "search.v1.ProjectSearchService") == NOT_SERVING
        model.loaded.set()
        assert await _until(health, "search.v1.ProjectSearchService", SERVING) == SERVING


async def test_a_failed_load_is_retried_by_the_probe(tmp_path: Path) -> None:
    model = SlowModel(failures=2)
    model.loaded.set()
    async with running_server(tmp_path, FAST_PROBES, embedder=model) as app, (
        channel_to(app)
    ) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert await _until(health, "search.v1.IndexService", SERVING) == SERVING
        assert model.attempts == 3
