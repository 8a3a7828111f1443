"""Relevance on any BEIR-layout collection, through the real server, on both stores.

The collection is indexed into one project (the server embeds with the local MiniLM model),
every query runs in FTS, VECTOR, HYBRID (the service's default fusion, SUM), HYBRID_RRF
(`fusion = RRF`) and HYBRID_MAX_MIN (`fusion = MAX_MIN`), and "RRF" fuses the FTS and VECTOR
lists here, the way workspace search fuses provider lists (reciprocal rank fusion, k = 60),
as a check of the service's own RRF. Each row counts the queries that returned nothing,
and with both stores the mean top-10 overlap of their FTS lists is reported. A diagnostic
run, FTS_ANY, sends each query as its content words joined by explicit OR, showing what plain
any-term BM25 matching gives on the same index (FTS proper tries the strict AND of all words
first and relaxes to OR only when that finds nothing). Metrics come from
ir-measures (trec_eval through pytrec-eval-terrier): nDCG@10, MAP over the top 1000
(AP@1000), Recall@100, MRR, and full-depth nDCG to compare with published runs.

Query text is lower-cased: collections such as vaswani-npl ship upper-case topics, and the
service reads upper-case AND / OR / NOT as operators (a user typing natural language would
not). `--keep-case` sends the text unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ir_measures
from ir_measures import AP, RR, R, nDCG

from benchmarks import beir
from benchmarks.client import MODES, Client, Doc, Hit, channel
from benchmarks.index import split
from benchmarks.measure import server_search_times
from benchmarks.servers import ServerHandle
from benchmarks.stats import summarize
from benchmarks.workbench import Workbench, log
from service.projects.lexical_tokens import STOPWORDS, word_tokens
from service.ranking.rrf import DEFAULT_K, fuse

MEASURES = (nDCG @ 10, AP @ 1000, R @ 100, RR, nDCG)
NAMES = {"nDCG@10": "ndcg_at_10", "AP@1000": "map", "R@100": "recall_at_100", "RR": "mrr",
         "nDCG": "ndcg"}
RUNS = (*MODES, "hybrid_rrf", "hybrid_max_min", "rrf", "fts_any")
PROJECT = "relevance"
# From the collection's README (shared/data/vaswani-npl/README.md): published Terrier runs
# (trec_eval map and full-depth ndcg, 1000 results) and the reference runs measured on this
# machine kind (OR of lower-cased words, top 1000).
BASELINES: dict[str, list[dict[str, Any]]] = {
    "vaswani-npl": [
        {"run": "Terrier BM25 (published)", "map": 0.2965, "ndcg": 0.6212},
        {"run": "Terrier TF_IDF (published)", "map": 0.2909, "ndcg": 0.6154},
        {"run": "Terrier PL2 (published)", "map": 0.2763, "ndcg": 0.6012},
        {"run": "SQLite FTS5 bm25, porter (reference run)", "map": 0.2805, "ndcg_at_10": 0.4306},
        {"run": "SQLite FTS5 bm25, no stemming (reference run)", "map": 0.2133,
         "ndcg_at_10": 0.3583},
        {"run": "PostgreSQL OR tsquery, ts_rank (reference run)", "map": 0.2332,
         "ndcg_at_10": 0.3606},
        {"run": "PostgreSQL plainto_tsquery AND, ts_rank (reference run)", "map": 0.0125,
         "ndcg_at_10": 0.0429},
    ],
}
FTS_MAP_TARGET = 0.28  # issue 7, both stores

RunDict = dict[str, dict[str, float]]


def as_run(ranked: dict[str, list[str]]) -> RunDict:
    """Ranked doc ids per query as a run whose scores keep exactly our order."""
    return {q: {d: float(len(docs) - i) for i, d in enumerate(docs)} for q, docs in ranked.items()}


def evaluate(qrels: dict[str, dict[str, int]], ranked: dict[str, list[str]]) -> dict[str, float]:
    """Mean of each measure over every judged query (a query with no results scores 0)."""
    judged = [q for q in ranked if q in qrels]
    sums = {name: 0.0 for name in NAMES.values()}
    for per_query in per_query_values(qrels, ranked).values():
        for name, value in per_query.items():
            sums[name] += value
    return {name: total / len(judged) if judged else float("nan") for name, total in sums.items()}


def per_query_values(
    qrels: dict[str, dict[str, int]], ranked: dict[str, list[str]]
) -> dict[str, dict[str, float]]:
    """Each measure of each judged query that returned something (the others score 0)."""
    judged = [q for q in ranked if q in qrels]
    run = {q: docs for q, docs in as_run(ranked).items() if docs}
    values: dict[str, dict[str, float]] = {}
    for metric in ir_measures.iter_calc(list(MEASURES), {q: qrels[q] for q in judged}, run):
        values.setdefault(metric.query_id, {})[NAMES[str(metric.measure)]] = float(metric.value)
    return values


def paired(qrels: dict[str, dict[str, int]], a: dict[str, list[str]],
           b: dict[str, list[str]]) -> dict[str, float]:
    """Per judged query, AP of run `a` against run `b`: how many queries each wins (by more
    than 1e-9), and the mean difference."""
    first, second = per_query_values(qrels, a), per_query_values(qrels, b)
    judged = [q for q in a.keys() | b.keys() if q in qrels]
    diffs = [first.get(q, {}).get("map", 0.0) - second.get(q, {}).get("map", 0.0)
             for q in judged]
    return {"wins": sum(d > 1e-9 for d in diffs), "losses": sum(d < -1e-9 for d in diffs),
            "ties": sum(abs(d) <= 1e-9 for d in diffs),
            "mean_difference": sum(diffs) / len(diffs) if diffs else float("nan")}


def rrf(
    fts: dict[str, list[str]], vector: dict[str, list[str]], depth: int
) -> dict[str, list[str]]:
    """Workspace-style fusion of the FTS and VECTOR lists of every query."""
    return {q: [f.key for f in fuse([fts.get(q, []), vector.get(q, [])], DEFAULT_K)][:depth]
            for q in fts.keys() | vector.keys()}


async def index_collection(server: ServerHandle, collection: beir.Collection) -> dict[str, Any]:
    """Upsert the collection into one project (two concurrent streams)."""
    docs = [Doc("doc", d.doc_id, d.title, "", d.text) for d in collection.docs]
    async with channel(server.target) as ch:
        client = Client(ch)
        project = await client.create_project(PROJECT)
        started = time.perf_counter()
        for part in split(docs, 2):
            await client.upsert(project, part)
        seconds = time.perf_counter() - started
    await server.take_timings()
    return {"project": project, "documents": len(docs), "seconds": seconds}


async def run_mode(
    server: ServerHandle, project: int, queries: dict[str, str], mode: str, depth: int,
    fusion: str = "",
) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """Every query in `mode`, reading up to `depth` results (paged by 1000)."""
    page_size = min(depth, 1000)
    pages = -(-depth // page_size)
    ranked: dict[str, list[str]] = {}
    client_seconds: list[float] = []
    relaxed = 0
    async with channel(server.target) as ch:
        client = Client(ch)
        for qid, text in queries.items():
            result = await client.search([project], text, mode, page_size=page_size,
                                         max_pages=pages, fusion=fusion)
            ranked[qid] = _doc_ids(result.hits)[:depth]
            client_seconds.append(result.seconds)
            relaxed += result.relaxed
    server_seconds = await server_search_times(server, len(queries))
    info = {"client": summarize(client_seconds), "server": summarize(server_seconds),
            "relaxed_queries": relaxed,
            "empty_queries": sum(not docs for docs in ranked.values()),
            "mean_results": sum(len(v) for v in ranked.values()) / max(1, len(ranked))}
    return ranked, info


def any_term(queries: dict[str, str]) -> dict[str, str]:
    """Diagnostic queries: the content words joined by explicit OR (never strict AND first)."""
    out = {}
    for qid, text in queries.items():
        words = [w for w in word_tokens(text.lower()) if w not in STOPWORDS]
        out[qid] = " OR ".join(dict.fromkeys(words)) or text
    return out


def _doc_ids(hits: Sequence[Hit]) -> list[str]:
    return [h.key[2] for h in hits]


async def run_store(bench: Workbench, store: str, collection: beir.Collection,
                    queries: dict[str, str], *, depth: int, cache: str) -> list[dict[str, Any]]:
    """Index, query every mode, evaluate; one row per run."""
    spec = await bench.spec(store, embedder="local", embed_cache=cache)
    server = await bench.start(spec)
    try:
        log(f"relevance {store}: indexing {len(collection.docs):,} documents (local model)")
        indexed = await index_collection(server, collection)
        log(f"relevance {store}: indexed in {indexed['seconds']:.0f} s")
        ranked: dict[str, dict[str, list[str]]] = {}
        infos: dict[str, dict[str, Any]] = {}
        for mode in MODES:
            ranked[mode], infos[mode] = await run_mode(server, indexed["project"], queries,
                                                       mode, depth)
        ranked["hybrid_rrf"], infos["hybrid_rrf"] = await run_mode(
            server, indexed["project"], queries, "hybrid", depth, fusion="rrf")
        ranked["hybrid_max_min"], infos["hybrid_max_min"] = await run_mode(
            server, indexed["project"], queries, "hybrid", depth, fusion="max_min")
        ranked["fts_any"], infos["fts_any"] = await run_mode(
            server, indexed["project"], any_term(queries), "fts", depth)
        infos["fts_any"]["note"] = "diagnostic: FTS with the query written as w1 OR w2 OR ..."
    finally:
        await bench.stop(server)
    ranked["rrf"] = rrf(ranked["fts"], ranked["vector"], depth)
    infos["rrf"] = {"note": f"fused here from the fts and vector lists (k={DEFAULT_K})",
                    "empty_queries": sum(not docs for docs in ranked["rrf"].values())}
    comparison = {"store": store, "run": "hybrid", "against": "hybrid_rrf",
                  **paired(collection.qrels, ranked["hybrid"], ranked["hybrid_rrf"])}
    log(f"relevance {store}: HYBRID (SUM) against HYBRID_RRF per query: {comparison}")
    rows = []
    for run in RUNS:
        metrics = evaluate(collection.qrels, ranked[run])
        rows.append({"store": store, "run": run, **metrics, **infos[run],
                     "index_seconds": indexed["seconds"], "ranked": ranked[run],
                     **({"paired": comparison} if run == "hybrid" else {})})
        log(f"relevance {store} {run}: nDCG@10 {metrics['ndcg_at_10']:.4f} "
            f"MAP {metrics['map']:.4f} R@100 {metrics['recall_at_100']:.4f} "
            f"MRR {metrics['mrr']:.4f}")
    return rows


async def measure(bench: Workbench, folder: Path, *, depth: int = 1000, max_docs: int = 0,
                  max_queries: int = 0, keep_case: bool = False, cache: str = ""
                  ) -> dict[str, Any]:
    """Rows for every store, plus the collection's published baselines."""
    collection = beir.load(folder, max_docs=max_docs, max_queries=max_queries)
    queries = {q: (t if keep_case else t.lower()) for q, t in collection.queries.items()}
    rows: list[dict[str, Any]] = []
    for store in bench.options.stores:
        rows.extend(await run_store(bench, store, collection, queries, depth=depth, cache=cache))
    fts = {r["store"]: r.pop("ranked") for r in rows if r["run"] == "fts"}
    for row in rows:
        row.pop("ranked", None)
    return {
        "collection": collection.name, "folder": str(folder), "documents": len(collection.docs),
        "queries": len(queries), "judgments": sum(len(v) for v in collection.qrels.values()),
        "depth": depth, "lower_cased": not keep_case, "embedder": "local (all-MiniLM-L6-v2)",
        "metrics_library": f"ir-measures {ir_measures.__version__}",
        "rows": rows, "baselines": BASELINES.get(collection.name, []),
        "targets": {"fts_map": FTS_MAP_TARGET},
        "fts_top10_overlap": top_overlap(fts.get("sqlite"), fts.get("postgres"), 10),
    }


def top_overlap(a: dict[str, list[str]] | None, b: dict[str, list[str]] | None,
                n: int) -> float | None:
    """Mean share of the first `n` results two runs have in common (None without both)."""
    if not a or not b:
        return None
    shares = [len(set(a[q][:n]) & set(b.get(q, [])[:n])) / max(1, min(n, len(a[q]),
              len(b.get(q, [])))) for q in a]
    return sum(shares) / len(shares) if shares else None
