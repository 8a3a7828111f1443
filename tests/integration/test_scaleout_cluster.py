"""The whole scale-out setup at once: three server processes, a primary and a streaming standby.

The servers share the page-token key, the primary DSN and the standby as read replica. The
corpus goes in through one server; once the standby has replayed it, searches (FTS, VECTOR,
HYBRID) are paged round-robin, each call (one page, or a stream of three) going to another
server than the call before, with the token that server issued. Mid-run one server is
SIGKILLed: the explicit round-robin moves on to the next server on UNAVAILABLE, and a
`round_robin` channel over the three addresses retries on the survivors. Every pagination
must equal the one-call ranking (no skip, no repeat, every page but the last full). The
standby's table statistics show it served the searches; with its replay delayed, a search
carrying the `x-search-lsn` of a fresh write still finds it (pinned to the primary) while
one without it reads the stale standby.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path

import grpc
import pytest

from search_client import AsyncSearchClient, RetryPolicy, SearchMode
from tests.support import pg
from tests.support.pg_standby import (
    fetchval,
    pg_cluster,  # noqa: F401 - fixture
    set_apply_delay,
    until,
    wait_for_database,
    wait_for_replay,
)
from tests.support.reliability.process import ServerProcess
from tests.support.scaleout import (
    KEY,
    Key,
    Page,
    RoundRobin,
    corpus,
    fetch_page,
    flatten,
    start_servers,
    upsert_with_lsn,
)

pytestmark = pytest.mark.timeout(180)  # ~15 s alone; generous for a shared 2-core machine

CHECK_INTERVAL = 0.2  # replica health/lag checks: routers see the caught-up standby quickly
MODES = (
    (SearchMode.FTS, "replica"),
    (SearchMode.VECTOR, "standby lag"),
    (SearchMode.HYBRID, "replica standby lag"),
)
PAGE_SIZE = 5
STREAMED_PAGES = 3  # pages per call when a call streams several
ONE_ATTEMPT = RetryPolicy(max_attempts=1)  # the round-robin itself moves on to another server
RETRY = RetryPolicy(max_attempts=6, initial_backoff=0.05, max_backoff=0.5)
ROUND_ROBIN = json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})
PAGES_BEFORE_KILL = 60  # of about 270 in the phase
# Searches read `projects` (the ownership CTE); the standby's health check reads no table.
SCANS = """
SELECT coalesce(sum(seq_scan + coalesce(idx_scan, 0)), 0)
FROM pg_stat_user_tables WHERE relname = 'projects'"""

Cluster = tuple[pg.PgServer, pg.PgServer]


def _check(pages: Sequence[Page], expected: list[Key], crossing: bool = True) -> None:
    """The pagination returned the reference ranking; each call on another server than the
    call before (with the token that one issued)."""
    assert flatten(pages) == expected
    if crossing:
        for before, page in itertools.pairwise(pages):
            if page.call != before.call:
                assert page.server != before.server, [(p.call, p.server) for p in pages]


async def _scans(dsn: str) -> int:
    return int(await fetchval(dsn, SCANS))


async def test_three_servers_primary_and_standby_survive_a_killed_server(
    pg_cluster: Cluster, tmp_path: Path  # noqa: F811 - the imported fixture
) -> None:
    primary, standby = pg_cluster
    name, dsn = await pg.create_database(primary.dsn)
    replica_dsn = pg.dsn_for_database(standby.dsn, name)
    await wait_for_database(replica_dsn)
    await wait_for_replay(dsn, replica_dsn)  # the vector extension is there too
    env = {
        "SEARCH_DATABASE_URL": dsn,
        "SEARCH_DATABASE_REPLICA_URLS": replica_dsn,
        "SEARCH_REPLICA_MAX_LAG_SECONDS": "3600",  # only the LSN header moves reads off it
        "SEARCH_REPLICA_CHECK_INTERVAL": str(CHECK_INTERVAL),
        "SEARCH_PAGE_TOKEN_KEY": KEY,
        "SEARCH_DB_POOL_SIZE": "4",
        "SEARCH_PG_PARTITIONS": "4",
    }
    async with AsyncExitStack() as stack:
        servers = await start_servers(stack, [tmp_path / n for n in "abc"], env)
        clients = [
            await stack.enter_async_context(AsyncSearchClient(s.target, retry=ONE_ATTEMPT))
            for s in servers
        ]
        project = (await clients[0].create_project("cluster", "Cluster")).project_id
        assert not (await clients[0].upsert_documents(project, corpus())).rejected
        await wait_for_replay(dsn, replica_dsn)
        await asyncio.sleep(3 * CHECK_INTERVAL)  # every router has seen it caught up
        scans_before = await _scans(replica_dsn)

        expected = await _crossing_pages(clients, project)
        target = "ipv4:" + ",".join(s.target for s in servers)
        balanced = await stack.enter_async_context(AsyncSearchClient(
            target, retry=RETRY, options=[("grpc.service_config", ROUND_ROBIN)]
        ))
        searches = await _kill_mid_run(clients, balanced, servers[1], project, expected)
        await _read_your_writes(standby, [servers[0], servers[2]], clients[2], project)
        await _served_by_standby(replica_dsn, scans_before, searches)


async def _crossing_pages(
    clients: Sequence[AsyncSearchClient], project: int
) -> dict[SearchMode, list[Key]]:
    """Reference rankings (one call each), then paginations across the servers."""
    rr, streams = RoundRobin(clients), RoundRobin(clients, STREAMED_PAGES)
    expected = {}
    for mode, text in MODES:
        reference = await fetch_page(clients[2], project, mode, text, "", 1000)
        assert not reference.next_token
        assert len(reference.keys) > 3 * PAGE_SIZE
        assert len(set(reference.keys)) == len(reference.keys)
        expected[mode] = reference.keys
        for start in range(3):  # page 1 from server `start`, page 2 from the next, ...
            _check(await rr.paginate(project, mode, text, PAGE_SIZE, start), reference.keys)
        # Streams of several pages per call, each call resuming on another server.
        _check(await streams.paginate(project, mode, text, PAGE_SIZE), reference.keys)
    assert rr.failovers == streams.failovers == 0
    return expected


async def _kill_mid_run(
    clients: Sequence[AsyncSearchClient], balanced: AsyncSearchClient, victim: ServerProcess,
    project: int, expected: dict[SearchMode, list[Key]],
) -> int:
    """Concurrent paginations (explicit round-robin and the balanced channel); SIGKILL
    `victim` after some pages. Returns how many pages were served."""
    explicit, streams = RoundRobin(clients), RoundRobin(clients, STREAMED_PAGES)
    lb = RoundRobin([balanced])
    pages = [0]

    def count() -> None:
        pages[0] += 1

    async def worker(rr: RoundRobin, start: int, mode: SearchMode, text: str) -> None:
        for i in range(3):
            found = await rr.paginate(project, mode, text, PAGE_SIZE, start + i, count)
            _check(found, expected[mode], crossing=rr is not lb)

    tasks = [
        asyncio.create_task(worker(rr, start, mode, text))
        for rr in (explicit, streams, lb) for start, (mode, text) in enumerate(MODES)
    ]
    try:
        while pages[0] < PAGES_BEFORE_KILL:
            assert not any(t.done() for t in tasks), "a worker ended before the kill"
            await asyncio.sleep(0.005)
        victim.kill()
        assert not all(task.done() for task in tasks)  # the kill lands mid-run
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    assert await victim.process.wait() == -9
    assert explicit.failovers > 0  # the killed server was tried and skipped
    assert streams.failovers > 0
    return pages[0]


async def _read_your_writes(
    standby: pg.PgServer, alive: Sequence[ServerProcess], reader: AsyncSearchClient,
    project: int,
) -> None:
    """With replay delayed, the LSN of a fresh write pins searches to the primary."""

    async def found(min_lsn: str = "") -> set[str]:
        metadata = [("x-search-min-lsn", min_lsn)] if min_lsn else []
        page = await fetch_page(reader, project, SearchMode.FTS, "harbour", "", 10, metadata)
        return {key[2] for key in page.keys}

    try:
        await set_apply_delay(standby, "1h")
        async with grpc.aio.insecure_channel(alive[0].target) as channel:
            lsn = await upsert_with_lsn(channel, project, "fresh", "harbour crane replica")
        await asyncio.sleep(3 * CHECK_INTERVAL)  # the routers see the standby behind it
        assert await found(lsn) == {"fresh"}  # another server, pinned: the primary
        assert await found() == set()  # unpinned: the stale standby answers
    finally:
        await set_apply_delay(standby, "0")

    async def fresh_on_standby() -> bool:
        return await found() == {"fresh"}

    await until(fresh_on_standby, "the standby serves the fresh write")


async def _served_by_standby(replica_dsn: str, before: int, searches: int) -> None:
    """The standby's own statistics count the searches (a backend flushes them within 1 s
    while busy, 10 s once idle); nothing else reads tables there."""

    async def counted() -> bool:
        return await _scans(replica_dsn) - before >= searches

    await until(counted, f"the standby counts {searches} searches", 20.0)
