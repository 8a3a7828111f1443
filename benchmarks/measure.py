"""Run searches one after another and pair client-side with server-side latencies."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.client import Client, SearchResult, channel
from benchmarks.servers import SEARCH_METHOD, ServerHandle
from benchmarks.stats import summarize


@dataclass(frozen=True)
class Query:
    """One search request."""

    scope: tuple[int, ...]
    text: str
    mode: str
    page_size: int = 10
    max_pages: int = 1
    kinds: tuple[str, ...] = ()  # filters (none when empty)
    directory: str = ""


@dataclass
class Run:
    """Results and latencies of a sequence of searches."""

    results: list[SearchResult] = field(default_factory=list)
    client: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Client and server latency summaries, and how the ranking was made."""
        exact = sum(1 for r in self.results if r.ranking_is_exact)
        return {
            "client": summarize(self.client),
            "server": summarize(self.server),
            "exact_share": exact / len(self.results) if self.results else float("nan"),
            "relaxed_share": (sum(1 for r in self.results if r.relaxed) / len(self.results)
                              if self.results else float("nan")),
            "mean_hits": (sum(len(r.hits) for r in self.results) / len(self.results)
                          if self.results else float("nan")),
        }


async def server_search_times(server: ServerHandle, expected: int) -> list[float]:
    """Server-side seconds of the last `expected` finished searches (all must be OK)."""
    timings = [t for t in await server.take_timings() if t.method == SEARCH_METHOD]
    failed = [t for t in timings if t.code != "OK"]
    if failed:
        raise RuntimeError(f"{len(failed)} searches failed on the server: {failed[0].code}")
    if len(timings) != expected:
        raise RuntimeError(f"server saw {len(timings)} searches, the client sent {expected}")
    return [t.seconds for t in timings]


async def run_queries(
    server: ServerHandle, queries: Sequence[Query], *, warmup: int = 0,
    budget: float = float("inf"), minimum: int = 10,
) -> Run:
    """Each query once, sequentially, after `warmup` untimed calls (the first queries again).

    Stops early once `budget` seconds have passed and at least `minimum` queries ran, so a
    slow configuration cannot stretch the whole run; the row reports how many ran.
    """
    run = Run()
    async with channel(server.target) as ch:
        client = Client(ch)
        for query in queries[:warmup]:
            await _search(client, query)
        await server.take_timings()
        started = time.perf_counter()
        for query in queries:
            if len(run.results) >= minimum and time.perf_counter() - started > budget:
                break
            result = await _search(client, query)
            run.results.append(result)
            run.client.append(result.seconds)
    run.server = await server_search_times(server, len(run.results))
    return run


async def _search(client: Client, query: Query) -> SearchResult:
    return await client.search(
        query.scope, query.text, query.mode, page_size=query.page_size, max_pages=query.max_pages,
        kinds=query.kinds, directory=query.directory,
    )
