"""Indexing throughput through IndexService.UpsertDocuments: documents/s and chunks/s.

Per store, with the deterministic embedder (synthetic Markdown, ~2.6 chunks per document)
and with the local MiniLM model (the first documents of the relevance collection: real
short texts, since the numpy model embeds only tens of chunks per second on two cores).
Every run starts on an empty database; the server embeds (nothing is supplied or cached).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import beir
from benchmarks.client import Client, Doc, UpsertSummary, channel
from benchmarks.servers import UPSERT_METHOD
from benchmarks.workbench import Workbench, log

TARGET_PG_DETERMINISTIC = 2000.0  # chunks/s, issue 3
STREAMS = 2
DETERMINISTIC_FACTOR = 10  # the deterministic embedder gets 10x the model's documents


def split(docs: Sequence[Doc], parts: int) -> list[list[Doc]]:
    """Round-robin split into `parts` lists."""
    return [list(docs[i::parts]) for i in range(parts)]


async def run_one(bench: Workbench, store: str, embedder: str, docs: Sequence[Doc],
                  corpus: str) -> dict[str, Any]:
    """Upsert `docs` into STREAMS projects over STREAMS concurrent streams; throughput."""
    spec = await bench.spec(store, embedder=embedder)
    server = await bench.start(spec)
    try:
        async with channel(server.target) as ch:
            client = Client(ch)
            projects = [await client.create_project(f"index-{i}") for i in range(STREAMS)]
            await server.take_timings()
            started = time.perf_counter()
            summaries: list[UpsertSummary] = await asyncio.gather(*[
                client.upsert(p, part) for p, part in zip(projects, split(docs, STREAMS),
                                                          strict=True)
            ])
            seconds = time.perf_counter() - started
        timings = [t for t in await server.take_timings() if t.method == UPSERT_METHOD]
    finally:
        await bench.stop(server)
    chunks = sum(s.chunks_written for s in summaries)
    row: dict[str, Any] = {
        "store": store, "embedder": embedder, "corpus": corpus, "streams": STREAMS,
        "documents": sum(s.documents for s in summaries), "chunks": chunks,
        "chunks_embedded": sum(s.chunks_embedded for s in summaries), "seconds": seconds,
        "docs_per_s": sum(s.documents for s in summaries) / seconds,
        "chunks_per_s": chunks / seconds,
        "server_seconds_max": max((t.seconds for t in timings), default=float("nan")),
    }
    if store == "postgres" and embedder == "deterministic":
        row["target_chunks_per_s"] = TARGET_PG_DETERMINISTIC
    log(f"index {store} {embedder} ({corpus}): {row['docs_per_s']:,.0f} docs/s, "
        f"{row['chunks_per_s']:,.0f} chunks/s")
    return row


def collection_docs(folder: Path, count: int) -> list[Doc]:
    """The first `count` documents of a BEIR collection as service documents."""
    collection = beir.load(folder, max_docs=count)
    return [Doc("doc", d.doc_id, d.title, "", d.text) for d in collection.docs]


async def measure(bench: Workbench, *, synthetic_chunks: int, model_docs: int,
                  collection: Path) -> list[dict[str, Any]]:
    """Rows per store x embedder."""
    synthetic_docs = bench.synthetic.generate(0, 0, synthetic_chunks).docs
    real = collection_docs(collection, model_docs * DETERMINISTIC_FACTOR)
    rows = []
    for store in bench.options.stores:
        rows.append(await run_one(bench, store, "deterministic", synthetic_docs, "synthetic"))
        rows.append(await run_one(bench, store, "deterministic", real, collection.name))
        rows.append(await run_one(bench, store, "local", real[:model_docs], collection.name))
    return rows
