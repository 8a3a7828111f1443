"""Issue 17's workspace cases against a server child: the memo bound, hostile provider numbers.

The fakes of world.py run in this process; the faults are those of faults.py (a `Fault`
with no marker or path applies to every request of its fake).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import grpc

from search_client.pb.search.v1 import accounts_pb2_grpc
from search_client.pb.search.v1 import common_pb2 as cpb
from search_client.pb.search.v1 import workspace_search_pb2 as wpb
from search_client.pb.search.v1 import workspace_search_pb2_grpc as wgrpc
from service.fakes.server import Fault
from service.fakes.suite import FakeProviders
from service.workspace.pool import MEMO_MAX_ENTRIES
from tests.support.reliability.abuse import MIB, Row
from tests.support.reliability.process import ServerProcess, served
from tests.support.reliability.world import (
    connect_all,
    new_fakes,
    queries_for,
    seed,
    server_env,
    start_fakes,
    stop_fakes,
)

MAX_RETRY_AFTER = 86_400.0  # service.workspace.statuses: a provider wait is at most a day
# Hostile numbers, each planted in every fake at once (the GitHub body only in GitHub's).
HOSTILE = (
    ("Retry-After: inf", Fault("status", status=429, headers={"Retry-After": "inf"})),
    ("Retry-After: 1e400", Fault("status", status=429, headers={"Retry-After": "1e400"})),
    ("Retry-After: 1e20", Fault("status", status=429, headers={"Retry-After": "1e20"})),
    ("x-ratelimit-reset: 99999999999999", Fault(
        "status", status=403, body={"message": "API rate limit exceeded"},
        headers={"x-ratelimit-remaining": "0", "x-ratelimit-reset": "99999999999999"})),
)
MEMO_ANSWER_BYTES = 3 * MIB  # one project answer, under the 4 MiB response limit
HUGE_TOTAL = Fault("body", body={"total_count": 2**70, "incomplete_results": False,
                                 "items": []})


async def _search(
    stub: wgrpc.WorkspaceSearchServiceAsyncStub, queries: list[wpb.NativeQuery]
) -> tuple[str, list[wpb.QueryStatus]]:
    """(call code, final status of each query)."""
    statuses: dict[int, wpb.QueryStatus] = {}
    try:
        async for message in stub.SearchWorkspace(
                wpb.SearchWorkspaceRequest(queries=queries, top_k=10), timeout=30):
            if message.HasField("query_status"):
                statuses[message.query_status.query_index] = message.query_status
    except grpc.aio.AioRpcError as error:
        return error.code().name, list(statuses.values())
    return "OK", list(statuses.values())


async def memo_bound(
    server: ServerProcess, stub: wgrpc.WorkspaceSearchServiceAsyncStub, fakes: FakeProviders,
    projects: int, answer_bytes: int,
) -> Row:
    """(3) GitLab queries naming `projects` distinct projects of `answer_bytes` answers."""
    for n in range(projects):
        fakes.gitlab.add_project(1000 + n, f"acme/big-{n}")
        fakes.gitlab.projects[-1]["description"] = "x" * answer_bytes
    await _search(stub, [wpb.NativeQuery(provider=cpb.PROVIDER_GITLAB, text="deploy",
                                         kind=wpb.QUERY_KIND_ISSUES, project="acme/app")])
    baseline, codes = server.rss_bytes(), Counter[str]()
    for n in range(projects):
        code, _ = await _search(stub, [wpb.NativeQuery(
            provider=cpb.PROVIDER_GITLAB, text="deploy", kind=wpb.QUERY_KIND_ISSUES,
            project=f"acme/big-{n}")])
        codes[code] += 1
    await asyncio.sleep(0.5)
    grown = (server.rss_bytes() - baseline) / MIB
    # MEMO_MAX_ENTRIES decoded answers kept, and 64 MB for the allocator and the last reads.
    bound = MEMO_MAX_ENTRIES * answer_bytes / MIB + 64
    unbounded = projects * answer_bytes / MIB
    return Row(f"workspace memo: {projects} distinct GitLab `project` values", "sqlite",
               f"RSS +{grown:.0f} MB ({answer_bytes / MIB:.0f} MB answers; unbounded would "
               f"keep >= {unbounded:.0f} MB); calls {dict(codes)}",
               f"RSS < +{bound:.0f} MB ({MEMO_MAX_ENTRIES} answers kept)",
               grown < bound and codes == Counter(OK=projects),
               {"projects": projects, "answer_bytes": answer_bytes,
                "rss_growth_mib": round(grown, 1), "bound_mib": round(bound, 1),
                "calls": dict(codes)})


async def hostile_numbers(
    stub: wgrpc.WorkspaceSearchServiceAsyncStub, fakes: FakeProviders
) -> Row:
    """(7) Hostile waits, reset times and totals from every adapter: no INTERNAL."""
    queries = [q for provider in ("github", "gitlab", "slack", "google_drive", "gmail",
                                  "google_calendar", "jira", "confluence")
               for q in queries_for(provider, ("deploy",))]
    calls, states, wrong = Counter[str](), Counter[str](), []
    for name, fault in (*HOSTILE, ("GitHub total_count 2**70", HUGE_TOTAL)):
        targets = [fakes.github] if fault is HUGE_TOTAL else list(fakes.all())
        for fake in targets:
            fake.server.faults.append(fault)
        try:
            code, statuses = await _search(stub, queries)
        finally:
            for fake in targets:
                fake.server.faults.remove(fault)
        calls[code] += 1
        states.update(wpb.QueryState.Name(s.state) for s in statuses)
        waits = [s.retry_after.ToTimedelta().total_seconds() for s in statuses
                 if s.HasField("retry_after")]
        if code != "OK" or len(statuses) != len(queries):
            wrong.append(f"{name}: {code}, {len(statuses)} statuses")
        if any(not 0 <= w <= MAX_RETRY_AFTER for w in waits):
            wrong.append(f"{name}: retry_after {max(waits)}")
    return Row("hostile provider numbers, 8 adapters", "sqlite",
               f"{sum(calls.values())} searches x {len(queries)} queries: calls "
               f"{dict(calls)}, states {dict(states)}; wrong: {wrong or 'none'}",
               f"every call OK, waits within {MAX_RETRY_AFTER:,.0f} s, no INTERNAL",
               not wrong, {"calls": dict(calls), "states": dict(states), "wrong": wrong})


async def workspace_cases(workdir: Path, *, projects: int, answer_bytes: int) -> list[Row]:
    """Cases 3 and 7 on one SQLite server child with the eight fakes."""
    fakes = new_fakes()
    await start_fakes(fakes)
    seed(fakes, items_per_word=2)
    env = server_env(fakes) | {"SEARCH_EMBEDDER": "none",
                               "SEARCH_SHARED_PROVIDER_WAITS": "false"}
    try:
        async with served(workdir / "workspace", env) as server, \
                grpc.aio.insecure_channel(server.target) as channel:
            await connect_all(accounts_pb2_grpc.AccountServiceStub(channel), fakes)
            stub = wgrpc.WorkspaceSearchServiceStub(channel)
            return [await memo_bound(server, stub, fakes, projects, answer_bytes),
                    await hostile_numbers(stub, fakes)]
    finally:
        await stop_fakes(fakes)
