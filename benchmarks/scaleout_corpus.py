"""Synthetic corpora on partitioned PostgreSQL schemas, and growth to 1M chunks.

A corpus is loaded through UpsertDocuments exactly like the other benchmarks' (the server
embeds with the deterministic embedder). The HNSW index is dropped during the load and built
once afterwards with enough `maintenance_work_mem` for a 1M-vector graph (a graph that does
not fit is built on disk, many times slower). The workbench's own rebuild is not used: on a
partitioned table `pg_indexes.indexdef` reads `ON ONLY vectors`, which recreates an empty
parent index and no index on any partition.
"""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from benchmarks.latency import workload
from benchmarks.measure import Query
from benchmarks.workbench import (
    HNSW_BUILD_MEMORY,
    HNSW_BUILD_WORKERS,
    LoadedCorpus,
    Workbench,
    log,
)

MIXED = ("fts", "vector", "hybrid")

HNSW_INDEXES = """
SELECT indexname, indexdef FROM pg_indexes
WHERE tablename = 'vectors' AND indexdef ILIKE '%USING hnsw%'"""
MARK_ALL = "UPDATE vectors SET ann = true WHERE state = 'ready' AND NOT ann"


def mixed_queries(corpus: LoadedCorpus) -> list[Query]:
    """FTS, VECTOR and HYBRID searches in turn, scope 10 (the load benchmark's workload)."""
    per_mode = [workload(corpus, 60, mode, seed=31) for mode in MIXED]
    return [q for triple in zip(*per_mode, strict=True) for q in triple]


async def new_corpus(bench: Workbench, partitions: int, projects: int) -> LoadedCorpus:
    """An empty corpus of `projects` projects on a new database with `partitions` partitions."""
    extra = {"SEARCH_PG_PARTITIONS": str(partitions)} if partitions else {}
    spec = await bench.spec("postgres", extra=extra)
    corpus = LoadedCorpus(bench, "postgres", spec, await bench.start(spec))
    await corpus.create_projects(projects)
    return corpus


async def grow(corpus: LoadedCorpus, chunks: int) -> dict[str, Any]:
    """Grow `corpus` to `chunks` chunks; the seconds of the load and of the index build."""
    dsn = corpus.spec.database_url
    definitions = await _drop_hnsw(dsn)
    started = time.perf_counter()
    await corpus.grow(chunks)
    loaded = time.perf_counter()
    if definitions:
        log(f"building HNSW over {corpus.chunks:,} vectors")
        await _build_hnsw(dsn, definitions)
    built = time.perf_counter()
    await _vacuum(dsn)
    return {"chunks": corpus.chunks, "load_seconds": loaded - started,
            "index_seconds": built - loaded if definitions else None,
            "vacuum_seconds": time.perf_counter() - built,
            "hnsw_indexes": await _hnsw_indexes(dsn)}


async def _drop_hnsw(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(HNSW_INDEXES)
        for row in rows:
            await conn.execute(f'DROP INDEX IF EXISTS "{row["indexname"]}"')
        # ON ONLY: the parent alone (partitions would need ALTER INDEX ... ATTACH PARTITION).
        return [str(row["indexdef"]).replace(" ON ONLY ", " ON ") for row in rows]
    finally:
        await conn.close()


async def _build_hnsw(dsn: str, definitions: list[str]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(MARK_ALL)
        await conn.execute(f"SET maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")
        await conn.execute(f"SET max_parallel_maintenance_workers = {HNSW_BUILD_WORKERS}")
        for definition in definitions:
            await conn.execute(definition)
    finally:
        await conn.close()


HNSW_INDEXES_WITH_DATA = """
SELECT count(*) FROM pg_class AS c JOIN pg_am AS a ON a.oid = c.relam
WHERE a.amname = 'hnsw' AND c.relkind = 'i'"""


async def _hnsw_indexes(dsn: str) -> int:
    """HNSW indexes holding data (one per partition; one on an unpartitioned table)."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(HNSW_INDEXES_WITH_DATA))
    finally:
        await conn.close()


async def _vacuum(dsn: str) -> None:
    """Visibility map and statistics as a settled table would have them."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()
