"""PostgreSQL outages and slow statements under a real server (a private PostgreSQL).

Stopping PostgreSQL under load: calls end UNAVAILABLE (retryable) well within their deadline,
never hang and never turn INTERNAL; readiness turns NOT_SERVING; when PostgreSQL is back,
errors stop within 5 s without restarting the service. A statement stuck behind a lock is
cancelled in PostgreSQL when the call's deadline passes or the client cancels the call.
Deadlines here are 4 s (room for a busy 2-core machine); the failed calls take well under
0.5 s. `python -m benchmarks.reliability outage` measures with 2 s deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest
import pytest_asyncio

from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from tests.support.pg import PgServer, fresh_database, start_server
from tests.support.reliability.load import seed_corpus
from tests.support.reliability.outage import RECOVERY_LIMIT, isolated_control, outage_scenario
from tests.support.server import running_server

pytestmark = pytest.mark.postgres

WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE application_name = 'search-service' AND state = 'active' AND wait_event_type = 'Lock'"""


@pytest.fixture(scope="module")
def private_pg() -> Iterator[PgServer]:
    """A PostgreSQL of this module's own: stopping it must not disturb other tests."""
    server = start_server()
    try:
        yield server
    finally:
        isolated_control(server)("close")


@pytest_asyncio.fixture
async def dsn(private_pg: PgServer) -> AsyncIterator[str]:
    """A fresh database on the private server."""
    async with fresh_database(private_pg.dsn) as fresh:
        yield fresh


async def test_stopping_postgres_under_load_gives_unavailable_then_recovers(
    private_pg: PgServer, dsn: str, tmp_path: Path
) -> None:
    secret = "db-pass-s3cret"  # the test server trusts any password; none may leak
    with_password = dsn.replace("postgres@", f"postgres:{secret}@", 1)
    report = await outage_scenario(tmp_path, isolated_control(private_pg), with_password,
                                   before=1.5, down=2.5, after=6.0, concurrency=12, deadline=4.0)
    summary = report.summary()
    during = report.during()
    assert summary["calls_before_outage_by_code"].keys() == {"OK"}, summary
    assert {c.code for c in during} <= {"OK", "UNAVAILABLE"}, (
        summary["calls_during_outage_by_code"], report.details, report.server_log[-4000:]
    )
    assert sum(c.code == "UNAVAILABLE" for c in during) >= 20, summary
    assert report.hung() == [], summary
    assert max(c.seconds for c in during if c.code != "OK") < report.deadline, summary
    assert summary["recovered_within_limit"], summary
    after = [c for c in report.calls if c.start > report.started + RECOVERY_LIMIT]
    assert after, summary
    assert {c.code for c in after} == {"OK"}, summary
    assert "NOT_SERVING" in summary["readiness_during_outage"], summary
    assert summary["readiness_after_recovery"] == ["SERVING"], summary
    assert any("UNAVAILABLE" in d for d in report.details)
    assert not any(secret in d for d in report.details)
    assert secret not in report.server_log


async def _until(conn: asyncpg.Connection, count: int, seconds: float = 3.0) -> bool:
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        if await conn.fetchval(WAITING) == count:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_deadline_and_cancellation_cancel_the_statement(dsn: str, tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, {"SEARCH_DATABASE_URL": dsn}) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel,
    ):
        ids = await seed_corpus(channel, projects=1, documents=10)
        stub = pgrpc.ProjectSearchServiceStub(channel)
        request = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(project_ids=ids),
                                            text="nebula")
        locker, watcher = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
        try:
            async with locker.transaction():
                await locker.execute("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await _read(stub.SearchProjects(request, timeout=1.0))
                assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert await _until(watcher, 0), "the statement outlived its deadline"

                call = stub.SearchProjects(request)
                reader = asyncio.create_task(_read(call))
                assert await _until(watcher, 1), "the search never reached the lock"
                call.cancel()
                assert await _until(watcher, 0), "cancelling the call left its statement"
                with pytest.raises(asyncio.CancelledError):
                    await reader
            # the lock is gone: the same search runs normally again
            pages = [m async for m in stub.SearchProjects(request, timeout=10)]
            assert pages[0].page.total > 0
        finally:
            await locker.close()
            await watcher.close()


async def _read(call: grpc.aio.UnaryStreamCall) -> None:  # type: ignore[type-arg]
    async for _ in call:
        pass


async def test_the_pool_size_setting_caps_database_connections(dsn: str, tmp_path: Path) -> None:
    env = {"SEARCH_DATABASE_URL": dsn, "SEARCH_DB_POOL_SIZE": "2"}
    async with (
        running_server(tmp_path, env) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.port}") as channel,
    ):
        ids = await seed_corpus(channel, projects=1, documents=10)
        stub = pgrpc.ProjectSearchServiceStub(channel)
        request = ppb.SearchProjectsRequest(scope=ppb.ProjectScope(project_ids=ids),
                                            text="nebula", mode=ppb.SEARCH_MODE_HYBRID)
        await asyncio.gather(*(_read(stub.SearchProjects(request)) for _ in range(20)))
        watcher = await asyncpg.connect(dsn)
        try:
            count = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'search-service'"
            )
        finally:
            await watcher.close()
    assert 1 <= count <= 2
