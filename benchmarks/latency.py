"""Latency per mode per store at 10k and 100k chunks: 50 projects, scope 10, 384-d vectors;
unfiltered, then with a kind filter (half the documents) and a directory filter (a sixth)."""

from __future__ import annotations

from typing import Any

from benchmarks.client import MODES
from benchmarks.corpus import AREAS, KINDS, scopes
from benchmarks.measure import Query, run_queries
from benchmarks.workbench import LoadedCorpus, log

SCOPE_SIZE = 10
TARGETS_MS = {"fts": 10.0, "vector": 15.0, "hybrid": 25.0}  # issue 4, PostgreSQL server p50


def workload(corpus: LoadedCorpus, count: int, mode: str, seed: int = 13,
             kinds: tuple[str, ...] = (), directory: str = "") -> list[Query]:
    """`count` searches in `mode`: synthetic queries, each over a random scope of 10."""
    texts = corpus.bench.synthetic.queries(count)
    picked = scopes(corpus.projects, count, SCOPE_SIZE, seed)
    return [Query(tuple(s), t, mode, kinds=kinds, directory=directory)
            for s, t in zip(picked, texts, strict=True)]


# The synthetic corpus' documents alternate two kinds and sit in six top directories
# (benchmarks/corpus.py). A filtered semantic search once took seconds on PostgreSQL
# (RESULTS.md, "Generic plans and filtered searches"): the filtered rows keep it timed.
FILTERS: dict[str, dict[str, Any]] = {
    "": {},
    "kind": {"kinds": (KINDS[0],)},
    "directory": {"directory": AREAS[3]},
}


async def measure(corpus: LoadedCorpus, count: int, budget: float) -> list[dict[str, Any]]:
    """One row per mode and filter on the corpus' default server (at most ~`budget` seconds
    per row)."""
    rows = []
    for name, filters in FILTERS.items():
        for mode in MODES:
            queries = workload(corpus, count, mode, **filters)
            run = await run_queries(corpus.server, queries, warmup=min(5, count), budget=budget)
            row: dict[str, Any] = {
                "store": corpus.store, "chunks": corpus.chunks, "documents": corpus.documents,
                "projects": len(corpus.projects), "scope": SCOPE_SIZE, "mode": mode,
                "filter": name, "queries": len(run.results), **run.summary(),
            }
            if corpus.store == "postgres" and not name:
                row["target_server_p50_ms"] = TARGETS_MS[mode]
            rows.append(row)
            log(f"latency {corpus.store} {corpus.chunks:,} {mode} {name or 'unfiltered'}: "
                f"server p50 {row['server']['p50_ms']:.1f} ms, client p50 "
                f"{row['client']['p50_ms']:.1f} ms")
    return rows
