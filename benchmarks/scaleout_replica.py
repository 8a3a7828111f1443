"""One service replica reading from a streaming standby vs the same replica on the primary only.

The primary and its hot standby are a cluster of their own (tests.support.pg_standby: both
started from a helper process without gRPC threads, pg_basebackup -R, the same binaries).
The corpus is loaded through the primary; once the standby has replayed it, the same closed
loop runs against a server without replica URLs and against one with the standby as its
read replica. Both PostgreSQL instances share this machine's cores.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import asyncpg

from benchmarks.scaleout_corpus import grow, mixed_queries
from benchmarks.scaleout_driver import WindowSizes, window
from benchmarks.servers import ServerHandle, ServerSpec
from benchmarks.workbench import LoadedCorpus, Workbench, log
from tests.support import pg, pg_standby

COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
PRIMARY_LSN = "SELECT pg_current_wal_lsn()::text"
REPLAYED = "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn"
REPLAY_WAIT = 600.0  # seconds; a 100k-chunk load plus its index build is a lot of WAL


async def _fetchval(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def wait_for_replay(primary_dsn: str, standby_dsn: str) -> None:
    """Wait until the standby has replayed everything the primary wrote so far."""
    lsn = await _fetchval(primary_dsn, PRIMARY_LSN)
    loop = asyncio.get_running_loop()
    end = loop.time() + REPLAY_WAIT
    while not await _fetchval(standby_dsn, REPLAYED, lsn):
        if loop.time() > end:
            raise TimeoutError(f"the standby did not replay up to {lsn} in {REPLAY_WAIT} s")
        await asyncio.sleep(0.2)


async def _commits(dsn: str, wait: float) -> int:
    """Committed transactions of the database after `wait` seconds.

    Backends flush their statistics when idle, up to ~10 s late, so a count taken at once
    misses the last calls.
    """
    await asyncio.sleep(wait)
    return int(await _fetchval(dsn, COMMITS))


class ReplicaSizes(WindowSizes, Protocol):
    """The window's sizes and the corpus'."""

    @property
    def chunks(self) -> int:
        """Corpus size."""
        ...

    @property
    def projects(self) -> int:
        """Projects in the corpus."""
        ...

    @property
    def stats_wait(self) -> float:
        """Seconds to wait for the standby's statistics before reading them."""
        ...


async def measure(bench: Workbench, sizes: ReplicaSizes) -> list[dict[str, Any]]:
    """Rows 'primary only' and 'primary + 1 standby' (one service replica each)."""
    primary, standby = await asyncio.to_thread(pg_standby.start_cluster)
    name = ""
    started: list[ServerHandle] = []
    try:
        name, dsn = await pg.create_database(primary.dsn)
        standby_dsn = pg.dsn_for_database(standby.dsn, name)
        data_dir = bench.workdir / "replica-cluster"
        data_dir.mkdir(parents=True, exist_ok=True)
        spec = ServerSpec(data_dir=data_dir, database_url=dsn)
        started.append(await bench.start(spec))
        corpus = LoadedCorpus(bench, "postgres", spec, started[0])
        await corpus.create_projects(sizes.projects)
        await grow(corpus, sizes.chunks)
        await pg_standby.wait_for_database(standby_dsn)
        await wait_for_replay(dsn, standby_dsn)
        queries = tuple(mixed_queries(corpus))
        reading = ServerSpec(data_dir=data_dir, database_url=dsn, extra={
            "SEARCH_DATABASE_REPLICA_URLS": standby_dsn})
        rows = []
        for label in ("primary only", "primary + 1 standby"):
            if label != "primary only":  # started late: its replica checks stay off the count
                started.append(await bench.start(reading))
            before = await _commits(standby_dsn, sizes.stats_wait)
            row = await window(started[-1:], queries, sizes, inprocess=bench.options.inprocess)
            row["setup"] = label
            row["standby_transactions"] = (await _commits(standby_dsn, sizes.stats_wait)
                                           - before)
            rows.append(row)
            log(f"scaleout {label}: {row['searches_per_s']:.1f} searches/s, "
                f"{row['standby_transactions']:,} transactions on the standby")
        return rows
    finally:
        for server in started:
            await bench.stop(server)
        if name:
            await pg.drop_database(primary.dsn, name)
        await asyncio.to_thread(pg_standby.close, standby)
        await asyncio.to_thread(pg_standby.close, primary)
