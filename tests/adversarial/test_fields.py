"""Field fuzzing of every RPC method on both stores: no INTERNAL, a few seconds a method.

The strategies of tests/integration/test_fuzz_requests.py (every field of every request,
recursively, with the values that matter here mixed in), run against a seeded server on
SQLite and on PostgreSQL. Each method gets a time budget (ADVERSARIAL_SECONDS, 2 s), spent
as a number of examples measured from the method's own call time, so the suite stays
inside its CI budget whatever the machine. Only documented client errors may come back,
each with this service's ErrorInfo, and the server stays healthy.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator

import grpc
import pytest
import pytest_asyncio
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings

from service.fakes.suite import FakeProviders
from tests.integration.test_fuzz_requests import (
    FuzzWorld,
    all_methods,
    check_outcome,
    invoke,
    requests,
    serve_world,
)
from tests.support.pg import fresh_database

SECONDS = float(os.environ.get("ADVERSARIAL_SECONDS", "2"))
_CALIBRATION = 5
_MAX_EXAMPLES = 300


@pytest_asyncio.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def world(
    request: pytest.FixtureRequest,
    fake_servers: FakeProviders,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[FuzzWorld]:
    """A seeded server (two tenants' projects, documents, accounts, tokens) on each store."""
    if request.param == "sqlite":
        async for served in serve_world(fake_servers, tmp_path_factory):
            yield served
        return
    admin = request.getfixturevalue("pg_dsn")
    async with fresh_database(admin) as dsn:
        async for served in serve_world(fake_servers, tmp_path_factory,
                                        {"SEARCH_DATABASE_URL": dsn}):
            yield served


def _fuzz_for(world: FuzzWorld, method: MethodDescriptor, seconds: float) -> int:
    """Fuzz `method` for about `seconds`; returns how many examples ran."""
    strategy = requests(method, world.pools)
    with grpc.insecure_channel(world.target) as channel:

        def run(examples: int) -> None:
            @settings(max_examples=examples, deadline=None, database=None,
                      phases=[Phase.generate], suppress_health_check=list(HealthCheck))
            @given(strategy)
            def property_(request: Message | list[Message]) -> None:
                check_outcome(method, invoke(channel, method, request))

            property_()

        started = time.monotonic()
        run(_CALIBRATION)  # how long this method's calls take here
        each = (time.monotonic() - started) / _CALIBRATION
        examples = max(1, min(_MAX_EXAMPLES, int(seconds / max(each, 1e-3))))
        run(examples)
    return examples + _CALIBRATION


@pytest.mark.parametrize("method", all_methods(), ids=lambda m: m.name)
async def test_every_field_of_every_method_gets_only_client_errors(
    world: FuzzWorld, method: MethodDescriptor
) -> None:
    started = time.monotonic()
    ran = await asyncio.to_thread(_fuzz_for, world, method, SECONDS)
    assert ran > _CALIBRATION
    assert time.monotonic() - started < SECONDS * 4 + 10, "over the suite's time budget"
    async with grpc.aio.insecure_channel(world.target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=method.containing_service.full_name)
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
