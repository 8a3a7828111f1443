"""Scale-out (issue 9): throughput with 1, 2 and 3 service replicas; 1 vs 16 partitions.

Throughput: separate server processes over one PostgreSQL database (the same data directory,
so the same page-token key), closed-loop drivers in their own processes spreading calls
round-robin over the replicas, mixed FTS / VECTOR / HYBRID searches over scopes of 10 of 50
projects. Everything shares this machine's cores, so the table reports them and the share of
CPU that was busy during each window.

Read replica (scaleout_replica): one service replica on a primary alone vs reading from its
streaming standby, both on this machine.

Partitions: the same corpus loaded into schemas with SEARCH_PG_PARTITIONS = 1 and 16 (and the
unpartitioned throughput corpus as a reference); sequential latency per mode, plus EXPLAIN
ANALYZE of the service's statement under custom and generic plans (scaleout_explain).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks import latency, scaleout_explain, scaleout_replica
from benchmarks.latency import workload
from benchmarks.scaleout_corpus import MIXED, grow, mixed_queries, new_corpus
from benchmarks.scaleout_driver import window
from benchmarks.servers import ServerHandle, ServerSpec
from benchmarks.workbench import LoadedCorpus, Workbench


@dataclass(frozen=True)
class ScaleoutSizes:
    """Sizes of the scale-out benchmark; `smoke()` is a harness check."""

    chunks: int = 100_000
    big_chunks: int = 1_000_000
    projects: int = 50
    replicas: tuple[int, ...] = (1, 2, 3)
    drivers: int = 2  # driver processes
    concurrency: int = 8  # in-flight calls per driver
    seconds: float = 15.0
    warmup: float = 3.0
    partitions: tuple[int, ...] = (1, 16)
    latency_queries: int = 100
    budget: float = 8.0
    read_replica: bool = True  # also 1 replica reading from a streaming standby
    stats_wait: float = 11.0  # statistics flush delay of idle backends, plus a second

    @classmethod
    def smoke(cls) -> ScaleoutSizes:
        """Tiny everything."""
        return cls(chunks=240, big_chunks=480, projects=12, replicas=(1, 2), drivers=1,
                   concurrency=2, seconds=0.6, warmup=0.2, partitions=(1, 4),
                   latency_queries=3, budget=5.0, stats_wait=0.0)


async def _replica(bench: Workbench, corpus: LoadedCorpus) -> ServerHandle:
    spec = ServerSpec(data_dir=corpus.spec.data_dir, database_url=corpus.spec.database_url,
                      embedder=corpus.spec.embedder)
    return await bench.start(spec)


async def throughput(bench: Workbench, corpus: LoadedCorpus, sizes: ScaleoutSizes
                     ) -> list[dict[str, Any]]:
    """One row per replica count: searches/s and latency under a saturating closed loop."""
    queries = tuple(mixed_queries(corpus))
    servers = [corpus.server]
    rows = []
    try:
        for count in sizes.replicas:
            while len(servers) < count:
                servers.append(await _replica(bench, corpus))
            rows.append(await window(servers[:count], queries, sizes,
                                      inprocess=bench.options.inprocess))
    finally:
        for server in servers[1:]:
            await bench.stop(server)
    return rows


async def partition_rows(corpus: LoadedCorpus, partitions: int, sizes: ScaleoutSizes,
                         explain: bool = True) -> dict[str, Any]:
    """Latency per mode on one corpus, and the pruning probe of each mode."""
    rows = await latency.measure(corpus, sizes.latency_queries, sizes.budget)
    for row in rows:
        row["partitions"] = partitions
    probes = []
    if explain:
        for mode in MIXED:
            query = workload(corpus, 1, mode, seed=5)[0]
            probes.append({"chunks": corpus.chunks, **await scaleout_explain.explain(
                corpus.spec.database_url, mode, list(query.scope), query.text)})
    return {"latency": rows, "explain": probes}


async def measure(bench: Workbench, sizes: ScaleoutSizes, *, with_1m: bool,
                  save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The whole scale-out section; `save` gets what is measured before each 1M growth."""
    started = time.perf_counter()
    base = await new_corpus(bench, 0, sizes.projects)
    section: dict[str, Any] = {
        "cpu_count": os.cpu_count(), "projects": sizes.projects, "scope": latency.SCOPE_SIZE,
        "workload": "FTS/VECTOR/HYBRID round robin, page size 10",
        "loads": [{"partitions": 0, **await grow(base, sizes.chunks)}],
        "postgres": await bench.postgres.describe(), "with_1m": False,
    }
    section["replicas"] = await throughput(bench, base, sizes)
    reference = await partition_rows(base, 0, sizes, explain=False)
    await bench.stop(base.server)
    section["read_replica"] = (await scaleout_replica.measure(bench, sizes)
                               if sizes.read_replica else [])
    section["partitions"], section["explain"] = list(reference["latency"]), []
    corpora = {}
    for partitions in sizes.partitions:
        corpora[partitions] = await new_corpus(bench, partitions, sizes.projects)
        await _partition_step(section, corpora[partitions], partitions, sizes.chunks, sizes)
    section["seconds"] = time.perf_counter() - started
    if with_1m:
        for partitions, corpus in corpora.items():
            if save is not None:  # each 1M step is long: keep what is measured so far
                save(section)
            await _partition_step(section, corpus, partitions, sizes.big_chunks, sizes)
            section["seconds"] = time.perf_counter() - started
        section["with_1m"] = True
    for corpus in corpora.values():
        await bench.stop(corpus.server)
    return section


async def _partition_step(section: dict[str, Any], corpus: LoadedCorpus, partitions: int,
                          chunks: int, sizes: ScaleoutSizes) -> None:
    section["loads"].append({"partitions": partitions, **await grow(corpus, chunks)})
    measured = await partition_rows(corpus, partitions, sizes)
    section["partitions"] += measured["latency"]
    section["explain"] += measured["explain"]
