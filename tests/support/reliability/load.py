"""Closed-loop load: N concurrent streaming searches for S seconds; latency, errors and RSS.

Each of the N callers repeats one streaming search after another (every page read) on one of
a few shared channels: three in four are project searches (FTS, VECTOR or HYBRID over every
project, two pages), one in four a workspace search over the fake Slack and Jira. The server
runs as a child process, so its resident set size is sampled alone (every 0.25 s); memory is
flat when the mean of the last quarter of the run stays within 10 % of the first quarter.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from search_client.pb.search.v1 import accounts_pb2_grpc, index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.suite import FakeProviders
from tests.support.reliability.process import served
from tests.support.reliability.world import (
    PROVIDERS,
    WORDS,
    connect_all,
    native_text,
    new_fakes,
    seed,
    server_env,
    start_fakes,
    stop_fakes,
)

CHANNELS = 8
DEADLINE = 30.0
SAMPLE_EVERY = 0.25
FLAT_TOLERANCE = 0.10
VOCABULARY = (
    "nebula", "comet", "orbit", "galaxy", "quasar", "pulsar", "aurora", "eclipse", "meteor",
    "planet", "crater", "photon", "plasma", "gravity", "horizon", "spectrum", "telescope",
    "asteroid", "satellite", "cluster", *WORDS,
)
MODES = (ppb.SEARCH_MODE_FTS, ppb.SEARCH_MODE_VECTOR, ppb.SEARCH_MODE_HYBRID)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); 0 without values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class LoadReport:
    """Calls, errors, latencies (seconds) and RSS samples (seconds since start, bytes)."""

    concurrency: int
    seconds: float
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    rss: list[tuple[float, int]] = field(default_factory=list)
    elapsed: float = 0.0
    error_samples: dict[str, str] = field(default_factory=dict)  # one message per kind:code

    @property
    def calls(self) -> int:
        """Finished calls (ok or not)."""
        return sum(len(v) for v in self.latencies.values()) + sum(self.errors.values())

    def quarter_means(self) -> tuple[float, float]:
        """Mean RSS (bytes) of the first and of the last quarter of the run."""
        if not self.rss:
            return 0.0, 0.0
        span = self.rss[-1][0] or 1.0
        first = [b for t, b in self.rss if t <= span / 4] or [self.rss[0][1]]
        last = [b for t, b in self.rss if t >= span * 3 / 4] or [self.rss[-1][1]]
        return sum(first) / len(first), sum(last) / len(last)

    @property
    def memory_growth(self) -> float:
        """Relative growth of mean RSS from the first to the last quarter."""
        first, last = self.quarter_means()
        return (last - first) / first if first else 0.0

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures."""
        every = [s for v in self.latencies.values() for s in v]
        first, last = self.quarter_means()
        mib = 1024 * 1024
        return {
            "concurrency": self.concurrency,
            "seconds": round(self.elapsed, 1),
            "calls": self.calls,
            "calls_per_s": round(self.calls / self.elapsed, 1) if self.elapsed else 0.0,
            "errors": sum(self.errors.values()),
            "errors_by_code": dict(self.errors),
            "error_samples": dict(self.error_samples),
            "p50_ms": round(percentile(every, 0.50) * 1000, 1),
            "p95_ms": round(percentile(every, 0.95) * 1000, 1),
            "p99_ms": round(percentile(every, 0.99) * 1000, 1),
            "max_ms": round(max(every, default=0.0) * 1000, 1),
            "by_kind": {
                kind: {
                    "calls": len(values),
                    "p50_ms": round(percentile(values, 0.50) * 1000, 1),
                    "p99_ms": round(percentile(values, 0.99) * 1000, 1),
                }
                for kind, values in sorted(self.latencies.items())
            },
            "rss_samples": len(self.rss),
            "rss_first_quarter_mib": round(first / mib, 1),
            "rss_last_quarter_mib": round(last / mib, 1),
            "rss_max_mib": round(max((b for _, b in self.rss), default=0) / mib, 1),
            "rss_growth_pct": round(self.memory_growth * 100, 2),
            "memory_flat": self.memory_growth <= FLAT_TOLERANCE,
        }


async def seed_corpus(
    channel: grpc.aio.Channel,
    *,
    projects: int = 4,
    documents: int = 150,
    seed: int = 5,
    metadata: tuple[tuple[str, str], ...] = (),
) -> list[int]:
    """Create projects of short Markdown notes through IndexService; returns their ids."""
    stub = index_pb2_grpc.IndexServiceStub(channel)
    rng = random.Random(seed)
    ids: list[int] = []
    for p in range(projects):
        created = await stub.CreateProject(
            index_pb2.CreateProjectRequest(name=f"load-{p}"), metadata=metadata
        )
        ids.append(created.project.project_id)
        docs = [
            index_pb2.Document(
                kind="note",
                row_id=str(d),
                title=" ".join(rng.choices(VOCABULARY, k=3)),
                path=f"notes/{d}.md",
                body="\n\n".join(
                    "## " + " ".join(rng.choices(VOCABULARY, k=12))
                    for _ in range(rng.randint(1, 4))
                ),
            )
            for d in range(documents)
        ]

        async def stream(
            pid: int = created.project.project_id, batch: list[index_pb2.Document] = docs
        ) -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
            for start in range(0, len(batch), 100):
                yield index_pb2.UpsertDocumentsRequest(
                    project_id=pid, documents=batch[start:start + 100]
                )

        await stub.UpsertDocuments(stream(), metadata=metadata)
    return ids


@dataclass(frozen=True)
class Workload:
    """What the callers send."""

    project_ids: tuple[int, ...]
    workspace_share: float = 0.25  # 0 without fake providers

    def next_call(
        self, rng: random.Random
    ) -> tuple[str, Callable[[grpc.aio.Channel], Any]]:
        """(kind, a function that starts the streaming call on a channel)."""
        if self.workspace_share and rng.random() < self.workspace_share:
            words = rng.sample(WORDS, 2)
            queries = [
                wpb.NativeQuery(provider=PROVIDERS[p], text=native_text(p, w))
                for p in ("slack", "jira")
                for w in words
            ]
            request_w = wpb.SearchWorkspaceRequest(queries=queries, top_k=10)
            return "workspace", lambda ch: wgrpc.WorkspaceSearchServiceStub(ch).SearchWorkspace(
                request_w, timeout=DEADLINE
            )
        mode = rng.choice(MODES)
        request_p = ppb.SearchProjectsRequest(
            scope=ppb.ProjectScope(project_ids=self.project_ids),
            text=" ".join(rng.sample(VOCABULARY, rng.randint(1, 2))),
            mode=mode,
            page_size=10,
            max_pages=2,
        )
        kind = ppb.SearchMode.Name(mode).removeprefix("SEARCH_MODE_").lower()
        return kind, lambda ch: pgrpc.ProjectSearchServiceStub(ch).SearchProjects(
            request_p, timeout=DEADLINE
        )


async def _caller(
    channel: grpc.aio.Channel, workload: Workload, report: LoadReport, stop_at: float, seed: int
) -> None:
    rng = random.Random(seed)
    while time.perf_counter() < stop_at:
        kind, start = workload.next_call(rng)
        began = time.perf_counter()
        try:
            async for _ in start(channel):
                pass
        except grpc.aio.AioRpcError as error:
            report.errors[error.code().name] += 1
            report.error_samples.setdefault(f"{kind}:{error.code().name}", error.details() or "")
            continue
        report.latencies.setdefault(kind, []).append(time.perf_counter() - began)


async def _sample(report: LoadReport, rss: Callable[[], int], started: float) -> None:
    while True:
        report.rss.append((time.perf_counter() - started, rss()))
        await asyncio.sleep(SAMPLE_EVERY)


async def run_load(
    target: str,
    workload: Workload,
    *,
    concurrency: int,
    seconds: float,
    rss: Callable[[], int],
) -> LoadReport:
    """`concurrency` callers for `seconds` against `target`, sampling `rss()` meanwhile."""
    report = LoadReport(concurrency, seconds)
    # One connection per channel (gRPC would otherwise share one), like separate clients.
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(target, options=options)
        for _ in range(min(CHANNELS, concurrency))
    ]
    try:
        for channel in channels:
            await channel.channel_ready()
        started = time.perf_counter()
        sampler = asyncio.create_task(_sample(report, rss, started))
        stop_at = started + seconds
        await asyncio.gather(
            *(
                _caller(channels[i % len(channels)], workload, report, stop_at, seed=i)
                for i in range(concurrency)
            )
        )
        report.elapsed = time.perf_counter() - started
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    finally:
        for channel in channels:
            await channel.close()
    return report


async def load_scenario(
    workdir: Path, *, concurrency: int, seconds: float, fakes: FakeProviders | None = None
) -> LoadReport:
    """Fakes, a server child on SQLite, a seeded corpus, then the load; everything stopped."""
    own = fakes is None
    providers = fakes or new_fakes()
    await start_fakes(providers)
    if own:
        seed(providers)
    try:
        async with served(workdir, server_env(providers)) as server:
            async with grpc.aio.insecure_channel(server.target) as channel:
                ids = await seed_corpus(channel)
                await connect_all(accounts_pb2_grpc.AccountServiceStub(channel), providers)
            report = await run_load(
                server.target, Workload(tuple(ids)), concurrency=concurrency, seconds=seconds,
                rss=server.rss_bytes,
            )
    finally:
        if own:
            await stop_fakes(providers)
    return report
