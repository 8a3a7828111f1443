"""Read replicas: a real streaming standby (pg_basebackup -R from the same binaries).

Replay lag is made with `recovery_min_apply_delay` on the standby. Searches go to the
standby when it is within the lag bound; `x-search-min-lsn` (the `x-search-lsn` a write
returned) keeps them on the primary until the standby has replayed that write; a lagging
or stopped standby is skipped.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import pytest

from search_client import AsyncSearchClient, InvalidArgumentError, RetryPolicy
from service.pb.search.v1 import index_pb2, index_pb2_grpc
from service.server import App
from service.store.postgres.replicas import ReplicaRouter, parse_lsn
from tests.support import pg
from tests.support.server import channel_to, running_server

pytestmark = pytest.mark.timeout(120)


def _start_standby(primary: pg.PgServer) -> pg.PgServer:
    pgdata = Path(tempfile.mkdtemp(prefix="search-pg-standby-"))
    user = pg._prepare_for_user(pgdata)
    source = f"host={primary.pgdata} user=postgres"
    pg._run("pg_basebackup", "-D", str(pgdata), "-d", source, "-R", "-X", "stream",
            "-c", "fast", "--no-sync", user=user)
    # The primary's socket lives in its data directory: its lock file came along.
    for copied in (".s.PGSQL.5432.lock", "server.log"):
        (pgdata / copied).unlink(missing_ok=True)
    with (pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.write(f"unix_socket_directories = '{pgdata}'\nhot_standby_feedback = on\n")
    standby = pg.PgServer(f"postgresql://postgres@/postgres?host={pgdata}", True, pgdata, user)
    try:
        standby.start()
    except BaseException:
        shutil.rmtree(pgdata, ignore_errors=True)
        raise
    return standby


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[pg.PgServer, pg.PgServer]]:
    """A primary of its own (its settings change here) and one streaming standby."""
    primary = pg.start_server()
    try:
        standby = _start_standby(primary)
        try:
            yield primary, standby
        finally:
            standby.close()
    finally:
        primary.close()


async def _set_apply_delay(standby: pg.PgServer, delay: str) -> None:
    assert standby.pgdata is not None
    with (standby.pgdata / "postgresql.auto.conf").open("a") as auto:
        auto.write(f"recovery_min_apply_delay = '{delay}'\n")
    conn = await asyncpg.connect(standby.dsn)
    try:
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


@asynccontextmanager
async def _app(
    cluster: tuple[pg.PgServer, pg.PgServer], tmp_path: Path, max_lag: float
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
        await _wait_for_database(pg.dsn_for_database(standby.dsn, name))
        async with running_server(tmp_path, env) as app:
            router = app.components["store"].replicas
            assert isinstance(router, ReplicaRouter)
            yield app, router
    finally:
        await pg.drop_database(primary.dsn, name)


async def _wait_for_database(dsn: str) -> None:
    for _ in range(200):
        try:
            conn = await asyncpg.connect(dsn)
        except asyncpg.InvalidCatalogNameError:
            await asyncio.sleep(0.05)
            continue
        await conn.close()
        return
    raise AssertionError("the standby never saw the new database")


async def _upsert(app: App, project: int, row_id: str, body: str) -> str:
    """Upsert one note through the raw stub; returns the `x-search-lsn` trailer."""
    async with channel_to(app) as channel:
        stub = index_pb2_grpc.IndexServiceStub(channel)
        document = index_pb2.Document(kind="note", row_id=row_id, title=row_id, body=body)
        call = stub.UpsertDocuments(
            iter([index_pb2.UpsertDocumentsRequest(project_id=project, documents=[document])])
        )
        reply = await call
        assert reply.documents_rejected == 0
        trailers = dict(await call.trailing_metadata() or ())
    lsn = str(trailers["x-search-lsn"])
    assert parse_lsn(lsn) is not None
    return lsn


async def _found(client: AsyncSearchClient, project: int, min_lsn: str = "") -> set[str]:
    metadata = [("x-search-min-lsn", min_lsn)] if min_lsn else []
    pages = [p async for p in client.search_projects([project], "harbour", metadata=metadata)]
    return {r.row_id for r in pages[0].results}


def _lsn(text: str) -> int:
    value = parse_lsn(text)
    assert value is not None
    return value


async def _until(condition: Callable[[], bool], within: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + within
    while not condition():
        assert loop.time() < end, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_read_your_writes_under_replica_lag(
    cluster: tuple[pg.PgServer, pg.PgServer], tmp_path: Path
) -> None:
    standby = cluster[1]
    # A generous lag bound: only the LSN header keeps reads off the lagging standby.
    async with _app(cluster, tmp_path, max_lag=3600) as (app, router):
        client = AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1))
        async with client:
            project = (await client.create_project("ryw", "RYW")).project_id
            first = await _upsert(app, project, "a", "harbour crane one")
            replica = router.replicas[0]
            await _until(lambda: replica.healthy and replica.replay_lsn >= _lsn(first))
            assert await _found(client, project) == {"a"}  # served by the standby
            with pytest.raises(InvalidArgumentError):
                await _found(client, project, "not-an-lsn")
            await _set_apply_delay(standby, "1h")
            try:
                second = await _upsert(app, project, "b", "harbour crane two")
                # The standby has not replayed the write: without the header it is stale...
                await asyncio.sleep(0.3)
                assert await _found(client, project) == {"a"}
                # ...with it the search goes to the primary and sees the write.
                assert await _found(client, project, second) == {"a", "b"}
                assert await _found(client, project, first) == {"a"}  # older LSN: standby
            finally:
                await _set_apply_delay(standby, "0")
            await _until(lambda: replica.replay_lsn >= _lsn(second))
            assert await _found(client, project, second) == {"a", "b"}  # caught up


async def test_lagging_or_stopped_replica_is_skipped(
    cluster: tuple[pg.PgServer, pg.PgServer], tmp_path: Path
) -> None:
    standby = cluster[1]
    async with _app(cluster, tmp_path, max_lag=1.0) as (app, router):
        client = AsyncSearchClient(f"127.0.0.1:{app.port}", retry=RetryPolicy(max_attempts=1))
        async with client:
            project = (await client.create_project("lag", "Lag")).project_id
            await _upsert(app, project, "a", "harbour crane one")
            replica = router.replicas[0]
            await _until(lambda: replica.healthy and replica.lag == 0)
            await _set_apply_delay(standby, "1h")
            try:
                await _upsert(app, project, "b", "harbour crane two")
                await _until(lambda: replica.lag > router.max_lag)
                assert router.pick() is None
                assert await _found(client, project) == {"a", "b"}  # the primary answers
            finally:
                await _set_apply_delay(standby, "0")
            await _until(lambda: replica.lag == 0)
            assert router.pick() is replica
            standby.stop()
            try:
                # Before the next check notices, the failing statement falls back too.
                assert await _found(client, project) == {"a", "b"}
                await _until(lambda: not replica.healthy)
                assert await _found(client, project) == {"a", "b"}
            finally:
                standby.start()
            await _until(lambda: replica.healthy)
