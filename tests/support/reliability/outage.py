"""PostgreSQL stopped and started again under load: how calls end, and how fast errors stop.

A server child runs on PostgreSQL; callers repeat searches, project listings and small
upserts, each with a deadline. After `before` seconds PostgreSQL is stopped (fast shutdown:
sessions are terminated) for `down` seconds, then started again on the same data directory.
Every call is recorded with its start, end and status code. The acceptance: calls during
the outage end UNAVAILABLE (never INTERNAL, never a hang past their deadline), and errors
stop within 5 s of the restart, without restarting the service.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from search_client.pb.search.v1 import index_pb2, index_pb2_grpc
from search_client.pb.search.v1 import project_search_pb2 as ppb
from search_client.pb.search.v1 import project_search_pb2_grpc as pgrpc
from tests.support.reliability.load import percentile, seed_corpus
from tests.support.reliability.process import served

RECOVERY_LIMIT = 5.0
REPO = Path(__file__).resolve().parents[3]


PgControl = Callable[[str], None]  # "stop", "start" or "close", returns when done

_CONTROL = (
    "import sys; from pathlib import Path; from tests.support.pg import PgServer; "
    "server = PgServer(dsn='', owned=True, pgdata=Path(sys.argv[1]), "
    "system_user=sys.argv[2] or None); getattr(server, sys.argv[3])()"
)


def isolated_control(pg: Any) -> PgControl:
    """Stop/start/close a tests.support.pg.PgServer from a fresh Python process.

    As root, pg_ctl runs as another user, so pg_ctl is forked (not vforked); forked from a
    process full of gRPC threads, the child now and then dies of SIGSEGV before pg_ctl runs.
    A helper process without gRPC does the fork instead (it is spawned with vfork itself).
    """

    def control(action: str) -> None:
        subprocess.run(
            [sys.executable, "-c", _CONTROL, str(pg.pgdata), pg.system_user or "", action],
            check=True, cwd=REPO, timeout=300, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        if action == "close":
            pg.owned = False  # closed by the helper: nothing left for this process to stop

    return control


@dataclass(frozen=True)
class CallRecord:
    """One finished call: kind, start and end (seconds since the run began), status code."""

    kind: str
    start: float
    end: float
    code: str

    @property
    def seconds(self) -> float:
        """Duration."""
        return self.end - self.start


@dataclass
class OutageReport:
    """Every call, and when the database went down and came back."""

    deadline: float
    calls: list[CallRecord] = field(default_factory=list)
    stop_began: float = 0.0
    stopped: float = 0.0
    start_began: float = 0.0
    started: float = 0.0
    health: list[tuple[float, str]] = field(default_factory=list)  # readiness samples
    server_log: str = ""  # the child's stderr (tracebacks of INTERNAL errors land here)
    details: set[str] = field(default_factory=set)  # every distinct error message seen

    def during(self) -> list[CallRecord]:
        """Calls that overlapped the outage (from the stop command to the restart)."""
        return [c for c in self.calls if c.end > self.stop_began and c.start < self.started]

    def hung(self) -> list[CallRecord]:
        """Calls that outlived their deadline by more than half a second."""
        return [c for c in self.calls if c.seconds > self.deadline + 0.5]

    def last_error_after_restart(self) -> float | None:
        """Seconds from the restart to the end of the last failed call (None: no error)."""
        failed = [c.end for c in self.calls if c.code != "OK" and c.end > self.started]
        return max(failed) - self.started if failed else None

    def summary(self) -> dict[str, Any]:
        """JSON-ready figures."""
        during = self.during()
        failed_during = [c for c in during if c.code != "OK"]
        after = self.last_error_after_restart()
        codes_before = Counter(c.code for c in self.calls if c.end <= self.stop_began)
        return {
            "deadline_s": self.deadline,
            "calls": len(self.calls),
            "calls_before_outage_by_code": dict(codes_before),
            "outage_s": round(self.started - self.stop_began, 2),
            "calls_during_outage": len(during),
            "calls_during_outage_by_code": dict(Counter(c.code for c in during)),
            "failed_calls_max_ms": round(max((c.seconds for c in failed_during), default=0) * 1000,
                                         1),
            "failed_calls_p99_ms": round(
                percentile([c.seconds for c in failed_during], 0.99) * 1000, 1
            ),
            "hung_calls": len(self.hung()),
            "errors_after_restart_s": None if after is None else round(after, 2),
            "recovered_within_limit": after is None or after <= RECOVERY_LIMIT,
            "calls_after_recovery_by_code": dict(
                Counter(c.code for c in self.calls if c.start > self.started + RECOVERY_LIMIT)
            ),
            "readiness_during_outage": sorted(
                {s for t, s in self.health if self.stopped < t < self.start_began}
            ),
            "readiness_after_recovery": sorted(
                {s for t, s in self.health if t > self.started + RECOVERY_LIMIT}
            ),
            "server_errors_logged": self.server_log.count("unhandled error"),
        }


async def _upserts(pid: int, n: int) -> AsyncIterator[index_pb2.UpsertDocumentsRequest]:
    yield index_pb2.UpsertDocumentsRequest(
        project_id=pid,
        documents=[index_pb2.Document(kind="note", row_id=f"w{n % 50}", title=f"write {n}",
                                      body=f"nebula write number {n}")],
    )


def _calls(channel: grpc.aio.Channel, ids: list[int], deadline: float) -> list[
    tuple[str, Callable[[int], Awaitable[Any]]]
]:
    search = pgrpc.ProjectSearchServiceStub(channel)
    index = index_pb2_grpc.IndexServiceStub(channel)

    async def search_call(n: int) -> None:
        request = ppb.SearchProjectsRequest(
            scope=ppb.ProjectScope(project_ids=ids), text="nebula orbit",
            mode=ppb.SEARCH_MODE_HYBRID if n % 2 else ppb.SEARCH_MODE_FTS, max_pages=2,
        )
        async for _ in search.SearchProjects(request, timeout=deadline):
            pass

    async def list_call(n: int) -> None:
        await index.ListProjects(index_pb2.ListProjectsRequest(page_size=2), timeout=deadline)

    async def upsert_call(n: int) -> None:
        await index.UpsertDocuments(_upserts(ids[0], n), timeout=deadline)

    return [("search", search_call), ("search", search_call), ("list", list_call),
            ("upsert", upsert_call)]


async def _caller(
    channel: grpc.aio.Channel, ids: list[int], report: OutageReport, origin: float,
    done: asyncio.Event, number: int,
) -> None:
    calls = _calls(channel, ids, report.deadline)
    n = number
    while not done.is_set():
        kind, call = calls[n % len(calls)]
        n += 1
        began = time.perf_counter()
        code = "OK"
        try:
            await call(n)
        except grpc.aio.AioRpcError as error:
            code = error.code().name
            report.details.add(f"{code}: {error.details()} {error.trailing_metadata()}")
        ended = time.perf_counter()
        report.calls.append(CallRecord(kind, began - origin, ended - origin, code))
        if code != "OK":
            await asyncio.sleep(0.05)  # a client backing off a little, as the typed client does


async def _watch_health(
    target: str, report: OutageReport, origin: float, done: asyncio.Event
) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="search.v1.ProjectSearchService")
        while not done.is_set():
            reply = await stub.Check(request, timeout=2)
            status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            report.health.append((time.perf_counter() - origin, status))
            await asyncio.sleep(0.25)


async def outage_scenario(
    workdir: Path,
    control: PgControl,
    dsn: str,
    *,
    before: float = 3.0,
    down: float = 4.0,
    after: float = 8.0,
    concurrency: int = 16,
    deadline: float = 2.0,
) -> OutageReport:
    """Load a PostgreSQL-backed server child, stop and restart PostgreSQL, record every call."""
    report = OutageReport(deadline)
    env = {"SEARCH_DATABASE_URL": dsn, "SEARCH_READINESS_INTERVAL": "0.5"}
    async with (
        served(workdir, env) as server,
        grpc.aio.insecure_channel(server.target) as channel,
    ):
        ids = await seed_corpus(channel, projects=2, documents=100)
        origin = time.perf_counter()
        done = asyncio.Event()
        callers = [
            asyncio.create_task(_caller(channel, ids, report, origin, done, i))
            for i in range(concurrency)
        ]
        watcher = asyncio.create_task(_watch_health(server.target, report, origin, done))
        await asyncio.sleep(before)
        report.stop_began = time.perf_counter() - origin
        await asyncio.to_thread(control, "stop")
        report.stopped = time.perf_counter() - origin
        await asyncio.sleep(down)
        report.start_began = time.perf_counter() - origin
        await asyncio.to_thread(control, "start")
        report.started = time.perf_counter() - origin
        await asyncio.sleep(after)
        done.set()
        await asyncio.gather(*callers, watcher)
    report.server_log = server.log()
    return report
