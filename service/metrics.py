"""Prometheus metrics on a separate HTTP port: calls by method and code, latency, providers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from service.api.interceptor import CallObserver
from service.store.base import StoreStats
from service.store.lexical_index import LexicalCacheStats

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics(CallObserver):
    """The service's metrics, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "search_rpc_calls",
            "Finished calls by method and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "search_rpc_duration_seconds",
            "Call duration by method.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.provider_queries = Counter(
            "search_provider_queries",
            "Native queries by provider and final state.",
            ["provider", "state"],
            registry=self.registry,
        )
        self.token_refreshes = Counter(
            "search_oauth_token_refreshes",
            "Access-token refreshes by provider and outcome (ok, needs_reconnect, "
            "rate_limited, failed).",
            ["provider", "outcome"],
            registry=self.registry,
        )
        self.index_backlog = Gauge(
            "search_index_chunks_pending",
            "Chunks of every tenant without a ready vector of the configured embedding "
            "(counted every SEARCH_METRICS_BACKLOG_INTERVAL seconds).",
            registry=self.registry,
        )
        self._server: Any = None

    def observe(self, method: str, code: str, seconds: float) -> None:
        """Record a finished call."""
        self.calls.labels(method, code).inc()
        self.latency.labels(method).observe(seconds)

    def provider_query(self, provider: str, state: str) -> None:
        """Record how one native query settled."""
        self.provider_queries.labels(provider, state).inc()

    def token_refresh(self, provider: str, outcome: str) -> None:
        """Record one access-token refresh attempt and how it ended."""
        self.token_refreshes.labels(provider, outcome).inc()

    def track_store(self, stats: Callable[[], StoreStats]) -> None:
        """Read pool usage and reads by backend from the store at scrape time."""
        self.registry.register(_StoreCollector(stats))

    def serve(self, host: str, port: int) -> int:
        """Start the HTTP exporter; returns the bound port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        return int(server.server_port)

    async def close(self) -> None:
        """Stop the exporter."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _StoreCollector(Collector):
    """Store figures read at scrape time (in memory: a scrape never waits on the database)."""

    def __init__(self, stats: Callable[[], StoreStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        """Pool gauges and the searches-by-backend counter."""
        stats = self._stats()
        yield GaugeMetricFamily(
            "search_db_pool_connections_in_use",
            "Database connections running a statement (primary and replica pools).",
            value=stats.connections_in_use,
        )
        yield GaugeMetricFamily(
            "search_db_pool_connections",
            "Database connections open (primary and replica pools).",
            value=stats.connections,
        )
        reads = CounterMetricFamily(
            "search_db_reads", "Searches served, by backend.", labels=["backend"]
        )
        for backend, count in sorted(stats.reads.items()):
            reads.add_metric([backend], count)
        yield reads
        yield from _lexical_cache(stats.lexical_cache)
        cache = stats.vector_cache
        if cache is None:
            return
        yield GaugeMetricFamily(
            "search_vector_cache_bytes",
            "KNN matrices held in memory (SEARCH_SQLITE_VECTOR_CACHE_MB or "
            "SEARCH_PG_VECTOR_CACHE_MB is the budget).",
            value=cache.bytes,
        )
        yield GaugeMetricFamily(
            "search_vector_cache_projects",
            "Projects whose KNN matrix is held.",
            value=cache.projects,
        )
        for name, help_text, value in (
            ("loads", "Project matrices read from the database.", cache.loads),
            ("evictions", "Projects dropped to stay within the budget.", cache.evictions),
            ("fallbacks", "KNN searches the matrices did not answer (the scope did not fit; "
             "PostgreSQL: or had changed): the index answered.", cache.fallbacks),
        ):
            yield CounterMetricFamily(f"search_vector_cache_{name}", help_text, value=value)


def _lexical_cache(cache: LexicalCacheStats | None) -> Iterator[Metric]:
    """The store's in-process postings (either store), when on."""
    if cache is None:
        return
    yield GaugeMetricFamily(
        "search_lexical_cache_bytes",
        "Lexical postings held in memory (SEARCH_PG_LEXICAL_CACHE_MB or "
        "SEARCH_SQLITE_LEXICAL_CACHE_MB is the budget).",
        value=cache.bytes,
    )
    yield GaugeMetricFamily(
        "search_lexical_cache_projects", "Projects whose postings are held.",
        value=cache.projects,
    )
    for name, help_text, value in (
        ("loads", "Project postings read from the database.", cache.loads),
        ("evictions", "Projects dropped to stay within the budget.", cache.evictions),
        ("served", "FTS / HYBRID searches ranked from the in-process postings.", cache.served),
        ("fallbacks", "Searches ranked in SQL although the in-process postings were asked "
         "(PostgreSQL: a project had changed, or it parsed the query otherwise; both: the "
         "scope did not fit the budget).",
         cache.fallbacks),
    ):
        yield CounterMetricFamily(f"search_lexical_cache_{name}", help_text, value=value)
