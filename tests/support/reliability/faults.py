"""Randomized provider faults injected into workspace searches, and the check of every outcome.

Each search sends up to four queries to each of the eight fake providers. A random share of
the queries is faulted: the query text carries a unique marker word and the provider's fake
misbehaves only for requests that carry it (so concurrent searches never take each other's
faults). Every call must succeed; every faulted query must settle in the state its fault
implies (with the right retry delay for rate limits), and every healthy query must be OK and
fused into the page.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from search_client.pb.search.v1 import accounts_pb2_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.base import FakeProvider
from service.fakes.server import Fault, Request
from service.fakes.suite import FakeProviders
from tests.support.reliability.process import served
from tests.support.reliability.world import (
    PROVIDERS,
    WORDS,
    add_item,
    connect_all,
    native_text,
    new_fakes,
    queries_for,
    seed,
    server_env,
    start_fakes,
    stop_fakes,
)

FAULT_KINDS = (
    "timeout",  # no answer before the provider request timeout
    "5xx",  # 500 / 502 / 503 / 504
    "429",  # 429 with Retry-After (seconds)
    "quota",  # GitHub-style 403, x-ratelimit-remaining: 0 and a reset time
    "malformed",  # 200 with broken JSON
    "truncated",  # Content-Length larger than the body, then close
    "reset",  # TCP reset instead of an answer
    "drip",  # the body trickles in slower than the timeout allows
    "shape",  # 200 with valid JSON of the wrong shape
)
EXPECTED_STATE = {
    "timeout": wpb.QUERY_STATE_TIMED_OUT,
    "5xx": wpb.QUERY_STATE_FAILED,
    "429": wpb.QUERY_STATE_RATE_LIMITED,
    "quota": wpb.QUERY_STATE_RATE_LIMITED,
    "malformed": wpb.QUERY_STATE_FAILED,
    "truncated": wpb.QUERY_STATE_FAILED,
    "reset": wpb.QUERY_STATE_FAILED,
    "drip": wpb.QUERY_STATE_TIMED_OUT,
    "shape": wpb.QUERY_STATE_FAILED,
}
# JSON that no search answer can be (an object or array without items reads as "no results").
_SHAPES: tuple[object, ...] = (None, "text", 42, True)


@dataclass(eq=False)
class MarkedFault(Fault):
    """A fault that applies only to requests carrying `marker` (URL or body)."""

    marker: str = ""

    def matches(self, request: Request) -> bool:
        """True for requests of the faulted query."""
        return self.marker in request.target or self.marker.encode() in request.body


@dataclass(frozen=True)
class Injected:
    """The fault planted for one query; `reset_at` (epoch seconds) for quota faults."""

    kind: str
    retry_after: float | None = None
    reset_at: float | None = None


@dataclass
class FaultReport:
    """What a fault run did and every deviation it saw."""

    searches: int = 0
    queries: int = 0
    faults: int = 0
    healthy: int = 0
    failed_calls: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    states: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, object]:
        """JSON-ready figures."""
        ordered = sorted(self.latencies)
        return {
            "searches": self.searches,
            "queries": self.queries,
            "faults_injected": self.faults,
            "healthy_queries": self.healthy,
            "failed_calls": self.failed_calls,
            "wrong_outcomes": len(self.problems),
            "faults_by_kind": dict(sorted(self.by_kind.items())),
            "states": dict(sorted(self.states.items())),
            "seconds": round(self.seconds, 2),
            "search_p50_ms": round(_pick(ordered, 0.50) * 1000, 1),
            "search_p99_ms": round(_pick(ordered, 0.99) * 1000, 1),
            "first_problems": self.problems[:10],
        }


def _pick(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@dataclass(frozen=True)
class FaultTiming:
    """How long the slow faults stall, relative to the server's provider request timeout."""

    request_timeout: float  # SEARCH_PROVIDER_REQUEST_TIMEOUT of the server

    @property
    def stall(self) -> float:
        """Latency of a `timeout` fault."""
        return self.request_timeout * 3

    @property
    def drip_interval(self) -> float:
        """Seconds between 16-byte pieces of a `drip` fault (3+ pieces exceed the timeout)."""
        return self.request_timeout * 0.5


def make_fault(kind: str, marker: str, rng: random.Random, timing: FaultTiming) -> (
    tuple[MarkedFault, Injected]
):
    """The fault object for a fake and what the query's status must say."""
    if kind == "timeout":
        return MarkedFault("latency", delay=timing.stall, marker=marker), Injected(kind)
    if kind == "5xx":
        status = rng.choice((500, 502, 503, 504))
        return MarkedFault("status", status=status, marker=marker), Injected(kind)
    if kind == "429":
        wait = rng.randint(1, 600)
        fault = MarkedFault("status", status=429, headers={"Retry-After": str(wait)},
                            marker=marker)
        return fault, Injected(kind, float(wait))
    if kind == "quota":
        reset = int(time.time()) + rng.randint(30, 3600)
        headers = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)}
        fault = MarkedFault("status", status=403, headers=headers,
                            body={"message": "API rate limit exceeded"}, marker=marker)
        return fault, Injected(kind, reset_at=float(reset))
    if kind == "drip":
        return MarkedFault("drip", delay=timing.drip_interval, marker=marker), Injected(kind)
    if kind == "shape":
        return MarkedFault("body", body=rng.choice(_SHAPES), marker=marker), Injected(kind)
    return MarkedFault(kind, marker=marker), Injected(kind)  # malformed, truncated, reset


@dataclass
class PlannedSearch:
    """One search request and the fault planted for each faulted query index."""

    request: wpb.SearchWorkspaceRequest
    injected: dict[int, Injected]
    planted: list[tuple[FakeProvider, MarkedFault]]
    planted_at: float = 0.0  # epoch seconds

    def plant(self) -> None:
        """Install the faults in their fakes."""
        self.planted_at = time.time()
        for fake, fault in self.planted:
            fake.server.faults.append(fault)

    def remove(self) -> None:
        """Take the faults out again."""
        for fake, fault in self.planted:
            faults = fake.server.faults
            faults[:] = [f for f in faults if f is not fault]


def plan_search(
    number: int, fakes: FakeProviders, rng: random.Random, timing: FaultTiming,
    fault_rate: float,
) -> PlannedSearch:
    """Four queries per provider, each faulted with probability `fault_rate`."""
    queries: list[wpb.NativeQuery] = []
    injected: dict[int, Injected] = {}
    planted: list[tuple[FakeProvider, MarkedFault]] = []
    by_name = {fake.name: fake for fake in fakes.all()}
    for provider in PROVIDERS:
        words = list(WORDS)
        rng.shuffle(words)
        for query in queries_for(provider, tuple(words)):
            index = len(queries)
            if rng.random() < fault_rate:
                marker = f"zq{number:05d}x{index:02d}"
                query.text = native_text(provider, marker)
                kind = rng.choice(FAULT_KINDS)
                if kind == "drip" and query.kind == wpb.QUERY_KIND_REPOSITORIES:
                    kind = "timeout"  # a matching repository would widen every later search
                if kind == "drip":  # an answer with a result, so the body is long enough to drip
                    add_item(fakes, provider, marker, 10_000_000 + number * 100 + index,
                             repository=False)
                fault, expected = make_fault(kind, marker, rng, timing)
                injected[index] = expected
                planted.append((by_name[provider], fault))
            queries.append(query)
    request = wpb.SearchWorkspaceRequest(queries=queries, top_k=50)
    return PlannedSearch(request, injected, planted)


def check_search(
    planned: PlannedSearch, statuses: list[wpb.QueryStatus], pages: list[wpb.FusedPage],
) -> list[str]:
    """Every deviation of one search's outcome from what its faults imply."""
    problems: list[str] = []
    latest = {s.query_index: s for s in statuses}
    count = len(planned.request.queries)
    if sorted(latest) != list(range(count)):
        problems.append(f"statuses for {sorted(latest)} instead of 0..{count - 1}")
    if len(pages) != 1:
        return [*problems, f"{len(pages)} pages instead of 1"]
    contributed = {c.query_index for r in pages[0].results for c in r.contributions}
    for index, status in latest.items():
        fault = planned.injected.get(index)
        if fault is None:
            problems += _check_healthy(index, status, contributed)
        else:
            problems += _check_faulted(index, status, fault, contributed)
            problems += _check_delay(index, status, fault, planned.planted_at)
    if planned.injected and pages[0].ranking_is_exact:
        problems.append("a page with faulted queries claims an exact ranking")
    return problems


def _check_healthy(index: int, status: wpb.QueryStatus, contributed: set[int]) -> list[str]:
    if status.state != wpb.QUERY_STATE_OK or status.result_count < 1:
        name = wpb.QueryState.Name(status.state)
        return [f"healthy query {index}: {name} {status.message!r} ({status.result_count})"]
    if index not in contributed:
        return [f"healthy query {index} contributed nothing to the fused page"]
    return []


def _check_faulted(
    index: int, status: wpb.QueryStatus, fault: Injected, contributed: set[int]
) -> list[str]:
    problems: list[str] = []
    want = EXPECTED_STATE[fault.kind]
    if status.state != want:
        problems.append(
            f"query {index} ({cpb.Provider.Name(status.provider)}) with fault {fault.kind}: "
            f"{wpb.QueryState.Name(status.state)} {status.message!r}, "
            f"want {wpb.QueryState.Name(want)}"
        )
    if index in contributed:
        problems.append(f"faulted query {index} ({fault.kind}) contributed results")
    return problems


def _check_delay(index: int, status: wpb.QueryStatus, fault: Injected, planted_at: float) -> (
    list[str]
):
    """RetryInfo: Retry-After as sent; a quota reset as seconds left when the answer came."""
    got = status.retry_after.ToMilliseconds() / 1000
    if fault.retry_after is not None:
        low = high = fault.retry_after
    elif fault.reset_at is not None:  # answered between planting and now
        low, high = fault.reset_at - time.time() - 1.5, fault.reset_at - planted_at + 0.5
    else:
        return []
    if low - 0.01 <= got <= high + 0.01:
        return []
    return [f"query {index} ({fault.kind}): retry_after {got} s, want {low:.1f}..{high:.1f} s"]


async def run_one(
    stub: wgrpc.WorkspaceSearchServiceAsyncStub,
    planned: PlannedSearch,
    report: FaultReport,
    *,
    seconds: float,
    metadata: tuple[tuple[str, str], ...] = (),
) -> None:
    """Run one planned search (deadline `seconds`) and fold its outcome into `report`."""
    statuses: list[wpb.QueryStatus] = []
    pages: list[wpb.FusedPage] = []
    planned.plant()
    started = time.perf_counter()
    try:
        async for message in stub.SearchWorkspace(planned.request, timeout=seconds,
                                                  metadata=metadata):
            if message.HasField("page"):
                pages.append(message.page)
            else:
                statuses.append(message.query_status)
    except grpc.aio.AioRpcError as error:
        report.failed_calls += 1
        report.problems.append(f"call failed: {error.code().name} {error.details()}")
        return
    finally:
        planned.remove()
    report.latencies.append(time.perf_counter() - started)
    report.searches += 1
    report.queries += len(planned.request.queries)
    report.faults += len(planned.injected)
    report.healthy += len(planned.request.queries) - len(planned.injected)
    report.by_kind.update(f.kind for f in planned.injected.values())
    report.states.update(wpb.QueryState.Name(s.state) for s in statuses)
    report.problems += check_search(planned, statuses, pages)


async def run_faults(
    stub: wgrpc.WorkspaceSearchServiceAsyncStub,
    fakes: FakeProviders,
    *,
    min_faults: int,
    lanes: int,
    request_timeout: float,
    fault_rate: float = 0.75,
    seed: int = 8,
    call_timeout: float = 30.0,
    progress: Callable[[FaultReport], None] | None = None,
) -> FaultReport:
    """Run searches on `lanes` concurrent callers until `min_faults` faults were injected."""
    rng = random.Random(seed)
    timing = FaultTiming(request_timeout)
    report = FaultReport()
    numbers = iter(range(1_000_000))
    planned_faults = 0
    started = time.perf_counter()

    async def lane() -> None:
        nonlocal planned_faults
        while planned_faults < min_faults:
            planned = plan_search(next(numbers), fakes, rng, timing, fault_rate)
            planned_faults += len(planned.injected)
            await run_one(stub, planned, report, seconds=call_timeout)
            if progress is not None:
                progress(report)

    await asyncio.gather(*(lane() for _ in range(lanes)))
    report.seconds = time.perf_counter() - started
    return report


async def faults_scenario(
    workdir: Path, *, min_faults: int, lanes: int = 6, request_timeout: float = 1.0
) -> FaultReport:
    """Fakes here, the server as a child process, then `run_faults`; everything stopped."""
    fakes = new_fakes()
    await start_fakes(fakes)
    seed(fakes)
    env = server_env(fakes) | {
        "SEARCH_EMBEDDER": "none",
        "SEARCH_PROVIDER_REQUEST_TIMEOUT": str(request_timeout),
        "SEARCH_SHARED_PROVIDER_WAITS": "false",  # one fault per query, checked per query
    }
    try:
        async with served(workdir, env) as server, grpc.aio.insecure_channel(
            server.target
        ) as channel:
            await connect_all(accounts_pb2_grpc.AccountServiceStub(channel), fakes)
            report = await run_faults(
                wgrpc.WorkspaceSearchServiceStub(channel), fakes, min_faults=min_faults,
                lanes=lanes, request_timeout=request_timeout,
            )
        await asyncio.sleep(FaultTiming(request_timeout).stall)  # let stalled fakes finish
    finally:
        await stop_fakes(fakes)
    return report
