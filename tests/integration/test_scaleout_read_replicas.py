"""Read replicas: a real streaming standby (pg_basebackup -R from the same binaries).

The primary and standby come from tests.support.pg_standby (`pg_cluster`) and serve an
in-process App here; tests/integration/test_scaleout_cluster.py runs the same replica
routing behind three server processes.

Replay lag is made with `recovery_min_apply_delay` on the standby. Searches go to the
standby when it is within the lag bound; `x-search-min-lsn` (the `x-search-lsn` a write
returned) keeps them on the primary until the standby has replayed that write; a lagging
or stopped standby is skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from search_client import AsyncSearchClient, InvalidArgumentError, RetryPolicy
from service.server import App
from service.store.postgres.replicas import ReplicaRouter, parse_lsn
from tests.support import pg
from tests.support.pg_standby import (
    pg_cluster,  # noqa: F401 - fixture
    set_apply_delay,
    until,
    wait_for_database,
)
from tests.support.reliability.outage import isolated_control
from tests.support.scaleout import upsert_with_lsn
from tests.support.server import channel_to, running_server

pytestmark = pytest.mark.timeout(120)

Cluster = tuple[pg.PgServer, pg.PgServer]


@asynccontextmanager
async def _app(
    cluster: Cluster, tmp_path: Path, max_lag: float
) -> AsyncIterator[tuple[App, ReplicaRouter]]:
    primary, standby = cluster
    name, dsn = await pg.create_database(primary.dsn)
    try:
        env = {
            "SEARCH_DATABASE_URL": dsn,
            "SEARCH_DATABASE_REPLICA_URLS": pg.dsn_for_database(standby.dsn, name),
            "SEARCH_REPLICA_MAX_LAG_SECONDS": str(max_lag),
            "SEARCH_REPLICA_CHECK_INTERVAL": "0.1",
        }
        await wait_for_database(pg.dsn_for_database(standby.dsn, name))
        async with running_server(tmp_path, env) as app:
            router = app.components["store"].replicas
            assert isinstance(router, ReplicaRouter)
            yield app, router
    finally:
        await pg.drop_database(primary.dsn, name)


async def _upsert(app: App, project: int, row_id: str, body: str) -> str:
    """Upsert one note; returns the `x-search-lsn` trailer."""
    async with channel_to(app) as channel:
        return await upsert_with_lsn(channel, project, row_id, body)


async def _found(client: AsyncSearchClient, project: int, min_lsn: str = "") -> set[str]:
    metadata = [("x-search-min-lsn", min_lsn)] if min_lsn else []
    pages = [p async for p in client.search_projects([project], "harbour", metadata=metadata)]
    return {r.row_id for r in pages[0].results}


def _lsn(text: str) -> int:
    value = parse_lsn(text)
    assert value is not None
    return value


async def _until(condition: Callable[[], bool], within: float = 20.0) -> None:
    async def check() -> bool:
        return condition()

    await until(check, "condition", within)


async def test_read_your_writes_under_replica_lag(
    pg_cluster: Cluster, tmp_path: Path  # noqa: F811 - the imported fixture
) -> None:
    standby = pg_cluster[1]
    # A generous lag bound: only the LSN header keeps reads off the lagging standby.
    async with _app(pg_cluster, tmp_path, max_lag=3600) as (app, router):
        client = AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1))
        async with client:
            project = (await client.create_project("ryw", "RYW")).project_id
            first = await _upsert(app, project, "a", "harbour crane one")
            replica = router.replicas[0]
            await _until(lambda: replica.healthy and replica.replay_lsn >= _lsn(first))
            assert await _found(client, project) == {"a"}  # served by the standby
            with pytest.raises(InvalidArgumentError):
                await _found(client, project, "not-an-lsn")
            await set_apply_delay(standby, "1h")
            try:
                second = await _upsert(app, project, "b", "harbour crane two")
                # The standby has not replayed the write: without the header it is stale...
                await asyncio.sleep(0.3)
                assert await _found(client, project) == {"a"}
                # ...with it the search goes to the primary and sees the write.
                assert await _found(client, project, second) == {"a", "b"}
                assert await _found(client, project, first) == {"a"}  # older LSN: standby
            finally:
                await set_apply_delay(standby, "0")
            await _until(lambda: replica.replay_lsn >= _lsn(second))
            assert await _found(client, project, second) == {"a", "b"}  # caught up


async def test_lagging_or_stopped_replica_is_skipped(
    pg_cluster: Cluster, tmp_path: Path  # noqa: F811 - the imported fixture
) -> None:
    standby = pg_cluster[1]
    async with _app(pg_cluster, tmp_path, max_lag=1.0) as (app, router):
        client = AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1))
        async with client:
            project = (await client.create_project("lag", "Lag")).project_id
            await _upsert(app, project, "a", "harbour crane one")
            replica = router.replicas[0]
            await _until(lambda: replica.healthy and replica.lag == 0)
            await set_apply_delay(standby, "1h")
            try:
                await _upsert(app, project, "b", "harbour crane two")
                await _until(lambda: replica.lag > router.max_lag)
                assert router.pick() is None
                assert await _found(client, project) == {"a", "b"}  # the primary answers
            finally:
                await set_apply_delay(standby, "0")
            await _until(lambda: replica.lag == 0)
            assert router.pick() is replica
            isolated_control(standby)("stop")  # no fork from this gRPC process
            try:
                # Before the next check notices, the failing statement falls back too.
                assert await _found(client, project) == {"a", "b"}
                await _until(lambda: not replica.healthy)
                assert await _found(client, project) == {"a", "b"}
            finally:
                isolated_control(standby)("start")
            await _until(lambda: replica.healthy)
