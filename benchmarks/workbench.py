"""Shared state of one harness run: options, PostgreSQL, servers, and loaded corpora.

A loaded corpus (50 projects of synthetic documents on one store) is built once and grown in
place (10k -> 100k chunks), so `all` measures latency, scale, the seed comparison and load on
the same data without loading it twice.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from benchmarks.client import Client, UpsertSummary, channel
from benchmarks.corpus import SyntheticCorpus
from benchmarks.pg import Postgres
from benchmarks.servers import ServerHandle, ServerSpec, start_server

STORES = ("sqlite", "postgres")
EXACT_ALWAYS = 1_000_000_000  # exact_scan_limit that keeps every scope on the exact path
INDEX_ALWAYS = 0  # exact_scan_limit that sends every semantic search to the ANN index
# Memory and workers for one HNSW build after a bulk load: a 1M x 384-d graph needs ~2 GB; a
# graph that outgrows maintenance_work_mem is built on disk (~185 instead of ~1.7k tuples/s).
HNSW_BUILD_MEMORY = "4GB"
HNSW_BUILD_WORKERS = 2


async def analyze(dsn: str) -> None:
    """Vacuum and refresh PostgreSQL's planner statistics after a bulk load.

    Autovacuum would do the same within about a minute. Without ANALYZE the first minute
    after loading 90k chunks plans FTS with the statistics of an almost empty table (4x
    slower); without VACUUM the visibility map is empty, so every "index-only" scan (scope,
    BM25 statistics, the exact-vs-index count) visits the heap too (3-10x slower).
    """
    conn = await asyncpg.connect(dsn)
    try:
        await _rebuild_ann(conn)
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


async def _rebuild_ann(conn: asyncpg.Connection) -> None:
    """Put a bulk load into the HNSW index the way an operator would: one index build.

    The service adds new vectors to its partial HNSW index in the background at a few
    hundred per second; measuring right after a 90k-chunk load would time the exact backlog
    scan instead of the index. Dropping the index, marking the backlog and building it again
    is much faster than inserting row by row.
    """
    rows = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE tablename = 'vectors' AND indexdef ILIKE '%USING hnsw%'"
    )
    if not rows:
        return
    for row in rows:
        await conn.execute(f'DROP INDEX IF EXISTS "{row["indexname"]}"')
    await conn.execute("UPDATE vectors SET ann = true WHERE state = 'ready' AND NOT ann")
    await conn.execute(f"SET maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")
    await conn.execute(f"SET max_parallel_maintenance_workers = {HNSW_BUILD_WORKERS}")
    for row in rows:
        # On a partitioned table pg_indexes says `ON ONLY vectors`: that would build an empty
        # parent index and none on the partitions, so build it on the partitions too.
        await conn.execute(row["indexdef"].replace(" ON ONLY ", " ON "))


def log(message: str) -> None:
    """Progress on stderr-like stdout, flushed (the harness is run by hand)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Options:
    """What the run is allowed to do."""

    inprocess: bool = False  # servers on the harness' event loop (smoke tests)
    pg_dsn: str = ""
    stores: tuple[str, ...] = STORES
    workdir: Path | None = None
    smoke: bool = False  # tiny sizes, few repetitions


class Workbench:
    """Owns the temporary directory, PostgreSQL and every server started for a run."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.postgres = Postgres(options.pg_dsn)
        self._own_dir = options.workdir is None
        self.workdir = options.workdir or Path(tempfile.mkdtemp(prefix="search-bench-"))
        self._servers: list[ServerHandle] = []
        self._corpora: dict[str, LoadedCorpus] = {}
        self._counter = 0
        self.synthetic = SyntheticCorpus()

    async def spec(self, store: str, **kwargs: Any) -> ServerSpec:
        """A spec on a new, empty database of `store`."""
        self._counter += 1
        data_dir = self.workdir / f"{store}-{self._counter}"
        data_dir.mkdir(parents=True, exist_ok=True)
        url = await self.postgres.new_database() if store == "postgres" else ""
        return ServerSpec(data_dir=data_dir, database_url=url, **kwargs)

    async def start(self, spec: ServerSpec) -> ServerHandle:
        """Start a server; stopped by `close`."""
        server = await start_server(spec, inprocess=self.options.inprocess)
        self._servers.append(server)
        return server

    async def stop(self, server: ServerHandle) -> None:
        """Stop one server now."""
        if server in self._servers:
            self._servers.remove(server)
        await server.close()

    async def corpus(self, store: str, chunks: int, projects: int = 50) -> LoadedCorpus:
        """The store's synthetic corpus, grown to at least `chunks` chunks."""
        loaded = self._corpora.get(store)
        if loaded is None:
            spec = await self.spec(store)
            loaded = LoadedCorpus(self, store, spec, await self.start(spec))
            await loaded.create_projects(projects)
            self._corpora[store] = loaded
        await loaded.grow(chunks)
        return loaded

    async def release_corpus(self, store: str) -> None:
        """Stop the corpus' servers (its database stays until `close`)."""
        loaded = self._corpora.pop(store, None)
        if loaded is not None:
            for server in [loaded.server, *loaded.variants.values()]:
                await self.stop(server)

    async def close(self) -> None:
        """Stop servers, drop databases, remove the temporary directory."""
        for server in reversed(self._servers):
            await server.close()
        self._servers.clear()
        self._corpora.clear()
        await self.postgres.close()
        if self._own_dir:
            await asyncio.to_thread(shutil.rmtree, self.workdir, True)


@dataclass
class LoadRecord:
    """One growth step of a loaded corpus."""

    documents: int
    chunks: int
    seconds: float

    @property
    def chunks_per_second(self) -> float:
        """Throughput of the step."""
        return self.chunks / self.seconds if self.seconds else 0.0


@dataclass
class LoadedCorpus:
    """Synthetic documents spread evenly over projects, on one store, behind one server."""

    bench: Workbench
    store: str
    spec: ServerSpec
    server: ServerHandle
    projects: list[int] = field(default_factory=list)
    chunks: int = 0
    documents: int = 0
    next_number: dict[int, int] = field(default_factory=dict)
    loads: list[LoadRecord] = field(default_factory=list)
    variants: dict[int, ServerHandle] = field(default_factory=dict)

    async def create_projects(self, count: int) -> None:
        """Create `count` projects."""
        async with channel(self.server.target) as ch:
            client = Client(ch)
            for i in range(count):
                project_id = await client.create_project(f"bench-{self.store}-{i:03d}")
                self.projects.append(project_id)
                self.next_number[project_id] = 0

    async def grow(self, target: int, concurrency: int = 2) -> LoadRecord | None:
        """Upsert documents (server-side embedding) until the corpus holds `target` chunks."""
        missing = target - self.chunks
        if missing <= 0:
            return None
        per_project = -(-missing // len(self.projects))
        log(f"{self.store}: loading {per_project * len(self.projects):,} chunks "
            f"({self.chunks:,} -> ~{target:,})")
        queue: asyncio.Queue[int] = asyncio.Queue()
        for project_id in self.projects:
            queue.put_nowait(project_id)
        totals: list[UpsertSummary] = []
        started = time.perf_counter()
        async with channel(self.server.target) as ch:
            client = Client(ch)
            workers = [self._load_worker(client, queue, per_project, totals)
                       for _ in range(concurrency)]
            await asyncio.gather(*workers)
        seconds = time.perf_counter() - started
        record = LoadRecord(sum(t.documents for t in totals),
                            sum(t.chunks_written for t in totals), seconds)
        self.chunks += record.chunks
        self.documents += record.documents
        self.loads.append(record)
        await self.server.take_timings()
        if self.spec.database_url:
            await analyze(self.spec.database_url)
        log(f"{self.store}: {self.chunks:,} chunks loaded "
            f"({record.chunks_per_second:,.0f} chunks/s this step)")
        return record

    async def _load_worker(
        self, client: Client, queue: asyncio.Queue[int], chunks: int, out: list[UpsertSummary]
    ) -> None:
        synthetic = self.bench.synthetic
        while not queue.empty():
            project_id = queue.get_nowait()
            index = self.projects.index(project_id)
            generated = synthetic.generate(index, self.next_number[project_id], chunks)
            self.next_number[project_id] += len(generated.docs)
            out.append(await client.upsert(project_id, generated.docs))

    async def variant(self, exact_scan_limit: int) -> ServerHandle:
        """A second server on the same database with another `exact_scan_limit`."""
        server = self.variants.get(exact_scan_limit)
        if server is None:
            spec = ServerSpec(
                data_dir=self.spec.data_dir, database_url=self.spec.database_url,
                embedder=self.spec.embedder, exact_scan_limit=exact_scan_limit,
            )
            server = await self.bench.start(spec)
            self.variants[exact_scan_limit] = server
        return server
