"""`peers`: the service beside tantivy, LanceDB and exact numpy on the same data (issue 18).

What the store holds is exported from its database and indexed by each peer; then every
query runs on every engine and mode, one query at a time, the order rotated per query so no
engine always goes first (or always follows the same one). The service is timed three ways:
its store's one call per page (`store.search(plan)` in this process), the retrieval
statement alone, and the gRPC call (server time from its interceptor, and client time).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.client import Client, Key, channel
from benchmarks.corpus import scopes
from benchmarks.measure import server_search_times
from benchmarks.peers_engines import TOP, ExactPeer, LancePeer, Query, TantivyPeer
from benchmarks.peers_export import Exported, export_postgres, export_sqlite
from benchmarks.peers_service import (
    Statement,
    open_statement,
    open_store,
    search_plan,
    store_search,
)
from benchmarks.servers import ChildServer
from benchmarks.stats import ratio, summarize
from benchmarks.workbench import LoadedCorpus, log
from service.embeddings import build_embedder
from service.embeddings.base import EmbeddingIdentity
from service.settings import Settings
from service.store import sqlite_path
from service.store.base import Mode, Store

SCOPE_SIZE = 10
WARMUP = 3
Timed = tuple[float, list[Key]]


@dataclass
class Series:
    """One engine in one mode: its timings and top-10 keys by query number."""

    engine: str
    mode: str
    call: Callable[[Query], Awaitable[Timed]]
    optional: bool = False  # an error stops this series (recorded) instead of the run
    seconds: list[float] = field(default_factory=list)
    keys: dict[int, list[Key]] = field(default_factory=dict)
    spent: float = 0.0
    stopped: str = ""

    async def run(self, number: int, query: Query, budget: float, minimum: int) -> None:
        """Time one query; stop the series once it used its budget (or failed, if optional)."""
        try:
            seconds, keys = await self.call(query)
        except Exception as error:
            if not self.optional:
                raise
            self.stopped = f"{type(error).__name__}: {error}"[:300]
            return
        self.seconds.append(seconds)
        self.keys[number] = keys
        self.spent += seconds
        if len(self.seconds) >= minimum and self.spent > budget:
            self.stopped = f"budget: {budget:g} s used after {len(self.seconds)} queries"


@dataclass
class _Peers:
    tantivy: TantivyPeer
    lance: LancePeer
    exact: ExactPeer
    build_seconds: dict[str, float]


def workload(
    corpus: LoadedCorpus, vectors: Sequence[Sequence[float]], texts: Sequence[str], seed: int = 31
) -> list[Query]:
    """Queries with their embeddings, each over a random scope of 10 projects."""
    picked = scopes(corpus.projects, len(texts), SCOPE_SIZE, seed)
    return [
        Query(tuple(s), t, np.asarray(v, dtype=np.float32))
        for s, t, v in zip(picked, texts, vectors, strict=True)
    ]


async def export(corpus: LoadedCorpus, settings: Settings, identity: EmbeddingIdentity) -> Exported:
    """The corpus as its store holds it."""
    if corpus.store == "postgres":
        return await export_postgres(corpus.spec.database_url, identity)
    path = sqlite_path(settings.database_url.reveal(), settings.data_dir)
    return await asyncio.to_thread(export_sqlite, path, identity)


def _build_peers(data: Exported, directory: Path) -> _Peers:
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    tantivy = TantivyPeer(data, directory / "tantivy")
    seconds["tantivy"] = time.perf_counter() - started
    started = time.perf_counter()
    lance = LancePeer(data, directory / "lancedb")
    seconds["lancedb"] = time.perf_counter() - started
    started = time.perf_counter()
    exact = ExactPeer(data)
    seconds["numpy"] = time.perf_counter() - started
    return _Peers(tantivy, lance, exact, seconds)


def _timed(search: Callable[[Query], list[Key]]) -> Callable[[Query], Awaitable[Timed]]:
    async def call(query: Query) -> Timed:
        started = time.perf_counter()
        keys = search(query)
        return time.perf_counter() - started, keys

    return call


def _peer_series(peers: _Peers) -> list[Series]:
    return [
        Series("tantivy", "fts", _timed(peers.tantivy.search)),
        Series("lancedb", "fts", _timed(peers.lance.fts_search)),
        Series("lancedb", "vector", _timed(peers.lance.vector_search)),
        Series("lancedb", "hybrid", _timed(peers.lance.hybrid_search)),
        Series("numpy", "vector", _timed(peers.exact.search)),
    ]


def _service_series(
    store: Store,
    statement: Statement | None,
    client: Client,
    settings: Settings,
    identity: EmbeddingIdentity,
    grpc_calls: list[str],
) -> list[Series]:
    def raw(mode: Mode) -> Callable[[Query], Awaitable[Timed]]:
        async def call(query: Query) -> Timed:
            return await store_search(store, search_plan(settings, identity, query, mode))

        return call

    def alone(mode: Mode, runner: Statement) -> Callable[[Query], Awaitable[Timed]]:
        async def call(query: Query) -> Timed:
            return await runner.run(search_plan(settings, identity, query, mode)), []

        return call

    def grpc(mode: Mode) -> Callable[[Query], Awaitable[Timed]]:
        async def call(query: Query) -> Timed:
            result = await client.search(query.scope, query.text, mode.value, page_size=TOP)
            grpc_calls.append(mode.value)
            return result.seconds, [h.key for h in result.hits]

        return call

    series = [Series("store", m.value, raw(m)) for m in Mode]
    if statement is not None:
        series += [Series("statement", m.value, alone(m, statement), optional=True) for m in Mode]
    return series + [Series("grpc", m.value, grpc(m)) for m in Mode]


async def warm(series: list[Series], queries: Sequence[Query]) -> None:
    """The first queries once on every series, untimed (caches, prepared statements)."""
    for query in queries[:WARMUP]:
        for one in series:
            await one.call(query)


async def interleave(
    series: list[Series], queries: Sequence[Query], budget: float, minimum: int = 10
) -> None:
    """Every query on every live series, the order rotated by one each query."""
    for number, query in enumerate(queries):
        live = [s for s in series if not s.stopped]
        if not live:
            break
        shift = number % len(live)
        for one in live[shift:] + live[:shift]:
            await one.run(number, query, budget, minimum)


def overlap(a: Series, b: Series) -> dict[str, float]:
    """Mean share of common documents in the two top-10 lists (of the longer list's length)
    over the queries both ran where either found something."""
    both = [(set(a.keys[n]), set(b.keys[n])) for n in sorted(set(a.keys) & set(b.keys))]
    shares = [len(x & y) / max(len(x), len(y)) for x, y in both if x or y]
    return {
        "queries": float(len(shares)),
        "mean": float(np.mean(shares)) if shares else float("nan"),
        "queries_with_overlap": float(sum(1 for s in shares if s > 0)),
    }


def _series_row(one: Series, server: list[float] | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "engine": one.engine,
        "mode": one.mode,
        "queries": len(one.seconds),
        "latency": summarize(one.seconds),
        "stopped": one.stopped,
    }
    if server is not None:
        row["server"] = summarize(server)
    return row


def _ratios(rows: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, float]]:
    def pair(slow: tuple[str, str, str], fast: tuple[str, str]) -> dict[str, float]:
        top, bottom = rows.get(slow[:2], {}).get(slow[2], {}), rows.get(fast, {}).get("latency", {})
        return {
            q: ratio(top.get(f"{q}_ms", float("nan")), bottom.get(f"{q}_ms", float("nan")))
            for q in ("p50", "p95")
        }

    return {
        "fts_store_over_tantivy": pair(("store", "fts", "latency"), ("tantivy", "fts")),
        "fts_statement_over_tantivy": pair(("statement", "fts", "latency"), ("tantivy", "fts")),
        "hybrid_server_over_lancedb": pair(("grpc", "hybrid", "server"), ("lancedb", "hybrid")),
        "vector_server_over_numpy": pair(("grpc", "vector", "server"), ("numpy", "vector")),
    }


@dataclass
class _Measured:
    series: list[Series]
    server: dict[str, list[float]]  # gRPC server seconds by mode, in call order
    seconds: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    statement: str  # how the statement alone was timed, or why it was not
    statement_timed: bool


async def _queries(corpus: LoadedCorpus, count: int) -> tuple[EmbeddingIdentity, list[Query]]:
    embedder = build_embedder(corpus.spec.embedder)  # the server's: same text, same vector
    try:
        texts = corpus.bench.synthetic.queries(count)
        return embedder.identity, workload(corpus, await embedder.embed(texts), texts)
    finally:
        await embedder.aclose()


async def _run(
    corpus: LoadedCorpus,
    peers: _Peers,
    settings: Settings,
    identity: EmbeddingIdentity,
    queries: list[Query],
    budget: float,
) -> _Measured:
    store = await open_store(settings, identity)
    statement, skipped = await open_statement(settings, identity)
    grpc_calls: list[str] = []
    try:
        async with channel(corpus.server.target) as ch:
            series = _peer_series(peers) + _service_series(
                store, statement, Client(ch), settings, identity, grpc_calls
            )
            await _server_idle(corpus.server)
            await warm(series, queries)
            load_before = os.getloadavg()
            await corpus.server.take_timings()  # nothing but the measured calls from here
            grpc_calls.clear()
            started = time.perf_counter()
            await interleave(series, queries, budget)
            seconds = time.perf_counter() - started
            load_after = os.getloadavg()
            if statement is not None and statement.counters():
                log(f"statement runner: {statement.counters()}")
                for mode in (Mode.FTS, Mode.HYBRID):
                    plans = [search_plan(settings, identity, q, mode) for q in queries]
                    log(f"lexical cache, {mode.value}: {await statement.agreement(plans)}")
    finally:
        if statement is not None:
            await statement.close()
        await store.close()
    server = await server_search_times(corpus.server, len(grpc_calls))
    by_mode = {
        m.value: [s for s, c in zip(server, grpc_calls, strict=True) if c == m.value] for m in Mode
    }
    how = statement.description if statement is not None else skipped
    return _Measured(series, by_mode, seconds, load_before, load_after, how, statement is not None)


IDLE_SHARE = 0.05  # a server using under 5% of a core for a second is idle
IDLE_WAIT = 600.0  # seconds at most


async def _server_idle(server: Any) -> None:
    """Wait until the server is idle: after a load, its background refresh reads every
    moved project's matrix and postings again (minutes at 1M chunks), which a deployed
    server finishes long before its searches; timed meanwhile, every series shared the
    cores with it. A server in the harness' own process is not waited for."""
    if not isinstance(server, ChildServer):
        return
    started = time.monotonic()
    before = server.cpu_seconds()
    while time.monotonic() - started < IDLE_WAIT:
        await asyncio.sleep(1.0)
        after = server.cpu_seconds()
        if after - before < IDLE_SHARE:
            log(f"server idle after {time.monotonic() - started:.0f} s")
            return
        before = after
    log(f"server still busy after {IDLE_WAIT:.0f} s; timing anyway")


async def measure(corpus: LoadedCorpus, count: int, budget: float) -> dict[str, Any]:
    """One row: every engine and mode on the corpus at its current size."""
    settings = Settings.from_mapping(corpus.spec.env())
    identity, queries = await _queries(corpus, count)
    started = time.perf_counter()
    data = await export(corpus, settings, identity)
    export_seconds = time.perf_counter() - started
    log(
        f"peers {corpus.store} {corpus.chunks:,}: exported {len(data.chunk_texts):,} chunks "
        f"in {export_seconds:.1f} s; building tantivy, LanceDB and numpy"
    )
    directory = corpus.bench.workdir / f"peers-{corpus.store}-{corpus.chunks}"
    try:
        peers = _build_peers(data, directory)  # on this thread: the bindings' objects stay here
        exported = data.summary()
        del data
        measured = await _run(corpus, peers, settings, identity, queries, budget)
    finally:
        await asyncio.to_thread(shutil.rmtree, directory, True)
    row = _row(corpus, peers, measured, len(queries), budget)
    row["exported"] = exported
    row["build_seconds"] = {"export": export_seconds, **peers.build_seconds}
    _log(row)
    return row


def _row(
    corpus: LoadedCorpus, peers: _Peers, measured: _Measured, queries: int, budget: float
) -> dict[str, Any]:
    rows = {
        (s.engine, s.mode): _series_row(s, measured.server[s.mode] if s.engine == "grpc" else None)
        for s in measured.series
    }
    found = {(s.engine, s.mode): s for s in measured.series}
    return {
        "store": corpus.store,
        "chunks": corpus.chunks,
        "documents": corpus.documents,
        "projects": len(corpus.projects),
        "scope": SCOPE_SIZE,
        "queries": queries,
        "budget_seconds": budget,
        "load_average_before": [round(x, 2) for x in measured.load_before],
        "load_average_after": [round(x, 2) for x in measured.load_after],
        "measured_seconds": measured.seconds,
        "engines": {
            "tantivy": peers.tantivy.describe(),
            "lancedb": peers.lance.describe(),
            "numpy": peers.exact.describe(),
            "statement": {
                "timed": measured.statement_timed,
                "how": measured.statement if measured.statement_timed else "",
                "skipped": "" if measured.statement_timed else measured.statement,
            },
        },
        "peer_timings_exclude": "query embedding (done once beforehand; the service's gRPC "
        "server time includes its own)",
        "series": list(rows.values()),
        "ratios": _ratios(rows),
        "overlap": {
            "tantivy_vs_store_fts": overlap(found[("tantivy", "fts")], found[("store", "fts")]),
            "tantivy_vs_grpc_fts": overlap(found[("tantivy", "fts")], found[("grpc", "fts")]),
            "numpy_vs_store_vector": overlap(
                found[("numpy", "vector")], found[("store", "vector")]
            ),
            "lancedb_vs_store_hybrid": overlap(
                found[("lancedb", "hybrid")], found[("store", "hybrid")]
            ),
        },
    }


def _log(row: dict[str, Any]) -> None:
    ratios = row["ratios"]
    log(
        f"peers {row['store']} {row['chunks']:,}: FTS store/tantivy p50 "
        f"x{ratios['fts_store_over_tantivy']['p50']:.2f}, HYBRID server/LanceDB "
        f"x{ratios['hybrid_server_over_lancedb']['p50']:.2f}, VECTOR server/numpy "
        f"x{ratios['vector_server_over_numpy']['p50']:.2f} (load {row['load_average_after']})"
    )
