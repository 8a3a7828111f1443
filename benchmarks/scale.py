"""Exact scan vs ANN index as the corpus grows; recall@10 of the index path against exact.

Two extra servers on the same database force the paths: one with an `exact_scan_limit` no
scope reaches (always exact), one with 0 (always the HNSW / sqlite-vec index path).
"""

from __future__ import annotations

from typing import Any

from benchmarks.client import Key, SearchResult
from benchmarks.latency import workload
from benchmarks.measure import run_queries
from benchmarks.workbench import EXACT_ALWAYS, INDEX_ALWAYS, LoadedCorpus, log

SEMANTIC = ("vector", "hybrid")
RECALL_AT = 10


def recall_at(exact: list[SearchResult], approx: list[SearchResult], k: int = RECALL_AT) -> float:
    """Mean over queries of |top-k approx ∩ top-k exact| / |top-k exact| (queries with hits)."""
    values = []
    for truth, got in zip(exact, approx, strict=True):
        wanted: set[Key] = {h.key for h in truth.hits[:k]}
        if wanted:
            values.append(len(wanted & {h.key for h in got.hits[:k]}) / len(wanted))
    return sum(values) / len(values) if values else float("nan")


async def measure(corpus: LoadedCorpus, count: int, budget: float) -> list[dict[str, Any]]:
    """Rows per semantic mode: exact and index latency, recall@10 of index vs exact."""
    exact_server = await corpus.variant(EXACT_ALWAYS)
    index_server = await corpus.variant(INDEX_ALWAYS)
    rows = []
    for mode in SEMANTIC:
        queries = workload(corpus, count, mode, seed=17)
        exact = await run_queries(exact_server, queries, warmup=min(3, count), budget=budget)
        ran = queries[:len(exact.results)]  # the same queries on both paths, for recall
        approx = await run_queries(index_server, ran, warmup=min(3, count))
        row: dict[str, Any] = {
            "store": corpus.store, "chunks": corpus.chunks, "mode": mode, "queries": len(ran),
            "exact": exact.summary(), "index": approx.summary(),
            "recall_at_10": recall_at(exact.results, approx.results),
        }
        rows.append(row)
        log(f"scale {corpus.store} {corpus.chunks:,} {mode}: exact p50 "
            f"{row['exact']['server']['p50_ms']:.1f} ms, index p50 "
            f"{row['index']['server']['p50_ms']:.1f} ms, recall@10 {row['recall_at_10']:.3f}")
    return rows
