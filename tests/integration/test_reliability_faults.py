"""Over 1,000 randomized provider faults through the real server: no call fails, states are right.

Every search sends four queries to each of the eight fake providers; about three in four are
faulted (timeouts, 5xx, 429 with Retry-After, GitHub-style quota 403s, malformed, truncated and
wrong-shape bodies, connection resets, slow drips). `tests.support.reliability.faults` plants each
fault for one query only and checks every status and the fused page.
"""

from __future__ import annotations

from pathlib import Path

from grpc_health.v1 import health_pb2, health_pb2_grpc

from search_client.pb.search.v1 import accounts_pb2_grpc, workspace_search_pb2_grpc
from service.fakes.suite import FakeProviders
from tests.support.reliability.faults import FAULT_KINDS, run_faults
from tests.support.reliability.world import connect_all, seed, server_env
from tests.support.server import channel_to, running_server

REQUEST_TIMEOUT = 2.0  # seconds per provider request; healthy answers take milliseconds
MIN_FAULTS = 1000


async def test_a_thousand_random_provider_faults_fail_no_call(
    fakes: FakeProviders, tmp_path: Path
) -> None:
    seed(fakes)
    env = server_env(fakes) | {
        "SEARCH_EMBEDDER": "none",
        "SEARCH_PROVIDER_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT),
        # Each fault is planted for one query and checked against that query's state; a
        # shared wait would (rightly) turn later queries of that account RATE_LIMITED too.
        # Sharing is tested in test_workspace_rate_limits.py.
        "SEARCH_SHARED_PROVIDER_WAITS": "false",
    }
    async with running_server(tmp_path, env) as app, channel_to(app) as channel:
        await connect_all(accounts_pb2_grpc.AccountServiceStub(channel), fakes)
        report = await run_faults(
            workspace_search_pb2_grpc.WorkspaceSearchServiceStub(channel),
            fakes,
            min_faults=MIN_FAULTS,
            lanes=4,
            request_timeout=REQUEST_TIMEOUT,
        )
        health = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert report.failed_calls == 0, report.problems[:5]
    assert not report.problems, "\n".join(report.problems[:20])
    assert report.faults >= MIN_FAULTS
    assert set(report.by_kind) == set(FAULT_KINDS)
    assert min(report.by_kind.values()) >= 50, report.by_kind
    assert report.healthy >= 200
    assert health.status == health_pb2.HealthCheckResponse.SERVING
